package transport_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// TestRemoveClosedQueuePair: Remove of a closed queue pair returns nil
// whether or not a Poll has dropped it already (the Poller drops closed
// queue pairs itself, at a time the closing goroutine does not decide),
// and leaves a queue of the same QPN alone; Remove of an open queue pair
// never added is refused with monocq.ErrUnknownQPN. Before, Remove
// returned nil before the Poll and ErrUnknownQPN after it.
func TestRemoveClosedQueuePair(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 16)
	p, err := transport.NewPoller(cq)
	require.NoError(t, err)
	a, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4})
	require.NoError(t, err)
	b, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4})
	require.NoError(t, err)
	require.NoError(t, p.Add(a))
	require.NoError(t, p.Add(b))
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())

	require.NoError(t, p.Remove(a), "closed, not yet dropped by a Poll")
	require.NoError(t, p.Remove(a), "removed already")
	require.Zero(t, p.Poll(4, func(*transport.Completion) { t.Error("a completion") }))
	require.Zero(t, p.Len())
	require.NoError(t, p.Remove(b), "closed, dropped by the Poll")

	c, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4})
	require.NoError(t, err)
	require.ErrorIs(t, p.Remove(c), monocq.ErrUnknownQPN, "open, never added")

	// A closed queue pair of another device with the QPN of c.
	require.NoError(t, p.Add(c))
	e2 := transporttest.New(t, sim.Options{})
	var d *rc.QP
	for d == nil || d.QPN() < c.QPN() {
		d, err = rc.New(e2.PD[0], e2.CQ(0, 16), rc.Config{SendDepth: 4})
		require.NoError(t, err)
	}
	require.Equal(t, c.QPN(), d.QPN())
	require.NoError(t, d.Close())
	require.NoError(t, p.Remove(d))
	require.Same(t, &c.Queue, p.Lookup(c.QPN()), "the queue added for the QPN stays")
	require.NoError(t, p.Err())
}

// TestAddTwiceRefused: a queue pair added twice is refused with
// monocq.ErrDuplicateQPN, and the Poller still routes it once.
func TestAddTwiceRefused(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 16)
	p, err := transport.NewPoller(cq)
	require.NoError(t, err)
	a, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4})
	require.NoError(t, err)
	require.NoError(t, p.Add(a))
	require.ErrorIs(t, p.Add(a), monocq.ErrDuplicateQPN)
	require.Equal(t, 1, p.Len())
	require.Same(t, &a.Queue, p.Lookup(a.QPN()))
}
