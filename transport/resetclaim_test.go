package transport_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestResetDiscardsWithoutPoller resets a queue pair whose CQE lies
// unpolled in its CQ while no Poller holds it (the Poller was closed; the
// next one goes on from the same ring). As rdma-core cleans the QP's CQs
// on the way to RESET, the CQE goes with the reset: left in the ring, it
// named WQE index 0, which the first send after the reset reuses, and
// retired that send before the device ran it.
func TestResetDiscardsWithoutPoller(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 16)
	p, err := transport.NewPoller(cq)
	require.NoError(t, err)
	q, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4, RecvDepth: 4})
	require.NoError(t, err)
	require.NoError(t, p.Add(q))
	require.NoError(t, q.Connect(q.Endpoint()))
	s, err := q.Post(1, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.Nop().FinishBlueFlame())
	e.Run()
	require.Equal(t, 1, p.CQ().Ready(1), "the NOP's CQE is in the ring")
	require.NoError(t, p.Close())

	require.NoError(t, q.Reset())
	require.Zero(t, p.CQ().Ready(1), "the reset took the QP's CQE out of the ring")
	require.NoError(t, q.Connect(q.Endpoint()))
	p2, err := transport.NewPoller(cq)
	require.NoError(t, err)
	require.NoError(t, p2.Add(q))
	s, err = q.Post(2, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.Nop().FinishBlueFlame())
	require.Zero(t, p2.Poll(4, func(c *transport.Completion) {
		t.Errorf("completion WRID %d (match %v) before the device ran the NOP", c.WRID, c.Match)
	}))
	e.Run()
	var got []uint64
	p2.Poll(4, func(c *transport.Completion) {
		require.Equal(t, transport.MatchOK, c.Match)
		got = append(got, c.WRID)
	})
	require.Equal(t, []uint64{2}, got)
}
