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

// TestRCPingPongUnderPreload compiles testdata/rc_pingpong.c, two RC QPs
// of one process exchanging 100 SENDs each way through ibv_post_recv,
// ibv_post_send and ibv_poll_cq of libmlx5 as packaged, and runs it with
// the emulation preloaded, over both ABIs and both link layers: the
// model executes the WQEs libmlx5 writes and libmlx5 reads the CQEs the
// model writes.
func TestRCPingPongUnderPreload(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "rc_pingpong")
	out, err := exec.Command(cc, "-o", prog, "testdata/rc_pingpong.c", "-libverbs").CombinedOutput()
	require.NoError(t, err, "cc: %s", out)
	lib := preloadLibrary(t, dir)

	for _, c := range []struct{ abi, link string }{{"", "infiniband"}, {emulate.ABIWrite, "infiniband"}, {"", "ethernet"}} {
		t.Run("abi="+c.abi+",link="+c.link, func(t *testing.T) {
			cmd := exec.Command(prog)
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, emulate.EnvEmulate+"=1", emulate.EnvABI+"="+c.abi, emulate.EnvLink+"="+c.link)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "rounds 100 sends 200 recvs 200 bytes 102400 mismatches 0\n")
			require.Contains(t, string(out), "done\n")
		})
	}
}
