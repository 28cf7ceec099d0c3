package sim

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// The receive of a SEND of several segments between processes: the first
// segment takes it from the head of the queue, as a NIC's first packet of
// a message does, each segment is written into it at its offset, and the
// last completes it (wireServeSeg, wireTake).

// longRig is a responder process (e2) with an SRQ, and senders in another
// process (e1) whose segments a test hands to e2 one by one (wireIn), in
// the order it chooses; both engines are held off.
type longRig struct {
	e1, e2  *env
	srq     *testSRQ
	from    int    // e1's slot, as e2 sees it
	to      int    // e2's slot, where e1's ring holds e2's answers
	lid     uint16 // e2's port
	senders []*longSender
}

// longSender is one requester of a longRig: an RC QP of e1 connected to
// an RC QP of e2 on the SRQ (rq), or a DCI stream to e2's DCT (dc).
type longSender struct {
	src, dst uint32
	psn      uint32 // the PSN of its next segment
	dc       bool
	started  bool    // a segment was sent (DC: the stream began)
	rq       *testQP // RC: the responder QP
	rcq      *testCQ // the responder's receive CQ
	gen      uint64  // DC: e1's generation
	epoch    uint32  // DC: the stream's epoch (0: 1)
	msg      []byte  // the message it sends
}

// newLongRig builds a longRig with senders senders, RC QPs (dc false) or
// DCI streams to one DCT (dc true), all receiving through one SRQ of
// depth 16.
func newLongRig(t *testing.T, dc bool, senders int) *longRig {
	e1, e2 := sharedPair(t)
	r := &longRig{e1: e1, e2: e2, srq: e2.newSRQ(e2.pd, 16, 1), lid: lidOf(t, e2.c)}
	var dct *testQP
	if dc {
		dct = e2.dct(e2.pd, r.srq, 0xfeed)
	}
	for range senders {
		s := &longSender{dc: dc}
		if dc {
			d := e1.dci(e1.pd)
			s.src, s.dst, s.rcq, s.psn, s.gen = d.qp.QPN(), dct.qp.QPN(), dct.rcq, 100, e1.f.shm.gen
		} else {
			a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
			b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC, srq: r.srq})
			e1.connectRC(a, b, 7, 1)
			s.src, s.dst, s.rq, s.rcq = a.qp.QPN(), b.qp.QPN(), b, b.rcq
		}
		r.senders = append(r.senders, s)
	}
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	r.from = e2.f.remoteSlot(r.senders[0].src)
	_, r.to = e2.f.SharedFabric()
	return r
}

// recv posts a receive of n bytes in a buffer of its own to the SRQ and
// returns its index and buffer.
func (r *longRig) recv(t *testing.T, n int) (uint16, []byte) {
	bufs, mrs := registeredBuffers(t, n, r.e2.pd)
	return r.srq.post(dataSeg(uint32(n), mrs[0].LKey(), uint64(mrs[0].Addr()))), bufs[0].Bytes()
}

// message gives sender s a message of n bytes of seed's pattern.
func (s *longSender) message(n int, seed int64) {
	s.msg = make([]byte, n)
	fillBig(s.msg, seed)
}

// segmentAt hands e2 segment k (of wireSegMax bytes) of s's message, as
// a SEND with PSN psn.
func (r *longRig) segmentAt(s *longSender, k int, psn uint32) {
	total := len(s.msg)
	off := k * wireSegMax
	n := min(wireSegMax, total-off)
	h := wireHdr{Kind: wireRequest, Op: uint8(prm.OpSend), FM: prm.FlagCQUpdate, DstQPN: s.dst, SrcQPN: s.src,
		SrcGen: s.gen, PSN: psn, Total: uint32(total), Off: uint32(off), Seg: uint32(n), DLID: r.lid}
	if s.dc {
		h.Epoch, h.DCKey = max(s.epoch, 1), 0xfeed
		if !s.started {
			h.Flags = wireFirst
		}
	}
	r.e2.f.mu.Lock()
	defer r.e2.f.mu.Unlock()
	r.e2.f.wireIn(r.from, &h, s.msg[off:off+n])
}

// segment hands e2 segment k of s's message with s's next PSN (an RC
// QP's first: the PSN its responder expects).
func (r *longRig) segment(t *testing.T, s *longSender, k int) {
	t.Helper()
	if !s.dc && !s.started {
		r.e2.f.mu.Lock()
		s.psn = r.e2.f.qpByNum(s.dst).wire.resp.expect
		r.e2.f.mu.Unlock()
	}
	r.segmentAt(s, k, s.psn)
	s.started = true
	s.psn = (s.psn + 1) & ctx.MaxPSN
}

// answers returns e2's answers so far, in order, from e1's ring.
func (r *longRig) answers() (out []wireHdr) {
	r.e1.f.mu.Lock()
	defer r.e1.f.mu.Unlock()
	walkRing(r.e1.f.shm.in, r.to, func(h *wireHdr, _ []byte) {
		if h.Kind == wireResponse {
			out = append(out, *h)
		}
	})
	return out
}

// posted returns the receives still posted to the SRQ and those held by
// messages under way.
func (r *longRig) posted() (posted, held int) {
	r.e2.f.mu.Lock()
	defer r.e2.f.mu.Unlock()
	s := r.senders[0]
	t := r.e2.f.qpByNum(s.dst)
	posted = r.e2.f.postedRecvs(t)
	for _, x := range r.senders {
		held += r.e2.f.qpByNum(x.dst).wire.heldN
		if x.dc {
			break // one DCT
		}
	}
	return posted, held
}

func forEachLongRig(t *testing.T, fn func(t *testing.T, dc bool)) {
	for _, dc := range []bool{false, true} {
		name := "RC"
		if dc {
			name = "DC"
		}
		t.Run(name, func(t *testing.T) { fn(t, dc) })
	}
}

// TestSharedLongSendsTakeReceivesAtFirstSegment: two senders whose long
// SENDs to one SRQ interleave (x's first segment, then all of y's
// message, then the rest of x's) get the receives in the order of their
// first segments, as on a NIC, which takes a message's receive at its
// first packet: x the first posted (3 MiB), y the second (6 MiB), each
// message written whole into its own. A repeated first segment takes no
// second receive and writes nothing twice. Before, a message was
// delivered into the receive at the head of the SRQ at its last segment:
// y, which finished first, landed in x's receive and x in the next.
func TestSharedLongSendsTakeReceivesAtFirstSegment(t *testing.T) {
	forEachLongRig(t, func(t *testing.T, dc bool) {
		r := newLongRig(t, dc, 2)
		x, y := r.senders[0], r.senders[1]
		i0, b0 := r.recv(t, 3<<20)
		i1, b1 := r.recv(t, 6<<20)
		x.message(2<<20, 1)
		y.message(3<<20, 2)

		r.segment(t, x, 0)
		posted, held := r.posted()
		require.Equal(t, 1, posted, "x's first segment took a receive")
		require.Equal(t, 1, held)
		r.segment(t, y, 0)
		r.segmentAt(x, 0, x.psn-1) // x's first segment again: a repeat
		repeats := r.e2.f.Stats().RepeatsServed
		require.NotZero(t, repeats)
		r.segment(t, y, 1)
		r.segmentAt(y, 1, y.psn-1) // and one of y's
		r.segment(t, y, 2)
		r.segment(t, x, 1)
		require.Equal(t, repeats+1, r.e2.f.Stats().RepeatsServed)

		for _, a := range r.answers() {
			require.Equal(t, uint8(wireAck), a.Status, "answer %+v", a)
		}
		posted, held = r.posted()
		require.Zero(t, posted)
		require.Zero(t, held, "receives held once the messages are in")
		cx, cy := x.rcq.drain(), y.rcq.drain()
		if dc {
			// One DCT: y's CQE first, then x's.
			require.Len(t, cx, 2)
			cy, cx = cx[:1], cx[1:]
		}
		require.Len(t, cx, 1)
		require.Len(t, cy, 1)
		require.Equal(t, prm.CQERespSend, cx[0].op, "syndrome %v", cx[0].synd)
		require.Equal(t, prm.CQERespSend, cy[0].op, "syndrome %v", cy[0].synd)
		require.Equal(t, i0, cx[0].counter, "x's receive: the one at the head at x's first segment")
		require.Equal(t, i1, cy[0].counter, "y's receive")
		require.Equal(t, x.src, cx[0].srcQPN)
		require.Equal(t, y.src, cy[0].srcQPN)
		require.Equal(t, uint32(len(x.msg)), cx[0].byteCnt)
		require.Equal(t, uint32(len(y.msg)), cy[0].byteCnt)
		require.True(t, bytes.Equal(x.msg, b0[:len(x.msg)]), "x's message in x's receive")
		require.True(t, bytes.Equal(y.msg, b1[:len(y.msg)]), "y's message in y's receive")
		require.True(t, allBytes(b0[len(x.msg):], 0), "nothing past x's message")
	})
}

// TestSharedLongSendFailsAtItsFirstSegmentsReceive: a long SEND whose
// first segment finds at the head of the SRQ a receive too small for it
// fails at once, with LOCAL_LENGTH on that receive and a NAK of
// REMOTE_INVAL_REQ, though the receive after it is long enough: another
// message under way holds the receive before it. An RC responder goes to
// error; a DCT serves on. The message under way completes in its own
// receive. Before, the first segment was checked against the receive the
// other message had left at the head of the SRQ, long enough, and taken.
func TestSharedLongSendFailsAtItsFirstSegmentsReceive(t *testing.T) {
	forEachLongRig(t, func(t *testing.T, dc bool) {
		r := newLongRig(t, dc, 2)
		x, y := r.senders[0], r.senders[1]
		i0, b0 := r.recv(t, 4<<20)
		i1, _ := r.recv(t, 1<<20)
		r.recv(t, 4<<20)
		x.message(2<<20, 3)
		y.message(2<<20, 4)

		r.segment(t, x, 0)
		r.segment(t, y, 0)
		as := r.answers()
		require.Len(t, as, 2)
		require.Equal(t, uint8(wireAck), as[0].Status)
		require.Equal(t, uint8(wireNAK), as[1].Status, "y's first segment: %+v", as[1])
		require.Equal(t, uint8(prm.SyndromeRemoteInvalReq), as[1].Synd)
		c := y.rcq.one(t)
		require.Equal(t, prm.CQERespErr, c.op)
		require.Equal(t, prm.SyndromeLocalLength, c.synd)
		require.Equal(t, i1, c.counter, "the receive at the head at y's first segment")
		if !dc {
			st, err := y.rq.qp.State()
			require.NoError(t, err)
			require.Equal(t, ctx.QPStateError, st)
		}
		posted, held := r.posted()
		require.Equal(t, 1, posted, "the receive after it stays posted")
		require.Equal(t, 1, held)

		r.segment(t, x, 1)
		c = x.rcq.one(t)
		require.Equal(t, prm.CQERespSend, c.op, "syndrome %v", c.synd)
		require.Equal(t, i0, c.counter)
		require.True(t, bytes.Equal(x.msg, b0[:len(x.msg)]))
	})
}

// TestSharedLongSendHeldReceiveFlushes: the receive a long SEND's first
// segment took completes with WR_FLUSH_ERR when its RC QP moves to error
// before the last segment, before the receives still posted to its own
// queue, each once; a QP moved to RESET instead, or destroyed, writes no
// CQE for it (libmlx5 cleans the QP's CQEs from its CQs then). A segment
// that comes after is dropped.
func TestSharedLongSendHeldReceiveFlushes(t *testing.T) {
	for _, to := range []ctx.QPState{ctx.QPStateError, ctx.QPStateReset} {
		t.Run(to.String(), func(t *testing.T) {
			e1, e2 := sharedPair(t)
			a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
			b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
			e1.connectRC(a, b, 7, 1)
			holdEngine(t, e1.f)
			holdEngine(t, e2.f)
			_, mrs := registeredBuffers(t, 4<<20, e2.pd)
			for range 3 {
				b.postRecv(dataSeg(4<<20, mrs[0].LKey(), uint64(mrs[0].Addr())))
			}
			r := &longRig{e1: e1, e2: e2, from: e2.f.remoteSlot(a.qp.QPN()), lid: lidOf(t, e2.c)}
			_, r.to = e2.f.SharedFabric()
			s := &longSender{src: a.qp.QPN(), dst: b.qp.QPN(), rq: b, rcq: b.rcq}
			s.message(2<<20, 5)
			r.segment(t, s, 0)
			require.NoError(t, b.qp.Modify(ctx.QPAttr{State: to}))
			stepRound(e2.f)
			stepRound(e2.f)
			r.segment(t, s, 1)
			stepRound(e2.f)
			got := b.rcq.drain()
			if to == ctx.QPStateReset {
				require.Empty(t, got, "CQEs of a QP moved to RESET")
				return
			}
			require.Len(t, got, 3, "CQEs: %+v", got)
			for i, c := range got {
				require.Equal(t, prm.CQERespErr, c.op)
				require.Equal(t, prm.SyndromeWRFlush, c.synd)
				require.Equal(t, uint16(i), c.counter, "the held receive first, then the rest in order")
			}
		})
	}
}

// TestSharedLongSendHeldReceiveOfSRQFlushes: on an SRQ, the receive a
// long SEND took stays held by its RC QP when the requester's process is
// gone in the middle of the message (an RC responder has no timer of its
// own: a NIC's learns nothing of it), and completes with WR_FLUSH_ERR
// when the QP moves to error; the SRQ's other receives stay posted.
func TestSharedLongSendHeldReceiveOfSRQFlushes(t *testing.T) {
	r := newLongRig(t, false, 1)
	s := r.senders[0]
	i0, _ := r.recv(t, 4<<20)
	r.recv(t, 4<<20)
	s.message(2<<20, 6)
	r.segment(t, s, 0)
	require.NoError(t, r.e1.c.Close())
	require.NoError(t, r.e1.f.Close())
	for range 2 * shmGoneRounds {
		stepRound(r.e2.f)
	}
	require.Empty(t, s.rcq.drain(), "CQEs while the QP is ready")
	posted, held := r.posted()
	require.Equal(t, 1, posted)
	require.Equal(t, 1, held, "the receive is held while the QP is ready")
	require.NoError(t, s.rq.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}))
	stepRound(r.e2.f)
	c := s.rcq.one(t)
	require.Equal(t, prm.CQERespErr, c.op)
	require.Equal(t, prm.SyndromeWRFlush, c.synd)
	require.Equal(t, i0, c.counter)
	require.Equal(t, r.srq.d.SRQN, c.srqn)
	posted, held = r.posted()
	require.Equal(t, 1, posted)
	require.Zero(t, held)
}

// TestSharedLongSendHeldReceiveFlushedBeforeLastWQEReached: the receive a
// long SEND's first segment took from the SRQ of an RC QP completes with
// WR_FLUSH_ERR before the QP raises QP_LAST_WQE_REACHED as it enters
// error, as rdmavt's rvt_error_qp completes the receive a message under
// way holds before its caller raises the event: a program that waits for
// the event, drains the CQ and destroys the QP (the IBA's way of taking a
// QP off an SRQ) gets the receive back. Once only: the round's flush adds
// none.
func TestSharedLongSendHeldReceiveFlushedBeforeLastWQEReached(t *testing.T) {
	r := newLongRig(t, false, 1)
	s := r.senders[0]
	i0, _ := r.recv(t, 4<<20)
	s.message(2<<20, 12)
	r.segment(t, s, 0)
	var atEvent []cqe
	var events []ctx.AsyncEvent
	dev := provider.DeviceOf(r.e2.c)
	require.True(t, simadopt.SubscribeAsyncEvents(dev, func(ev ctx.AsyncEvent) {
		events = append(events, ev)
		atEvent = append(atEvent, s.rcq.drain()...)
	}))
	t.Cleanup(func() { simadopt.SubscribeAsyncEvents(dev, nil) })
	require.NoError(t, s.rq.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}))
	require.Equal(t, []ctx.AsyncEvent{{Type: ctx.EventQPLastWQEReached, QPN: s.dst}}, events)
	require.Len(t, atEvent, 1, "CQEs in the CQ when the event came: %+v", atEvent)
	require.Equal(t, prm.CQERespErr, atEvent[0].op)
	require.Equal(t, prm.SyndromeWRFlush, atEvent[0].synd)
	require.Equal(t, i0, atEvent[0].counter)
	stepRound(r.e2.f)
	stepRound(r.e2.f)
	require.Empty(t, s.rcq.drain(), "the held receive completes once")
}

// TestSharedLongSendRegionGoneMidMessage: a long SEND whose receive's
// region is deregistered after its first segment fails at its next with
// LOCAL_PROT on the receive and a NAK of REMOTE_OP, and writes nothing of
// that segment; the RC QP goes to error.
func TestSharedLongSendRegionGoneMidMessage(t *testing.T) {
	r := newLongRig(t, false, 1)
	s := r.senders[0]
	bufs, mrs := registeredBuffers(t, 4<<20, r.e2.pd)
	idx := r.srq.post(dataSeg(4<<20, mrs[0].LKey(), uint64(mrs[0].Addr())))
	s.message(2<<20, 7)
	r.segment(t, s, 0)
	require.NoError(t, mrs[0].Close())
	r.segment(t, s, 1)
	as := r.answers()
	require.Len(t, as, 2)
	require.Equal(t, uint8(wireAck), as[0].Status)
	require.Equal(t, uint8(wireNAK), as[1].Status)
	require.Equal(t, uint8(prm.SyndromeRemoteOp), as[1].Synd)
	c := s.rcq.one(t)
	require.Equal(t, prm.CQERespErr, c.op)
	require.Equal(t, prm.SyndromeLocalProt, c.synd)
	require.Equal(t, idx, c.counter)
	b := bufs[0].Bytes()
	require.True(t, bytes.Equal(s.msg[:wireSegMax], b[:wireSegMax]), "the first segment is in")
	require.True(t, allBytes(b[wireSegMax:], 0), "the second segment wrote nothing")
	st, err := s.rq.qp.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateError, st)
}

// TestSharedUCLongSendGapReusesReceive: at a UC QP, a long SEND whose
// segments stop after its first (a PSN gap) gives back the receive its
// first segment took: the next message starts again in it (the IBA's UC
// class D1). On an SRQ, whose receive cannot go back, the receive
// completes with REMOTE_INVAL_REQ (class E) and the next message takes
// the next receive.
func TestSharedUCLongSendGapReusesReceive(t *testing.T) {
	for _, onSRQ := range []bool{false, true} {
		name := "RQ"
		if onSRQ {
			name = "SRQ"
		}
		t.Run(name, func(t *testing.T) {
			e1, e2 := sharedPair(t)
			a := ucQP(e1, e1.pd)
			var srq *testSRQ
			o := qpOpts{typ: ctx.QPTypeRC}
			if onSRQ {
				srq = e2.newSRQ(e2.pd, 16, 1)
				o.srq = srq
			}
			b := e2.newQP(e2.pd, o)
			e2.f.mu.Lock()
			e2.f.qps[b.qp.QPN()].uc = true
			e2.f.mu.Unlock()
			connectUC(t, a, b)
			holdEngine(t, e1.f)
			holdEngine(t, e2.f)
			bufs, mrs := registeredBuffers(t, 4<<20, e2.pd)
			post := func(off int) uint16 {
				seg := dataSeg(2<<20, mrs[0].LKey(), uint64(mrs[0].Addr())+uint64(off))
				if onSRQ {
					return srq.post(seg)
				}
				return b.postRecv(seg)
			}
			i0 := post(0)
			i1 := post(2 << 20)
			r := &longRig{e1: e1, e2: e2, from: e2.f.remoteSlot(a.qp.QPN()), lid: lidOf(t, e2.c)}
			_, r.to = e2.f.SharedFabric()
			s := &longSender{src: a.qp.QPN(), dst: b.qp.QPN(), rq: b, rcq: b.rcq}
			s.message(2<<20, 8)
			r.segment(t, s, 0)
			// The second segment is lost; the next message, one
			// segment, comes with the PSN after it.
			s.psn++
			s.message(16, 9)
			r.segment(t, s, 0)
			got := b.rcq.drain()
			want := i0
			if onSRQ {
				require.Len(t, got, 2, "CQEs: %+v", got)
				require.Equal(t, prm.CQERespErr, got[0].op)
				require.Equal(t, prm.SyndromeRemoteInvalReq, got[0].synd)
				require.Equal(t, i0, got[0].counter)
				got, want = got[1:], i1
			}
			require.Len(t, got, 1, "CQEs: %+v", got)
			require.Equal(t, prm.CQERespSend, got[0].op, "syndrome %v", got[0].synd)
			require.Equal(t, want, got[0].counter)
			require.Equal(t, uint32(16), got[0].byteCnt)
			off := 0
			if onSRQ {
				off = 2 << 20
			}
			require.Equal(t, s.msg, bufs[0].Bytes()[off:off+16])
		})
	}
}

// TestSharedDCTHeldReceiveOfStreamEnded: the receive a DCI stream's long
// SEND took at its first segment completes with WR_FLUSH_ERR when the
// stream ends before the message's last segment: when the DCI begins a
// new stream (another epoch: it went to error in the middle of the
// message and back to RTS, as a DCI ends a stream only with no message
// part-way), whose message then takes the next receive, or when the
// DCI's process is gone (found before the engine sleeps or every
// shmGoneRounds rounds), whose stream is then dropped. The DCT stays
// ready. Before, the DCT kept the message set aside, counted against its
// receives, and no CQE ever came.
func TestSharedDCTHeldReceiveOfStreamEnded(t *testing.T) {
	t.Run("new stream", func(t *testing.T) {
		r := newLongRig(t, true, 1)
		s := r.senders[0]
		i0, _ := r.recv(t, 4<<20)
		i1, b1 := r.recv(t, 4<<20)
		s.message(2<<20, 10)
		r.segment(t, s, 0)
		s.epoch, s.started, s.psn = 2, false, 500
		r.segment(t, s, 0)
		r.segment(t, s, 1)
		got := s.rcq.drain()
		require.Len(t, got, 2, "CQEs: %+v", got)
		require.Equal(t, prm.CQERespErr, got[0].op)
		require.Equal(t, prm.SyndromeWRFlush, got[0].synd)
		require.Equal(t, i0, got[0].counter)
		require.Equal(t, prm.CQERespSend, got[1].op, "syndrome %v", got[1].synd)
		require.Equal(t, i1, got[1].counter)
		require.True(t, bytes.Equal(s.msg, b1[:len(s.msg)]))
		posted, held := r.posted()
		require.Zero(t, posted)
		require.Zero(t, held)
	})
	t.Run("process gone", func(t *testing.T) {
		r := newLongRig(t, true, 1)
		s := r.senders[0]
		i0, _ := r.recv(t, 4<<20)
		s.message(2<<20, 11)
		r.segment(t, s, 0)
		require.NoError(t, r.e1.c.Close())
		require.NoError(t, r.e1.f.Close())
		var got []cqe
		for i := 0; i < 2*shmGoneRounds && len(got) == 0; i++ {
			stepRound(r.e2.f)
			got = s.rcq.drain()
		}
		require.Len(t, got, 1, "CQEs: %+v", got)
		require.Equal(t, prm.CQERespErr, got[0].op)
		require.Equal(t, prm.SyndromeWRFlush, got[0].synd)
		require.Equal(t, i0, got[0].counter)
		r.e2.f.mu.Lock()
		ws := &r.e2.f.qpByNum(s.dst).wire
		streams, held := len(ws.streams), ws.heldN
		r.e2.f.mu.Unlock()
		require.Zero(t, held)
		require.Zero(t, streams, "the stream of the process gone is dropped")
	})
}
