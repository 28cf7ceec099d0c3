//go:build cgo && linux

package emulate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
)

// TestCQEventsUnderPreload compiles testdata/cq_events.c, which arms a CQ
// with ibv_req_notify_cq and waits in ibv_get_cq_event for the completion
// of a SEND between two RC QPs, and runs it with the emulation preloaded
// over both ABIs and both link layers: one event per arm naming the CQ
// and its context, none unarmed or for an unsolicited completion under a
// solicited arm, an async event descriptor with nothing to read, and a
// CQ destroyed with an event unread is destroyed at once.
func TestCQEventsUnderPreload(t *testing.T) {
	prog, lib := cProgram(t, "cq_events")

	for _, abi := range []string{"", emulate.ABIWrite} {
		for _, link := range []string{"infiniband", "ethernet"} {
			t.Run("abi="+abi+",link="+link, func(t *testing.T) {
				out := runPreloaded(t, prog, lib, abi, link)
				require.Equal(t, "async fd readable: 0\n"+
					"unarmed event: 0\n"+
					"events 20\n"+
					"solicited arm, unsolicited send: 0\n"+
					"solicited arm, solicited send: 1\n"+
					"async fd readable: 0\n"+
					"channel readable after destroy: 0\n"+
					"done\n", out)
			})
		}
	}
}
