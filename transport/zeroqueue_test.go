package transport_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestZeroQueueReceiveGetters: a zero Queue has no receive outstanding and
// its RingRecvDoorbell does nothing, as a zero SharedReceiveQueue's
// Outstanding and RingRecvDoorbell and the zero Queue's RingDoorbell; both
// panicked.
func TestZeroQueueReceiveGetters(t *testing.T) {
	for _, q := range []*transport.Queue{new(transport.Queue), &new(rc.QP).Queue, &new(ud.QP).Queue, &new(dc.DCT).Queue} {
		require.NotPanics(t, func() {
			require.Zero(t, q.RecvOutstanding())
			q.RingRecvDoorbell()
			q.RingDoorbell()
		})
	}
}

// TestZeroSRQReceivePosts: a receive post on a zero SharedReceiveQueue
// (not made by NewSharedReceiveQueue) is refused with a
// *wqebuilder.PostError wrapping ctx.ErrInvalidArgument, as a send post on
// a zero queue pair is, and writes nothing; it panicked, while the zero
// SRQ's getters and RingRecvDoorbell answered.
func TestZeroSRQReceivePosts(t *testing.T) {
	posts := map[string]func() error{
		"PostRecv": func() error { return new(transport.SharedReceiveQueue).PostRecv(1, 0x1000, 8, 1) },
		"stages": func() error {
			return new(transport.SharedReceiveQueue).BeginRecv(1).SGE(0x1000, 8, 1).FinishDoorbell()
		},
	}
	for name, post := range posts {
		var err error
		require.NotPanics(t, func() { err = post() }, name)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
		var pe *wqebuilder.PostError
		require.ErrorAs(t, err, &pe, name)
		require.Equal(t, "post receive", pe.Op, name)
		require.True(t, pe.SRQ, name)
	}
}
