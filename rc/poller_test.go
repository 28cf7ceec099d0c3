package rc_test

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// cqeImage builds a raw CQE the model would not produce.
func cqeImage(op prm.CQEOpcode, qpn uint32, counter uint16, synd prm.Syndrome) [prm.CQE64Size]byte {
	var b [prm.CQE64Size]byte
	p := unsafe.Pointer(&b)
	prm.Store32(unsafe.Add(p, prm.CQESopDropQPN), uint32(prm.OpRdmaWrite)<<prm.CQESendOpShift|qpn)
	prm.Store16(unsafe.Add(p, prm.CQEWQECounter), counter)
	b[prm.ErrCQESyndrome] = uint8(synd)
	b[prm.CQEOpOwn] = prm.OpOwn(op, prm.CQEFormatNone, false, 0)
	return b
}

func TestPollerReportsWhatItCannotMatch(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 16, RecvDepth: 4, MaxInline: 32})
	e, p, qp := x.e, x.p[0], x.qp[0]
	cqn := x.cq[0].CQN()
	p.EnableCounters()

	// A CQE for a QPN nobody added.
	require.NoError(t, e.Fabric.InjectCQE(cqn, cqeImage(prm.CQEReq, 0xabcdef, 0, 0)))
	c := e.One(p)
	require.Equal(t, transport.MatchUnknownQPN, c.Match)
	require.Nil(t, c.Queue)
	require.Equal(t, uint32(0xabcdef), c.QPN)
	require.ErrorIs(t, c.Err(), monocq.ErrUnknownQPN)
	require.ErrorIs(t, p.Err(), monocq.ErrUnknownQPN)
	require.Equal(t, uint64(1), p.Counters().UnknownQPN)

	// A send completion naming no outstanding WQE changes nothing.
	require.NoError(t, e.Fabric.InjectCQE(cqn, cqeImage(prm.CQEReq, qp.QPN(), 77, 0)))
	c = e.One(p)
	require.Equal(t, transport.MatchUnmatched, c.Match)
	require.Same(t, &qp.Queue, c.Queue)
	require.ErrorIs(t, c.Err(), transport.ErrUnmatched)
	require.Equal(t, uint64(1), qp.Unmatched())
	require.Equal(t, transport.StateReady, qp.State())

	// A receive completion on a QP with nothing posted.
	require.NoError(t, e.Fabric.InjectCQE(cqn, cqeImage(prm.CQERespSend, qp.QPN(), 0, 0)))
	require.Equal(t, transport.MatchUnmatched, e.One(p).Match)

	// An opcode a QP never gets.
	require.NoError(t, e.Fabric.InjectCQE(cqn, cqeImage(prm.CQEResizeCQ, qp.QPN(), 0, 0)))
	c = e.One(p)
	require.Equal(t, transport.MatchUnexpected, c.Match)
	require.Error(t, c.Err())

	// An error CQE with a syndrome the PRM does not define, for a WQE in
	// flight: reported by value, the WQE retired, the QP in error.
	s, err := qp.Post(42, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.Nop().Finish())
	counter := uint16(qp.SendQueue().ProducerIndex() - 1)
	require.NoError(t, e.Fabric.InjectCQE(cqn, cqeImage(prm.CQEReqErr, qp.QPN(), counter, 0x77)))
	c = pollOne(t, p)
	require.Equal(t, transport.MatchError, c.Match)
	require.Equal(t, uint64(42), c.WRID)
	require.ErrorIs(t, c.Err(), monocq.ErrUnknownSyndrome)
	require.Contains(t, c.Err().Error(), "0x77")
	require.Equal(t, transport.StateError, qp.State())
	require.Zero(t, qp.SendQueue().Outstanding())
}

// pollOne polls without running the model.
func pollOne(t *testing.T, p *transport.Poller) transport.Completion {
	var out []transport.Completion
	p.Poll(16, func(c *transport.Completion) { out = append(out, *c) })
	require.Len(t, out, 1)
	return out[0]
}

// TestCQOverrunIsReported lets more completions arrive than the CQ holds:
// the poller reports monocq.ErrOverrun, hands over what the ring holds,
// and the device (model) has moved the QP to error.
func TestCQOverrunIsReported(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 4)
	p, err := transport.NewPoller(cq)
	require.NoError(t, err)
	cq1, p1 := newPoller(e, 1, 64)
	a, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 64})
	require.NoError(t, err)
	b, err := rc.New(e.PD[1], cq1, rc.Config{SendDepth: 4})
	require.NoError(t, err)
	require.NoError(t, p.Add(a))
	require.NoError(t, p1.Add(b))
	require.NoError(t, a.Connect(b.Endpoint()))
	require.NoError(t, b.Connect(a.Endpoint()))
	for w := range 32 {
		s, err := a.Post(uint64(w), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.Nop().Finish())
	}
	a.RingDoorbell()
	e.Run()
	n := 0
	for p.Poll(64, func(c *transport.Completion) {
		require.Equal(t, transport.MatchOK, c.Match)
		require.Equal(t, uint64(n), c.WRID)
		n++
	}) > 0 {
	}
	require.Equal(t, int(p.CQ().CQECnt()), n, "the CQEs the ring held, in order")
	require.ErrorIs(t, p.Err(), monocq.ErrOverrun)
	require.Error(t, e.Fabric.CQError(cq.CQN()))
	st, err := a.Handle().State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateError, st, "the device moved the QP to error")
}

// TestCloseLeavesPollers checks that a closed QP leaves every Poller it
// was added to (those of its send and receive CQs), at the Poller's next
// Poll (a device reuses QPNs), and Remove's and Add's errors.
func TestCloseLeavesPollers(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	scq, sp := newPoller(e, 0, 16)
	rcq, rp := newPoller(e, 0, 16)
	qp, err := rc.New(e.PD[0], scq, rc.Config{SendDepth: 4, RecvDepth: 4, RecvCQ: rcq})
	require.NoError(t, err)
	other, err := rc.New(e.PD[0], scq, rc.Config{SendDepth: 4, RecvDepth: 4, RecvCQ: rcq})
	require.NoError(t, err)
	for _, p := range []*transport.Poller{sp, rp} {
		require.NoError(t, p.Add(qp))
		require.NoError(t, p.Add(other))
		require.Equal(t, 2, p.Len())
	}
	require.NoError(t, rp.Remove(other))
	require.ErrorIs(t, rp.Remove(other), monocq.ErrUnknownQPN)
	require.Error(t, rp.Remove(nil))
	require.Error(t, rp.Add(nil))
	require.ErrorIs(t, rp.Add(new(transport.Queue)), ctx.ErrInvalidArgument, "a queue that was never set up")
	require.NoError(t, qp.Close())
	for _, p := range []*transport.Poller{sp, rp} {
		require.Same(t, &qp.Queue, p.Lookup(qp.QPN()), "routed until the owner polls")
		require.Zero(t, p.Poll(16, func(*transport.Completion) { t.Error("a completion") }))
		require.Nil(t, p.Lookup(qp.QPN()))
		require.NoError(t, p.Err())
	}
	require.Equal(t, 1, sp.Len())
	require.Equal(t, 0, rp.Len())
	require.Same(t, &other.Queue, sp.Lookup(other.QPN()))
	require.ErrorIs(t, rp.Add(qp), ctx.ErrClosed, "a closed QP is refused")
	require.Zero(t, rp.Len())
	require.NoError(t, other.Close())
	require.Zero(t, sp.Poll(16, func(*transport.Completion) { t.Error("a completion") }))
	require.Zero(t, sp.Len())
}

// TestParentCloseLeavesPollers closes RC QPs through their SRQ, and
// through their PD: they leave their Poller as after their own Close. A
// QP of another device with the same QPN is refused by Add: it completes
// on another CQ.
func TestParentCloseLeavesPollers(t *testing.T) {
	e1, e2 := transporttest.New(t, sim.Options{}), transporttest.New(t, sim.Options{})
	cq, p := newPoller(e1, 0, 16)
	srq, err := transport.NewSharedReceiveQueue(e1.PD[0], ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	a, err := rc.New(e1.PD[0], cq, rc.Config{SendDepth: 4, SRQ: srq})
	require.NoError(t, err)
	require.NoError(t, p.Add(a))
	require.NoError(t, srq.Close())
	require.Equal(t, transport.StateClosed, a.State())
	require.Zero(t, p.Poll(16, func(*transport.Completion) { t.Error("a completion") }))
	require.Zero(t, p.Len(), "the QP closed with its SRQ is still routed")

	pd, err := e1.Ctx[0].AllocProtectionDomain()
	require.NoError(t, err)
	b, err := rc.New(pd, cq, rc.Config{SendDepth: 4})
	require.NoError(t, err)
	require.NoError(t, p.Add(b))
	require.NoError(t, pd.Close())
	cq2 := e2.CQ(0, 16)
	_, err = rc.New(e2.PD[0], cq2, rc.Config{SendDepth: 4})
	require.NoError(t, err)
	c, err := rc.New(e2.PD[0], cq2, rc.Config{SendDepth: 4})
	require.NoError(t, err)
	require.Equal(t, b.QPN(), c.QPN(), "two fabrics number their QPs alike")
	require.ErrorIs(t, p.Add(c), ctx.ErrInvalidArgument, "a QP of another CQ")
	require.Same(t, &b.Queue, p.Lookup(b.QPN()), "routed until the owner polls")
	require.Zero(t, p.Poll(16, func(*transport.Completion) { t.Error("a completion") }))
	require.Nil(t, p.Lookup(b.QPN()))
	require.Zero(t, p.Len(), "the QP closed with its PD is still routed")
	require.ErrorIs(t, p.Remove(c), monocq.ErrUnknownQPN)
	require.NoError(t, p.Err())
}

// TestRemoveLeavesAnotherQueueOfTheSameQPN removes from a Poller a queue
// that was never added to it but has the QPN of one that was (a queue of
// another device, or of a closed QP whose QPN the device reused): Remove
// refuses it and the queue that was added stays routed, and still leaves
// the Poller when it is closed.
func TestRemoveLeavesAnotherQueueOfTheSameQPN(t *testing.T) {
	e1, e2 := transporttest.New(t, sim.Options{}), transporttest.New(t, sim.Options{})
	cq, p := newPoller(e1, 0, 16)
	a, err := rc.New(e1.PD[0], cq, rc.Config{SendDepth: 4})
	require.NoError(t, err)
	b, err := rc.New(e2.PD[0], e2.CQ(0, 16), rc.Config{SendDepth: 4})
	require.NoError(t, err)
	require.Equal(t, a.QPN(), b.QPN(), "two fabrics number their QPs alike")
	require.NoError(t, p.Add(a))
	require.ErrorIs(t, p.Remove(b), monocq.ErrUnknownQPN)
	require.Same(t, &a.Queue, p.Lookup(a.QPN()))
	require.Equal(t, 1, p.Len())
	require.NoError(t, b.Close())
	require.Zero(t, p.Poll(16, func(*transport.Completion) { t.Error("a completion") }))
	require.Same(t, &a.Queue, p.Lookup(a.QPN()))
	require.NoError(t, a.Close())
	require.Zero(t, p.Poll(16, func(*transport.Completion) { t.Error("a completion") }))
	require.Zero(t, p.Len())
}

// TestClosedQueueDrainsUnderLoad closes a QP with CQEs of it in the ring
// while another QP on the same CQ keeps the ring from ever being found
// empty: the Poller hands over every CQE of the closed QP, as the device
// wrote it, and drops the QP once its consumer index went a whole ring
// past the close, not before.
func TestClosedQueueDrainsUnderLoad(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq, p := newPoller(e, 0, 15)
	p.EnableCounters()
	cnt := p.CQ().CQECnt()
	var qp [2]*rc.QP
	for k := range 2 {
		var err error
		qp[k], err = rc.New(e.PD[0], cq, rc.Config{SendDepth: 8, MaxInline: 16})
		require.NoError(t, err)
		peer, err := rc.New(e.PD[1], e.CQ(1, 64), rc.Config{SendDepth: 8})
		require.NoError(t, err)
		require.NoError(t, qp[k].Connect(peer.Endpoint()))
		require.NoError(t, peer.Connect(qp[k].Endpoint()))
		require.NoError(t, p.Add(qp[k]))
	}
	write := func(k int, wrid uint64) {
		st, err := qp[k].Post(wrid, wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, st.RdmaWrite(e.Addr(1, 0), e.RKey(1)).Inline([]byte("x")).FinishBlueFlame())
	}
	for w := range uint64(4) {
		write(0, w)
	}
	e.Run()
	require.NoError(t, qp[0].Close())
	var closed []uint64
	got := 0
	wrid := uint64(100)
	for round := 0; p.Lookup(qp[0].QPN()) != nil; round++ {
		require.Less(t, round, 100, "the closed QP is never dropped")
		// Two more CQEs of QP 1 before each poll of two: the ring is
		// never empty when a Poll starts.
		write(1, wrid)
		write(1, wrid+1)
		wrid += 2
		e.Run()
		before := p.CQ().ConsumerIndex()
		require.Equal(t, 2, p.Poll(2, func(c *transport.Completion) {
			require.Equal(t, transport.MatchOK, c.Match)
			if c.QPN == qp[0].QPN() {
				closed = append(closed, c.WRID)
			}
		}))
		got += 2
		if p.Lookup(qp[0].QPN()) == nil {
			require.GreaterOrEqual(t, before, cnt, "dropped before a whole ring went by")
		}
	}
	require.Equal(t, []uint64{0, 1, 2, 3}, closed)
	require.Equal(t, 1, p.Len())
	require.NoError(t, p.Err())
	require.Zero(t, p.Counters().UnknownQPN)
	require.Equal(t, uint64(got), p.Counters().Completions)
}
