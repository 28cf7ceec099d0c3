//go:build cgo && linux

package emulate_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRCPingPongUnderPreload compiles testdata/rc_pingpong.c, two RC QPs
// of one process exchanging 100 SENDs each way through ibv_post_recv,
// ibv_post_send and ibv_poll_cq of libmlx5 as packaged, and runs it with
// the emulation preloaded, over both ABIs and both link layers: the
// model executes the WQEs libmlx5 writes and libmlx5 reads the CQEs the
// model writes.
func TestRCPingPongUnderPreload(t *testing.T) {
	prog, lib := cProgram(t, "rc_pingpong")

	runEachPreloaded(t, prog, lib, func(t *testing.T, out string) {
		require.Contains(t, out, "rounds 100 sends 200 recvs 200 bytes 102400 mismatches 0\n")
		require.Contains(t, out, "done\n")
	})
}

// TestUCPingPongUnderPreload compiles testdata/uc_pingpong.c, two UC QPs
// of one process, and runs it with the emulation preloaded over both ABIs
// and both link layers: the kernel refuses RC's RTR mask on a UC QP
// (EINVAL) and takes UC's, the QPs exchange 100 SENDs each way and an
// RDMA WRITE with immediate, and an RDMA READ completes with a local QP
// operation error.
func TestUCPingPongUnderPreload(t *testing.T) {
	prog, lib := cProgram(t, "uc_pingpong")

	runEachPreloaded(t, prog, lib, func(t *testing.T, out string) {
		require.Contains(t, out, "query state 3 dest peer mtu 3\n")
		require.Contains(t, out, "rounds 100 sends 200 recvs 200 mismatches 0\n")
		require.Contains(t, out, "write imm 1 written 1\n")
		require.Contains(t, out, "read local QP operation error\n")
		require.Contains(t, out, "done\n")
	})
}
