package transport_test

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// completeSendRig is an RC pair whose CQEs the test reads from the rings
// itself, so that it can hand each one to CompleteSend and Complete.
type completeSendRig struct {
	e      *transporttest.Env
	a, b   *rc.QP
	ca, cb *monocq.CQ
}

func newCompleteSendRig(t *testing.T) *completeSendRig {
	e := transporttest.New(t, sim.Options{})
	acq, bcq := e.CQ(0, 64), e.CQ(1, 64)
	a, err := rc.New(e.PD[0], acq, rc.Config{SendDepth: 16, MaxInline: 64})
	require.NoError(t, err)
	b, err := rc.New(e.PD[1], bcq, rc.Config{SendDepth: 1, RecvDepth: 16})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close(); b.Close() })
	require.NoError(t, a.Connect(b.Endpoint()))
	require.NoError(t, b.Connect(a.Endpoint()))
	ca, err := transport.NewCQ(acq)
	require.NoError(t, err)
	cb, err := transport.NewCQ(bcq)
	require.NoError(t, err)
	return &completeSendRig{e: e, a: a, b: b, ca: ca, cb: cb}
}

// next returns the one CQE the ring holds after the model ran.
func next(t *testing.T, e *transporttest.Env, cq *monocq.CQ) *monocq.CQE {
	t.Helper()
	e.Run()
	require.Equal(t, 1, cq.Ready(1))
	c := cq.Next()
	require.NotNil(t, c)
	return c
}

// A successful send completion: CompleteSend fills the Completion exactly
// as Complete does (checked against a twin rig that ran Complete) and
// retires the same WQEs; a successful receive: CompleteRecv does. Any
// other CQE: each reports false and changes neither the Completion nor the
// queue, and Complete then handles it as if they had not been called.
func TestCompleteSendMatchesComplete(t *testing.T) {
	x, y := newCompleteSendRig(t), newCompleteSendRig(t)
	sentinel := transport.Completion{WRID: 0xdead, QPN: 7, Opcode: prm.CQERespSendImm, Immediate: 9,
		SourceQPN: 3, SLID: 4, SL: 5, GRH: true, Solicited: true, Syndrome: 1, VendorSyndrome: 2,
		Match: transport.MatchUnmatched, WQECounter: 77}
	for _, rig := range []*completeSendRig{x, y} {
		// An unsignaled write, then a signaled write with immediate:
		// one CQE that retires both.
		s, err := rig.a.Post(10, 0)
		require.NoError(t, err)
		require.NoError(t, s.RdmaWrite(rig.e.Addr(1, 0), rig.e.RKey(1)).Inline([]byte("12345678")).Finish())
		require.NoError(t, rig.b.PostRecv(20, rig.e.Addr(1, 64), 64, rig.e.LKey(1)))
		s, err = rig.a.Post(11, wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.RdmaWriteImm(rig.e.Addr(1, 8), rig.e.RKey(1), 42).Inline([]byte("abcdefgh")).FinishBlueFlame())
	}

	// The send completion.
	var got, want transport.Completion
	got, want = sentinel, sentinel
	cx, cy := next(t, x.e, x.ca), next(t, y.e, y.ca)
	require.True(t, x.a.Queue.CompleteSend(cx, &got))
	y.a.Queue.Complete(cy, &want)
	require.Same(t, &x.a.Queue, got.Queue)
	require.Same(t, &y.a.Queue, want.Queue)
	got.Queue, want.Queue = nil, nil
	require.Equal(t, want, got)
	require.Equal(t, uint64(11), got.WRID)
	require.Equal(t, transport.MatchOK, got.Match)
	require.Equal(t, y.a.SendQueue().ConsumerIndex(), x.a.SendQueue().ConsumerIndex())
	require.Zero(t, x.a.SendQueue().Outstanding())
	x.ca.Release()
	y.ca.Release()

	// The same CQE again (its WQE is retired): not CompleteSend's.
	got = sentinel
	require.False(t, x.a.Queue.CompleteSend(cx, &got))
	require.Equal(t, sentinel, got)
	x.a.Queue.Complete(cx, &got)
	require.Equal(t, transport.MatchUnmatched, got.Match)

	// The send completion is not CompleteRecv's either.
	got = sentinel
	require.False(t, x.a.Queue.CompleteRecv(cx, &got))
	require.Equal(t, sentinel, got)

	// The receive completion on the other side: not CompleteSend's, and
	// CompleteRecv fills the Completion exactly as Complete does on the
	// twin rig, and retires the same receive.
	cr, cry := next(t, x.e, x.cb), next(t, y.e, y.cb)
	got, want = sentinel, sentinel
	require.False(t, x.b.Queue.CompleteSend(cr, &got))
	require.Equal(t, sentinel, got)
	require.True(t, x.b.Queue.CompleteRecv(cr, &got))
	y.b.Queue.Complete(cry, &want)
	require.Same(t, &x.b.Queue, got.Queue)
	got.Queue, want.Queue = nil, nil
	require.Equal(t, want, got)
	require.Equal(t, transport.MatchOK, got.Match)
	require.Equal(t, uint64(20), got.WRID)
	require.Equal(t, uint32(42), got.Immediate)
	require.Equal(t, y.b.Queue.RecvOutstanding(), x.b.Queue.RecvOutstanding())
	require.Zero(t, x.b.Queue.RecvOutstanding())
	// Again (its receive is retired): not CompleteRecv's; Complete says so.
	got = sentinel
	require.False(t, x.b.Queue.CompleteRecv(cr, &got))
	require.Equal(t, sentinel, got)
	x.b.Queue.Complete(cr, &got)
	require.Equal(t, transport.MatchUnmatched, got.Match)
	x.cb.Release()
	y.cb.Release()

	// An error completion (a wrong rkey): not CompleteSend's, and the
	// queue stays ready until Complete sees it.
	s, err := x.a.Post(12, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.RdmaWrite(x.e.Addr(1, 0), x.e.RKey(1)^0xff).Inline([]byte("x")).FinishBlueFlame())
	ce := next(t, x.e, x.ca)
	got = sentinel
	require.False(t, x.a.Queue.CompleteSend(ce, &got))
	require.False(t, x.a.Queue.CompleteRecv(ce, &got))
	require.Equal(t, sentinel, got)
	require.Equal(t, transport.StateReady, x.a.Queue.State())
	require.Equal(t, uint32(1), x.a.SendQueue().Outstanding())
	x.a.Queue.Complete(ce, &got)
	require.Equal(t, transport.MatchError, got.Match)
	require.Equal(t, transport.StateError, x.a.Queue.State())
	x.ca.Release()
}

// CompleteRecv retires a successful receive into an SRQ exactly as
// Complete does: the same Completion, the same slot back on the free list
// (the free list compared with a twin rig that ran Complete),
// and the same refusals: a duplicate CQE, and a counter naming no slot,
// which it leaves to Complete.
func TestCompleteRecvSRQMatchesComplete(t *testing.T) {
	type rig struct {
		e   *transporttest.Env
		a   *rc.QP
		srq *transport.SharedReceiveQueue
		b   *rc.QP
		cb  *monocq.CQ
	}
	mk := func() *rig {
		e := transporttest.New(t, sim.Options{})
		srq, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: 4})
		require.NoError(t, err)
		a, err := rc.New(e.PD[0], e.CQ(0, 64), rc.Config{SendDepth: 16, MaxInline: 64})
		require.NoError(t, err)
		bcq := e.CQ(1, 64)
		b, err := rc.New(e.PD[1], bcq, rc.Config{SendDepth: 1, SRQ: srq})
		require.NoError(t, err)
		t.Cleanup(func() { a.Close(); b.Close(); srq.Close() })
		require.NoError(t, a.Connect(b.Endpoint()))
		require.NoError(t, b.Connect(a.Endpoint()))
		cb, err := transport.NewCQ(bcq)
		require.NoError(t, err)
		return &rig{e, a, srq, b, cb}
	}
	x, y := mk(), mk()
	// The free list: each slot's next_wqe_index (the rigs' data segments
	// hold addresses of their own).
	srqRing := func(r *rig) []uint16 {
		d := provider.SRQDescriptor(r.srq.Handle())
		ring := unsafe.Slice((*byte)(d.Buf), int(d.WQECnt*d.Stride))
		var next []uint16
		for i := range int(d.WQECnt) {
			next = append(next, binary.BigEndian.Uint16(ring[i*int(d.Stride)+prm.SRQNextWQEIndex:]))
		}
		return next
	}
	sentinel := transport.Completion{WRID: 0xdead, Match: transport.MatchUnmatched, WQECounter: 77}
	for round := range 3 { // round the free list: the slots come back after its tail
		for _, r := range []*rig{x, y} {
			for i := range 3 {
				require.NoError(t, r.srq.PostRecv(uint64(100*round+i), r.e.Addr(1, 64*i), 64, r.e.LKey(1)))
			}
			for i := range 3 {
				s, err := r.a.Post(uint64(i), 0)
				require.NoError(t, err)
				require.NoError(t, s.SendImm(uint32(round<<8|i)).Inline([]byte("payload!")).Finish())
			}
			r.a.RingDoorbell()
		}
		for i := range 3 {
			cx, cy := next(t, x.e, x.cb), next(t, y.e, y.cb)
			got, want := sentinel, sentinel
			require.True(t, x.b.Queue.CompleteRecv(cx, &got), "round %d, receive %d", round, i)
			y.b.Queue.Complete(cy, &want)
			require.Same(t, &x.b.Queue, got.Queue)
			got.Queue, want.Queue = nil, nil
			require.Equal(t, want, got)
			require.Equal(t, transport.MatchOK, got.Match)
			require.Equal(t, uint64(100*round+i), got.WRID)
			require.Equal(t, uint32(round<<8|i), got.Immediate)
			require.Equal(t, srqRing(y), srqRing(x), "the free list")
			require.Equal(t, y.srq.Outstanding(), x.srq.Outstanding())

			// The same CQE again: its slot is free.
			got = sentinel
			require.False(t, x.b.Queue.CompleteRecv(cx, &got))
			require.Equal(t, sentinel, got)
			x.cb.Release()
			y.cb.Release()
		}
		require.Zero(t, x.srq.Outstanding())
	}

	// A counter past the last slot: not CompleteRecv's, and Complete
	// finds no receive there.
	require.NoError(t, x.srq.PostRecv(1, x.e.Addr(1, 0), 64, x.e.LKey(1)))
	s, err := x.a.Post(1, 0)
	require.NoError(t, err)
	require.NoError(t, s.Send().Inline([]byte("x")).FinishBlueFlame())
	c := next(t, x.e, x.cb)
	c[prm.CQEWQECounter], c[prm.CQEWQECounter+1] = 0, 200
	got := sentinel
	require.False(t, x.b.Queue.CompleteRecv(c, &got))
	require.Equal(t, sentinel, got)
	x.b.Queue.Complete(c, &got)
	require.Equal(t, transport.MatchUnmatched, got.Match)
	require.Equal(t, uint32(1), x.srq.Outstanding(), "nothing retired")
}

// CompleteRecv takes every successful receive into the QP's own receive
// queue: SEND, SEND with immediate, SEND with invalidate and RDMA write
// with immediate, each exactly as Complete does on a twin rig.
func TestCompleteRecvTakesEveryReceive(t *testing.T) {
	x, y := newCompleteSendRig(t), newCompleteSendRig(t)
	ops := []struct {
		op   prm.CQEOpcode
		imm  uint32
		post func(s wqebuilder.OpStage, r *completeSendRig) wqebuilder.DataStage
	}{
		{prm.CQERespSend, 0, func(s wqebuilder.OpStage, _ *completeSendRig) wqebuilder.DataStage { return s.Send() }},
		{prm.CQERespSendImm, 0x5151, func(s wqebuilder.OpStage, _ *completeSendRig) wqebuilder.DataStage { return s.SendImm(0x5151) }},
		{prm.CQERespSendInv, 0x7777, func(s wqebuilder.OpStage, _ *completeSendRig) wqebuilder.DataStage { return s.SendInv(0x7777) }},
		{prm.CQERespWrImm, 0x9999, func(s wqebuilder.OpStage, r *completeSendRig) wqebuilder.DataStage {
			return s.RdmaWriteImm(r.e.Addr(1, 1024), r.e.RKey(1), 0x9999)
		}},
	}
	for i, o := range ops {
		for _, r := range []*completeSendRig{x, y} {
			require.NoError(t, r.b.PostRecv(uint64(20+i), r.e.Addr(1, 64*i), 64, r.e.LKey(1)))
			s, err := r.a.Post(uint64(i), wqebuilder.Signaled)
			require.NoError(t, err)
			require.NoError(t, o.post(s, r).Inline([]byte("payload")).FinishBlueFlame())
			next(t, r.e, r.ca)
			r.ca.Release()
		}
		cx, cy := next(t, x.e, x.cb), next(t, y.e, y.cb)
		var got, want transport.Completion
		require.True(t, x.b.Queue.CompleteRecv(cx, &got), "%v", o.op)
		y.b.Queue.Complete(cy, &want)
		got.Queue, want.Queue = nil, nil
		require.Equal(t, want, got, "%v", o.op)
		require.Equal(t, o.op, got.Opcode)
		require.Equal(t, transport.MatchOK, got.Match)
		require.Equal(t, uint64(20+i), got.WRID)
		require.Equal(t, o.imm, got.Immediate, "%v", o.op)
		require.Zero(t, x.b.Queue.RecvOutstanding())
		x.cb.Release()
		y.cb.Release()
	}
}

// A receive CQE of a QP's own receive queue whose wqe_counter is the
// slot (the counter modulo the ring) rather than the free-running counter
// completes the oldest receive all the same, past the ring's wraps:
// mlx5_ib and libmlx5 take the receive queue's tail whatever the counter
// says, and UCX reads only the counter's slot bits, so a device may report
// either. Complete and CompleteRecv take it the same way.
func TestCompleteRecvSlotCounter(t *testing.T) {
	rig := newCompleteSendRig(t)
	n := 0
	for rig.b.PostRecv(uint64(n), rig.e.Addr(1, 64), 64, rig.e.LKey(1)) == nil {
		n++
	}
	require.Positive(t, n)
	require.Zero(t, n&(n-1), "a ring of a power of two")
	for i := range 3 * n {
		s, err := rig.a.Post(uint64(i), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.Send().Inline([]byte("x")).FinishBlueFlame())
		var sc transport.Completion
		rig.a.Queue.Complete(next(t, rig.e, rig.ca), &sc)
		require.Equal(t, transport.MatchOK, sc.Match)
		rig.ca.Release()

		c := next(t, rig.e, rig.cb)
		v := binary.BigEndian.Uint16(c[prm.CQEWQECounter:])
		require.Equal(t, uint16(i), v, "the model's counter runs free")
		binary.BigEndian.PutUint16(c[prm.CQEWQECounter:], v&uint16(n-1))
		var got transport.Completion
		if i%2 == 0 {
			require.True(t, rig.b.Queue.CompleteRecv(c, &got), "receive %d", i)
		} else {
			rig.b.Queue.Complete(c, &got)
		}
		require.Equal(t, transport.MatchOK, got.Match, "receive %d", i)
		require.Equal(t, uint64(i), got.WRID)
		rig.cb.Release()
		require.NoError(t, rig.b.PostRecv(uint64(n+i), rig.e.Addr(1, 64), 64, rig.e.LKey(1)))
	}
}
