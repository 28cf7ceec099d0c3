//go:build cgo && linux

package emulate_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestResizeCQUnderPreload compiles testdata/resize_cq.c, which resizes a
// CQ with ibv_resize_cq while signalled RDMA writes of an RC loopback
// complete into it, and runs it with the emulation preloaded over both
// ABIs (RESIZE_CQ is a write command under either) and both link layers:
// libmlx5 finds the resize CQE where it looks, so that every wr_id is
// polled once and in order after growing and shrinking with completions
// outstanding; an armed CQ still raises its event; a resize below the
// completions outstanding, to no entries, or of a CQ in overrun is EINVAL.
func TestResizeCQUnderPreload(t *testing.T) {
	prog, lib := cProgram(t, "resize_cq")
	runEachPreloaded(t, prog, lib, func(t *testing.T, out string) {
		require.Equal(t, "cqe 15\n"+
			"grown: cqe 63\n"+
			"grown: 20 in order\n"+
			"shrink below the outstanding: Invalid argument\n"+
			"shrunk: cqe 15\n"+
			"shrunk: 35 in order\n"+
			"same size: 0\n"+
			"no entries: Invalid argument\n"+
			"armed: cqe 7, 40 in order\n"+
			"resize in error: Invalid argument\n"+
			"done\n", out)
	})
}
