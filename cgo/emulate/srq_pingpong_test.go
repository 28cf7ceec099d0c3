//go:build cgo && linux

package emulate_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
)

// TestSRQPingPongUnderPreload compiles testdata/srq_pingpong.c, RC QP
// pairs of one process whose receives all go through one SRQ per side
// (ibv_create_srq, ibv_post_srq_recv, ibv_query_srq, ibv_modify_srq of
// libmlx5 as packaged), and runs it with the emulation preloaded over both
// ABIs and both link layers: the model takes the receive WQEs from the SRQ
// ring libmlx5 allocated and writes the SRQ number where libmlx5's poll
// looks for it (CQE version 0), so every completion names the QP and
// buffer it should.
func TestSRQPingPongUnderPreload(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "srq_pingpong")
	out, err := exec.Command(cc, "-o", prog, "testdata/srq_pingpong.c", "-libverbs").CombinedOutput()
	require.NoError(t, err, "cc: %s", out)
	lib := preloadLibrary(t, dir)

	for _, c := range []struct{ abi, link string }{{"", "infiniband"}, {emulate.ABIWrite, "infiniband"}, {"", "ethernet"}} {
		t.Run("abi="+c.abi+",link="+c.link, func(t *testing.T) {
			cmd := exec.Command(prog)
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, emulate.EnvEmulate+"=1", emulate.EnvABI+"="+c.abi, emulate.EnvLink+"="+c.link)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			s := string(out)
			// libmlx5 asks for 2×32+1 WQEs (its wait queue), 128 once
			// rounded: the kernel answers 127.
			require.Contains(t, s, "srq max_wr 127 max_sge 1 limit 0\n", "ibv_query_srq: the kernel's max_wr, the WQE count less one")
			require.Contains(t, s, "modify limit 0: 0\n")
			require.Contains(t, s, "modify limit 4: Success\n", "the model arms the SRQ limit; its event, unread, does not hold up ibv_destroy_srq")
			require.Contains(t, s, "modify max_wr: Invalid argument\n", "mlx5_ib does not resize SRQs")
			require.Contains(t, s, "rounds 50 qps 4 sends 400 recvs 400 wrong 0 mismatches 0\n")
			require.Contains(t, s, "done\n")
		})
	}
}
