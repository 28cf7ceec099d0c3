package transport_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestResetInsideAPollOfItsCQ resets a queue pair from inside a poll of
// its CQ's ring when it was not added to the Poller polling (or no Poller
// holds the ring: transport.NewCQ's): the ring cannot be compacted there
// (monocq.CQ.Discard does nothing in a batch), so Reset refuses with
// ctx.ErrBusy and changes nothing, as inside a Poll of a Poller it was
// added to. Before, it went ahead and left the queue pair's CQEs in the
// ring, naming WQE indexes that the rebuilt rings reuse.
func TestResetInsideAPollOfItsCQ(t *testing.T) {
	nop := func(q *rc.QP, id uint64) {
		t.Helper()
		s, err := q.Post(id, wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.Nop().FinishBlueFlame())
	}
	t.Run("NewCQ", func(t *testing.T) {
		e := transporttest.New(t, sim.Options{})
		cq := e.CQ(0, 16)
		ring, err := transport.NewCQ(cq)
		require.NoError(t, err)
		q, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4})
		require.NoError(t, err)
		require.NoError(t, q.Connect(q.Endpoint()))
		nop(q, 1)
		nop(q, 2)
		e.Run()
		var inside error
		require.Equal(t, 1, ring.Poll(1, func(*monocq.CQE) { inside = q.Reset() }))
		require.ErrorIs(t, inside, ctx.ErrBusy)
		require.Equal(t, transport.StateReady, q.State())
		require.NoError(t, q.Reset())
		require.Zero(t, ring.Ready(1), "the reset took the QP's CQE out of the ring")
	})
	t.Run("Poller", func(t *testing.T) {
		e := transporttest.New(t, sim.Options{})
		cq := e.CQ(0, 16)
		p, err := transport.NewPoller(cq)
		require.NoError(t, err)
		a, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4})
		require.NoError(t, err)
		q, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4}) // not added
		require.NoError(t, err)
		require.NoError(t, p.Add(a))
		require.NoError(t, a.Connect(a.Endpoint()))
		require.NoError(t, q.Connect(q.Endpoint()))
		nop(a, 1)
		nop(q, 2)
		e.Run()
		var inside error
		require.Equal(t, 1, p.Poll(1, func(c *transport.Completion) {
			require.Equal(t, a.QPN(), c.QPN)
			inside = q.Reset()
		}))
		require.ErrorIs(t, inside, ctx.ErrBusy)
		require.Equal(t, transport.StateReady, q.State())
		require.NoError(t, q.Reset())
		require.Zero(t, p.CQ().Ready(1), "the reset took the QP's CQE out of the ring")
		require.NoError(t, p.Err())
	})
}
