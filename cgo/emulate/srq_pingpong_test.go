//go:build cgo && linux

package emulate_test

import (
	"testing"

	"github.com/stretchr/testify/require"
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
	prog, lib := cProgram(t, "srq_pingpong")

	runEachPreloaded(t, prog, lib, func(t *testing.T, out string) {
		s := out
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
