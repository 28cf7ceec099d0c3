package transport_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestClosedSendQueueStaysFull: the send queue a closed QP hands out
// (Queue.SendQueue) refuses every post with ctx.ErrClosed, also after a
// Complete with wqe_counter 0 (the counter of the first WQE any queue
// posts, e.g. from a CQE polled after the close), which retires the NOP
// that keeps it full.
func TestClosedSendQueueStaysFull(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	qp, err := rc.New(e.PD[0], e.CQ(0, 64), rc.Config{SendDepth: 8, RecvDepth: 8})
	require.NoError(t, err)
	require.NoError(t, qp.Close())
	sq := qp.SendQueue()
	require.ErrorIs(t, sq.Begin(1, 0).Nop().Finish(), ctx.ErrClosed)
	sq.Complete(0)
	require.ErrorIs(t, sq.Begin(2, 0).Nop().Finish(), ctx.ErrClosed, "a closed QP's send queue accepted a post")
	require.ErrorIs(t, sq.Begin(3, 0).Send().FinishBlueFlame(), ctx.ErrClosed)
}
