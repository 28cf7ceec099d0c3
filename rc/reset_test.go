package rc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// nops posts n signaled NOPs on q, WRIDs from wrid on, and rings once.
func nops(t *testing.T, q *rc.QP, wrid uint64, n int) {
	t.Helper()
	for i := range n {
		s, err := q.Post(wrid+uint64(i), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.Nop().Finish())
	}
	q.RingDoorbell()
}

// TestResetKeepsClosedQueueDraining: a Reset's Discard moves the CQEs it
// keeps up the ring and the consumer index past the removed ones. A queue
// pair closed earlier, whose CQEs the Poller still drains, must stay in
// the table until its last CQE is polled, however far the consumer index
// jumped: its CQE comes out as its own completion, not one of an unknown
// QPN.
func TestResetKeepsClosedQueueDraining(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq, p := newPoller(e, 0, 8)
	cq1, p1 := newPoller(e, 1, 64)
	cnt := int(p.CQ().CQECnt())
	var qp, peer [2]*rc.QP
	for i := range 2 {
		var err error
		qp[i], err = rc.New(e.PD[0], cq, rc.Config{SendDepth: uint32(cnt)})
		require.NoError(t, err)
		peer[i], err = rc.New(e.PD[1], cq1, rc.Config{SendDepth: 4})
		require.NoError(t, err)
		require.NoError(t, p.Add(qp[i]))
		require.NoError(t, p1.Add(peer[i]))
		require.NoError(t, qp[i].Connect(peer[i].Endpoint()))
		require.NoError(t, peer[i].Connect(qp[i].Endpoint()))
	}
	a, b := qp[0], qp[1]
	// Ring: half a lap of b's CQEs, then a's.
	nops(t, b, 0, cnt/2)
	e.Run()
	nops(t, a, 100, 1)
	e.Run()
	require.NoError(t, a.Close())
	require.Zero(t, p.Poll(0, func(*transport.Completion) {}), "the Poller sees a closed")
	require.Equal(t, cnt/2, p.Poll(cnt/2, func(c *transport.Completion) {
		require.Equal(t, b.QPN(), c.QPN)
	}))
	// b's CQEs after a's fill the ring but for one slot.
	nops(t, b, 200, cnt-2)
	e.Run()
	require.NoError(t, b.Reset())

	var got []transport.Completion
	for p.Poll(16, func(c *transport.Completion) { got = append(got, *c) }) > 0 {
	}
	require.Len(t, got, 1, "%+v", got)
	require.Equal(t, transport.MatchOK, got[0].Match, "%v", got[0].Err())
	require.Equal(t, uint64(100), got[0].WRID)
	require.Equal(t, a.QPN(), got[0].QPN)
	require.NoError(t, p.Err())
	require.Zero(t, p.Len()-1, "a is dropped once drained")
}

// TestResetInsidePoll resets a queue pair from the function of a Poll
// that is handing over its completions. The batch holds CQEs of the queue
// pair that Poll goes on to hand over and the ring cannot be compacted
// under it: had Reset gone ahead, those CQEs, of work requests the reset
// discarded, came out after it against the rebuilt rings (unmatched, or
// retiring a work request posted after the reset). Reset refuses with
// ctx.ErrBusy and changes nothing; after the Poll it goes ahead.
func TestResetInsidePoll(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq, p := newPoller(e, 0, 16)
	cq1, p1 := newPoller(e, 1, 64)
	a, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 8})
	require.NoError(t, err)
	b, err := rc.New(e.PD[1], cq1, rc.Config{SendDepth: 4})
	require.NoError(t, err)
	require.NoError(t, p.Add(a))
	require.NoError(t, p1.Add(b))
	require.NoError(t, a.Connect(b.Endpoint()))
	require.NoError(t, b.Connect(a.Endpoint()))
	nops(t, a, 0, 3)
	e.Run()

	var got []uint64
	p.Poll(16, func(c *transport.Completion) {
		got = append(got, c.WRID)
		require.Equal(t, transport.MatchOK, c.Match, "WRID %d: %v", c.WRID, c.Err())
		if c.WRID == 0 {
			require.ErrorIs(t, a.Reset(), ctx.ErrBusy)
			require.Equal(t, transport.StateReady, a.State())
		}
	})
	require.Equal(t, []uint64{0, 1, 2}, got)
	require.Zero(t, a.Unmatched())
	require.NoError(t, p.Err())

	// Between polls it goes ahead, with CQEs in the ring.
	nops(t, a, 3, 2)
	e.Run()
	require.NoError(t, a.Reset())
	require.NoError(t, b.Reset())
	require.NoError(t, a.Connect(b.Endpoint()))
	require.NoError(t, b.Connect(a.Endpoint()))
	nops(t, a, 10, 1)
	e.Run()
	got = got[:0]
	for p.Poll(16, func(c *transport.Completion) {
		got = append(got, c.WRID)
		require.Equal(t, transport.MatchOK, c.Match, "WRID %d: %v", c.WRID, c.Err())
	}) > 0 {
	}
	require.Equal(t, []uint64{10}, got)
	require.Zero(t, a.Unmatched())
	require.NoError(t, p.Err())
}

// A stage begun before Reset, or a send queue taken before it, belongs to
// the rings Reset replaced: its Finish fails with ctx.ErrClosed and
// nothing reaches the device.
func TestResetClosesStagesBegunBefore(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 8, RecvDepth: 8})
	e := x.e
	a, b := x.qp[0], x.qp[1]
	nops(t, a, 0, 3)
	require.Len(t, e.Drain(x.p[0], x.p[1]), 3)
	send, err := a.Post(77, wqebuilder.Signaled)
	require.NoError(t, err)
	oldSQ := a.SendQueue()
	recv := b.BeginRecv(99)
	require.NoError(t, a.Reset())
	require.NoError(t, b.Reset())
	require.NoError(t, a.Connect(b.Endpoint()))
	require.NoError(t, b.Connect(a.Endpoint()))
	require.NotSame(t, oldSQ, a.SendQueue())
	require.True(t, oldSQ.Closed())

	err = send.Nop().FinishBlueFlame()
	require.ErrorIs(t, err, ctx.ErrClosed)
	err = recv.SGE(e.Addr(1, 0), 64, e.LKey(1)).FinishDoorbell()
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.Zero(t, b.RecvOutstanding())
	require.Equal(t, uint32(0), a.SendQueue().ProducerIndex())
	require.Empty(t, e.Drain(x.p[0], x.p[1]), "no WQE of the old rings ran")

	// The new rings: one receive, one SEND, each completes once.
	require.NoError(t, b.PostRecv(5, e.Addr(1, 0), 64, e.LKey(1)))
	s, err := a.Post(6, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.Send().SGE(e.Addr(0, 0), 8, e.LKey(0)).FinishBlueFlame())
	got := e.Drain(x.p[0], x.p[1])
	require.Len(t, got, 2)
	for _, c := range got {
		require.NoError(t, c.Err())
		require.Equal(t, transport.MatchOK, c.Match)
	}
}

// TestZeroQP: a QP not made by New refuses Connect (to a valid endpoint)
// and Reset with ctx.ErrInvalidArgument, and closes without error;
// Connect and Reset panicked.
func TestZeroQP(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	peer, err := rc.New(e.PD[1], e.CQ(1, 16), rc.Config{SendDepth: 4, RecvDepth: 4})
	require.NoError(t, err)
	var q rc.QP
	require.NotPanics(t, func() {
		require.ErrorIs(t, q.Connect(peer.Endpoint()), ctx.ErrInvalidArgument)
		require.ErrorIs(t, q.Reset(), ctx.ErrInvalidArgument)
		require.Equal(t, transport.StateClosed, q.State())
		require.NoError(t, q.Close())
	})
}

// TestResetKeepsUnmatched: Unmatched counts on across a Reset, as the
// queue pair's other counters do.
func TestResetKeepsUnmatched(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 8, RecvDepth: 8})
	e, p, a := x.e, x.p[0], x.qp[0]
	require.NoError(t, e.Fabric.InjectCQE(x.cq[0].CQN(), cqeImage(prm.CQEReq, a.QPN(), 77, 0)))
	require.Equal(t, transport.MatchUnmatched, e.One(p).Match)
	require.Equal(t, uint64(1), a.Unmatched())
	require.NoError(t, a.Reset())
	require.Equal(t, uint64(1), a.Unmatched(), "Reset cleared Unmatched")
}
