package sim

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// The order of a round between processes (stepLocked): the ACKs held
// from the last round first, then the sends, then the inbound messages up
// to the first that writes a CQE.

// stepRound runs one round of f (its engine held off) on this goroutine.
func stepRound(f *Fabric) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stepLocked()
}

// heldRCPair is sharedRCPair with both Fabrics' engines held off: the
// rounds run only where a test steps them (stepRound).
func heldRCPair(t testing.TB) (e1, e2 *env, a, q *testQP) {
	e1, e2, a, q = sharedRCPair(t)
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	return e1, e2, a, q
}

// heldRCPairRetry is heldRCPair with the QPs' retry count retry (the ACK
// timeout is 14, 67 ms, in both).
func heldRCPairRetry(t *testing.T, retry uint8) (e1, e2 *env, a, q *testQP) {
	name := testFabricName(t)
	e1 = newEnv(t, Options{Mode: Engine, Fabric: name})
	e2 = newEnv(t, Options{Mode: Engine, Fabric: name})
	a = e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	q = e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	connectRCRetry(t, e1, e2, a, q, retry)
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	return e1, e2, a, q
}

// sendCQENextRound asserts that q has no send CQE yet (why says what
// holds it back) and a successful one after the next round of f, q's
// Fabric: the ACK left for that round.
func sendCQENextRound(t *testing.T, f *Fabric, q *testQP, why string) {
	t.Helper()
	_, ok := q.scq.poll()
	require.False(t, ok, why)
	stepRound(f)
	c, ok := q.scq.poll()
	require.True(t, ok, "the send CQE, one round later")
	require.Equal(t, prm.CQEReq, c.op)
}

// inbound returns the kinds and PSNs of the records from the process in
// slot waiting in f's ring.
func inbound(f *Fabric, slot int) (kinds []uint8, psns []uint32) {
	walkRing(f.shm.in, slot, func(h *wireHdr, _ []byte) {
		if h.Kind != wirePad {
			kinds = append(kinds, h.Kind)
			psns = append(psns, h.PSN)
		}
	})
	return kinds, psns
}

// TestHeldAckGoesBeforeAnswer: the responder's round that executes a
// write with immediate holds its ACK; the answer the responder's program
// posts meanwhile reaches the requester behind that ACK, so that the
// requester completes its send before it receives the answer, as over a
// link (the responder's NIC acknowledges before its program can answer).
// A one-line answer carries the ACK in its own line; a longer one goes
// behind the ACK's record. The requester takes both in one round.
func TestHeldAckGoesBeforeAnswer(t *testing.T) {
	// The send CQE each way: a carried ACK is taken by wireCarriedAck,
	// one behind by wireAnswer; the two write the same CQE.
	sends := map[string]cqe{}
	for _, c := range []struct {
		name  string
		data  []byte
		lines uint64 // in the requester's ring: the answer and the ACK
	}{
		{"carried", []byte{2}, 1},
		{"behind", []byte("sixteen bytes ok"), 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			e1, e2, a, q := heldRCPair(t)
			_, s1 := e1.f.SharedFabric()
			_, s2 := e2.f.SharedFabric()
			q.postRecv()
			a.postRecv()

			a.postWQE(writeImmWQE(a, e2.addr(0), e2.mr.RKey()), 1)
			stepRound(e1.f)
			kinds, _ := inbound(e2.f, s1)
			require.Equal(t, []uint8{wireRequest}, kinds, "the request is out after the requester's round")

			stepRound(e2.f)
			got, ok := q.rcq.poll()
			require.True(t, ok, "the responder's round wrote the receive CQE")
			require.Equal(t, prm.CQERespWrImm, got.op)
			kinds, _ = inbound(e1.f, s2)
			require.Empty(t, kinds, "the ACK is held until the responder's next round")

			q.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, 2, raddrSeg(e1.addr(0), e1.mr.RKey()), inlineSeg(c.data))
			stepRound(e2.f)
			kinds, psns := inbound(e1.f, s2)
			require.Equal(t, []uint8{wireResponse, wireRequest}, kinds, "the held ACK ahead of the answer")
			require.Equal(t, uint32(0), psns[0], "the ACK of the requester's PSN 0")
			in := e1.f.shm.in
			require.Equal(t, c.lines*wireAlign, atomic.LoadUint64(in.tail(s2))-atomic.LoadUint64(in.head(s2)))

			stepRound(e1.f)
			got, ok = a.scq.poll()
			require.True(t, ok, "the send CQE, from the ACK ahead of the answer")
			require.Equal(t, prm.CQEReq, got.op)
			require.Equal(t, prm.OpRdmaWriteImm, got.sendOp)
			require.Equal(t, a.qp.QPN(), got.qpn)
			require.Equal(t, uint16(0), got.counter, "WQE 0")
			got.qpn = 0 // each subtest has QPs of its own
			sends[c.name] = got
			got, ok = a.rcq.poll()
			require.True(t, ok, "the answer's receive CQE, in the same round")
			require.Equal(t, uint32(2), got.imm)
			_, ok = a.scq.poll()
			require.False(t, ok, "one send CQE")
			e1.f.mu.Lock()
			mq := e1.f.qpByNum(a.qp.QPN())
			segs, pending := mq.wire.segN, mq.sqPending()
			e1.f.mu.Unlock()
			require.Zero(t, segs, "no segment in flight")
			require.Zero(t, pending, "the WQE retired")
		})
	}
	require.Len(t, sends, 2)
	require.Equal(t, sends["behind"], sends["carried"])
}

// TestHeldAcksGoBeforeAnotherAnswer: an answer that is not a plain ACK
// (here an RNR NAK) sends the ACKs held before it, so that the requester
// gets the answers to its segments in order: the writes with immediate
// complete, and the SEND that met no receive is sent again after the RNR
// timer.
func TestHeldAcksGoBeforeAnotherAnswer(t *testing.T) {
	e1, e2, a, q := heldRCPair(t)
	_, s1 := e1.f.SharedFabric()
	_, s2 := e2.f.SharedFabric()

	q.postRecv() // for the writes with immediate, none for the SEND
	q.postRecv()
	w := writeImmWQE(a, e2.addr(0), e2.mr.RKey())
	a.postWQE(w, 1)
	a.postWQE(w, 2)
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("s")))
	stepRound(e1.f)
	kinds, _ := inbound(e2.f, s1)
	require.Equal(t, []uint8{wireRequest, wireRequest, wireRequest}, kinds)

	stepRound(e2.f) // the first write with immediate: its ACK held
	stepRound(e2.f) // that ACK; the second (ACK held), the SEND's RNR NAK
	var status []uint8
	var psns []uint32
	walkRing(e1.f.shm.in, s2, func(h *wireHdr, _ []byte) {
		if h.Kind == wireResponse {
			status = append(status, h.Status)
			psns = append(psns, h.PSN)
		}
	})
	require.Equal(t, []uint8{wireAck, wireAck, wireRNR}, status, "the held ACK goes ahead of the NAK")
	require.Equal(t, []uint32{0, 1, 2}, psns)

	stepRound(e1.f)
	for i := 0; i < 2; i++ {
		c, ok := a.scq.poll()
		require.True(t, ok, "write with immediate %d completes", i)
		require.Equal(t, prm.CQEReq, c.op)
	}
	require.Equal(t, uint64(1), e1.f.Stats().RNRNaks, "the SEND waits for its RNR timer")
	_, ok := a.scq.poll()
	require.False(t, ok)
}

// answerBehindRequest leaves in the ring of e2 from e1 a write with
// immediate (imm) from a to q followed by an answer: the ACK of an RDMA
// WRITE q made to a, which e1's round executes after its sends and
// acknowledges at once.
func answerBehindRequest(t *testing.T, e1, e2 *env, a, q *testQP, imm uint32) {
	t.Helper()
	q.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e1.addr(64), e1.mr.RKey()), inlineSeg([]byte("w")))
	stepRound(e2.f) // q's WRITE out
	a.postWQE(writeImmWQE(a, e2.addr(0), e2.mr.RKey()), imm)
	stepRound(e1.f) // the write with immediate, then the WRITE's ACK
}

// TestDrainStopsAtCompletion: a round stops after a request that writes
// a CQE, so that a polling loop sees its completion at once; the next
// round takes what follows (here an answer).
func TestDrainStopsAtCompletion(t *testing.T) {
	e1, e2, a, q := heldRCPair(t)
	q.postRecv()
	answerBehindRequest(t, e1, e2, a, q, 7)
	_, s1 := e1.f.SharedFabric()
	kinds, _ := inbound(e2.f, s1)
	require.Equal(t, []uint8{wireRequest, wireResponse}, kinds)

	stepRound(e2.f)
	c, ok := q.rcq.poll()
	require.True(t, ok, "the write with immediate's CQE")
	require.Equal(t, uint32(7), c.imm)
	sendCQENextRound(t, e2.f, q, "the ACK behind it is left for the next round")
}

// TestDrainTakesRequestRuns: a run of requests that write CQEs costs one
// round more than one request: the round after one that stopped in a ring
// takes the rest of that ring whole.
func TestDrainTakesRequestRuns(t *testing.T) {
	e1, e2, a, q := heldRCPair(t)
	for i := 0; i < 4; i++ {
		q.postRecv()
	}
	w := writeImmWQE(a, e2.addr(0), e2.mr.RKey())
	for i := uint32(0); i < 4; i++ {
		a.postWQE(w, i)
	}
	stepRound(e1.f)
	for round, want := range []int{1, 3} {
		stepRound(e2.f)
		got := 0
		for _, ok := q.rcq.poll(); ok; _, ok = q.rcq.poll() {
			got++
		}
		require.Equal(t, want, got, "round %d", round)
	}
}

// TestDrainTakesSendersInTurn: when each of two senders' rings holds a
// completing request followed by an answer and another request, the round
// after one that stopped in the first ring starts with the second: it
// takes one completion from the other sender, not the first's next one
// on its way.
func TestDrainTakesSendersInTurn(t *testing.T) {
	name := testFabricName(t)
	join := func() *env { return newEnv(t, Options{Mode: Engine, Fabric: name}) }
	e1, e2, e3 := join(), join(), join()
	a1 := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	a2 := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	q1 := e3.newQP(e3.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 8})
	q2 := e3.newQP(e3.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 8})
	e1.connectRC(a1, q1, 7, 1)
	e2.connectRC(a2, q2, 7, 1)
	for _, e := range []*env{e1, e2, e3} {
		holdEngine(t, e.f)
	}
	for i := 0; i < 3; i++ {
		q1.postRecv()
		q2.postRecv()
	}
	a1.postRecv()
	a2.postRecv()
	q1.postWQE(writeImmWQE(q1, e1.addr(64), e1.mr.RKey()), 100)
	q2.postWQE(writeImmWQE(q2, e2.addr(64), e2.mr.RKey()), 100)
	stepRound(e3.f) // both writes with immediate out
	for _, x := range []struct {
		e *env
		a *testQP
	}{{e1, a1}, {e2, a2}} {
		stepRound(x.e.f) // executed (a receive CQE), its ACK held
		w := writeImmWQE(x.a, e3.addr(0), e3.mr.RKey())
		x.a.postWQE(w, 1)
		stepRound(x.e.f) // a write with immediate, then the ACK
		x.a.postWQE(w, 2)
		stepRound(x.e.f) // another write with immediate
	}
	var order []*testQP
	for i := 0; i < 2; i++ {
		stepRound(e3.f)
		for _, q := range []*testQP{q1, q2} {
			for _, ok := q.rcq.poll(); ok; _, ok = q.rcq.poll() {
				order = append(order, q)
			}
		}
		require.Len(t, order, i+1, "round %d took one completion", i)
	}
	require.NotSame(t, order[0], order[1], "the second round took the same sender again")
}

// TestDrainTakesAllAnswers: the answers to this process's requests are
// all taken in one round, whatever they complete: three ACKs, three send
// CQEs.
func TestDrainTakesAllAnswers(t *testing.T) {
	e1, e2, a, _ := heldRCPair(t)
	for i := 0; i < 3; i++ {
		a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(0), e2.mr.RKey()), inlineSeg([]byte("w")))
	}
	stepRound(e1.f)
	stepRound(e2.f) // executes the three writes, holds their ACKs
	stepRound(e2.f) // sends them
	_, s2 := e2.f.SharedFabric()
	kinds, _ := inbound(e1.f, s2)
	require.Equal(t, []uint8{wireResponse, wireResponse, wireResponse}, kinds)
	stepRound(e1.f)
	for i := 0; i < 3; i++ {
		c, ok := a.scq.poll()
		require.True(t, ok, "send CQE %d after one round", i)
		require.Equal(t, prm.CQEReq, c.op)
	}
}

// connectRCRetry connects a (in e1) and b (in e2) with the given retry count.
func connectRCRetry(t *testing.T, e1, e2 *env, a, b *testQP, retry uint8) {
	connectRCTimed(t, a, b, retry, 14)
}

// connectRCTimed connects RC QPs a and b with the retry count retry and
// the ACK timeout code timeout (4.096 µs × 2^timeout).
func connectRCTimed(t *testing.T, a, b *testQP, retry, timeout uint8) {
	for _, x := range []struct {
		q, peer *testQP
	}{{a, b}, {b, a}} {
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: x.peer.qp.QPN(), PathMTU: ctx.MTU4096,
			Path: ctx.AddressAttr{DLID: lidOf(t, x.peer.qp.ProtectionDomain().Context())}, MinRNRTimer: 1, MaxDestRdAtomic: 16}))
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: timeout, RetryCount: retry, RNRRetry: 7, MaxRdAtomic: 16}))
	}
}

// TestAckInRingBeforeDeadlineIsTaken: the ACK reached the requester's ring
// well before the ACK timeout; the requester's next round comes after the
// deadline (its process was descheduled). It must take the ACK, not retry.
func TestAckInRingBeforeDeadlineIsTaken(t *testing.T) {
	e1, e2, a, _ := heldRCPair(t)
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(0), e2.mr.RKey()), inlineSeg([]byte("w")))
	stepRound(e1.f)                    // the request leaves
	stepRound(e2.f)                    // executed; ACK held
	stepRound(e2.f)                    // ACK sent: it is in e1's ring now
	time.Sleep(100 * time.Millisecond) // past the ACK timeout (Timeout 14: 67 ms)
	stepRound(e1.f)
	stepRound(e1.f)
	c, ok := a.scq.poll()
	require.True(t, ok)
	require.Equal(t, prm.CQEReq, c.op)
	require.Equal(t, uint64(0), e1.f.Stats().Retries, "a retry although the ACK was in the ring before the deadline")
}

// TestAckInRingBeforeLastDeadlineIsTaken: RetryCount 1; after one real
// timeout and its retry, the ACK arrives before the second deadline but
// the requester's round comes after it: the WQE completes, not with
// RETRY_EXC, since its ACK was in the ring in time.
func TestAckInRingBeforeLastDeadlineIsTaken(t *testing.T) {
	e1, e2, a, _ := heldRCPairRetry(t, 1)
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(0), e2.mr.RKey()), inlineSeg([]byte("w")))
	stepRound(e1.f)
	stepRound(e1.f) // the ACK timer gets its time (ackTimerStart)
	time.Sleep(100 * time.Millisecond)
	stepRound(e1.f) // a real timeout: the retry (retryCount 1)
	require.Equal(t, uint64(1), e1.f.Stats().Retries)
	stepRound(e2.f) // executes PSN 0 (ACK held), then the repeat: both ACKs out
	stepRound(e2.f)
	time.Sleep(100 * time.Millisecond)
	stepRound(e1.f)
	stepRound(e1.f)
	c, ok := a.scq.poll()
	require.True(t, ok)
	require.Equal(t, prm.CQEReq, c.op, "syndrome %#x: the ACK was in the ring before the deadline", c.synd)
}

// TestAckBehindStoppedDrainIsTaken: the peer's WRITE_IMM (a receive CQE
// here) and then the ACK of a2's WRITE are in the ring before a2's
// deadline: the round that stops at the WRITE_IMM judges no timer, and
// the next takes the ACK before it judges a2's.
func TestAckBehindStoppedDrainIsTaken(t *testing.T) {
	name := testFabricName(t)
	e1 := newEnv(t, Options{Mode: Engine, Fabric: name})
	e2 := newEnv(t, Options{Mode: Engine, Fabric: name})
	a1 := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	a2 := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	q1 := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	q2 := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	e1.connectRC(a1, q1, 7, 1)
	e1.connectRC(a2, q2, 7, 1)
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	a1.postRecv()
	a2.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(8), e2.mr.RKey()), inlineSeg([]byte("w")))
	stepRound(e1.f)
	q1.postWQE(writeImmWQE(q1, e1.addr(0), e1.mr.RKey()), 1)
	stepRound(e2.f) // q1's WRITE_IMM out, then a2's WRITE served (ACK held)
	stepRound(e2.f) // the ACK out, behind the WRITE_IMM
	time.Sleep(100 * time.Millisecond)
	stepRound(e1.f)
	stepRound(e1.f)
	_, ok := a2.scq.poll()
	require.True(t, ok)
	require.Equal(t, uint64(0), e1.f.Stats().Retries, "a retry although the ACK was in the ring before the deadline")
}

// TestHeldAckWaitsForRoom: an ACK held while the requester's ring is full
// is not lost: it stays held, the round after the ring has room sends it
// before anything else, and the requester completes without a retry. The
// ACK timeout is 17 s: filling a ring (32 MiB of pads) on a loaded machine
// can take longer than the usual 67 ms.
func TestHeldAckWaitsForRoom(t *testing.T) {
	name := testFabricName(t)
	e1 := newEnv(t, Options{Mode: Engine, Fabric: name})
	e2 := newEnv(t, Options{Mode: Engine, Fabric: name})
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	q := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	connectRCTimed(t, a, q, 7, 22)
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	_, s1 := e1.f.SharedFabric()
	q.postRecv()
	a.postWQE(writeImmWQE(a, e2.addr(0), e2.mr.RKey()), 1)
	stepRound(e1.f) // the request out
	e2.f.mu.Lock()
	pad := func(h *wireHdr, _ []byte) {} // Kind wirePad: drain skips it
	for e2.f.shm.send(s1, wireMaxPayload, pad) {
	}
	e2.f.mu.Unlock()
	stepRound(e2.f) // executed (a receive CQE), its ACK held
	stepRound(e2.f) // the ring is full: the ACK stays held
	e2.f.mu.Lock()
	held, blocked := len(e2.f.wireAcks), e2.f.wireAcksBlocked
	e2.f.mu.Unlock()
	require.Equal(t, 1, held, "the ACK is kept")
	require.True(t, blocked)

	stepRound(e1.f) // takes the pads: room again
	stepRound(e2.f) // the held ACK first
	stepRound(e1.f)
	c, ok := a.scq.poll()
	require.True(t, ok, "the write with immediate completes")
	require.Equal(t, prm.CQEReq, c.op)
	require.Zero(t, e1.f.Stats().Retries)
}

// TestPlainAckGoesAtOnce: the ACK of a request that writes no CQE at the
// responder (an RDMA WRITE) is not held: nothing there answers it, and
// the requester's window waits for it.
func TestPlainAckGoesAtOnce(t *testing.T) {
	e1, e2, a, _ := heldRCPair(t)
	_, s2 := e2.f.SharedFabric()
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(0), e2.mr.RKey()), inlineSeg([]byte("w")))
	stepRound(e1.f)
	stepRound(e2.f)
	kinds, _ := inbound(e1.f, s2)
	require.Equal(t, []uint8{wireResponse}, kinds, "the ACK left in the round that executed the WRITE")
}

// TestWireSendsBeforeJudgingTimer: a round's first pass sends a new
// request before it looks at the ACK timer of the one in flight, which has
// run out; the go-back-N that follows in the same round sends both again.
// The responder executes each once and answers the repeats without
// executing them; the requester completes each once, in order.
func TestWireSendsBeforeJudgingTimer(t *testing.T) {
	e1, e2, a, q := heldRCPairRetry(t, 7) // Timeout 14: 67 ms
	for i := 0; i < 8; i++ {
		q.postRecv()
	}
	w := writeImmWQE(a, e2.addr(0), e2.mr.RKey())
	before1, before2 := e1.f.Stats(), e2.f.Stats()
	a.postWQE(w, 1)
	stepRound(e1.f) // request 1 leaves and is not answered
	stepRound(e1.f) // the ACK timer gets its time (ackTimerStart)
	time.Sleep(100 * time.Millisecond)
	a.postWQE(w, 2)
	stepRound(e1.f)
	require.Equal(t, uint64(1), e1.f.Stats().Retries-before1.Retries, "request 1's timer ran out")
	for i := 0; i < 8; i++ {
		stepRound(e2.f)
		stepRound(e1.f)
	}
	require.Equal(t, uint64(1), e1.f.Stats().Retries-before1.Retries, "one retry (the rounds took under 67 ms)")
	var imms []uint32
	for _, c := range q.rcq.drain() {
		require.Equal(t, prm.CQERespWrImm, c.op)
		imms = append(imms, c.imm)
	}
	require.Equal(t, []uint32{1, 2}, imms, "each request executed once, in order")
	require.Equal(t, uint64(2), e2.f.Stats().RepeatsServed-before2.RepeatsServed,
		"request 2 left before the go-back-N sent both again")
	sends := a.scq.drain()
	require.Len(t, sends, 2)
	for _, c := range sends {
		require.Equal(t, prm.CQEReq, c.op)
	}
}

// TestWireJudgesLastTryBeforeSending: on a QP's last try (RetryCount 1,
// one retry done) a WQE posted after that try's timer ran out never
// leaves: the round judges the timer before it sends, fails the oldest
// WQE with RETRY_EXC_ERR and flushes the new one, which the responder
// never sees.
func TestWireJudgesLastTryBeforeSending(t *testing.T) {
	e1, e2, a, _ := heldRCPairRetry(t, 1) // Timeout 14: 67 ms
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(0), e2.mr.RKey()), inlineSeg([]byte("1")))
	stepRound(e1.f)
	stepRound(e1.f) // the ACK timer gets its time (ackTimerStart)
	time.Sleep(100 * time.Millisecond)
	stepRound(e1.f) // the retry
	require.Equal(t, uint64(1), e1.f.Stats().Retries)
	time.Sleep(100 * time.Millisecond) // the retry's timer runs out
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(8), e2.mr.RKey()), inlineSeg([]byte("2")))
	stepRound(e1.f) // RETRY_EXC_ERR for the first, the second flushed
	c, ok := a.scq.poll()
	require.True(t, ok)
	require.Equal(t, prm.SyndromeTransportRetryExc, c.synd)
	stepRound(e1.f) // the flush
	c, ok = a.scq.poll()
	require.True(t, ok)
	require.Equal(t, prm.SyndromeWRFlush, c.synd)
	for i := 0; i < 4; i++ {
		stepRound(e2.f)
	}
	require.Equal(t, []byte("1"), e2.mem(0, 1), "the first WQE left before its timers ran out")
	require.Equal(t, []byte{0}, e2.mem(8, 1), "the flushed WQE was executed by the responder")
	// The QP's own count, as in one process (ctx.QueuePair.Retries).
	_, transport, counted := a.qp.Retries()
	require.True(t, counted)
	require.Equal(t, uint64(1), transport, "the QP's transport retries")
}

// TestTimersLookedAtInQuietRounds: in a run of a polling loop's rounds in
// which nothing happens, the first pass looks at the ACK timers in every
// fourth only (lookAtTimers): a timer that has run out is taken up in the
// fourth round of the run, not before, and a round in which something
// happened (the retry) starts the count again. A round of the engine's
// (stepRound here) looks in any case.
func TestTimersLookedAtInQuietRounds(t *testing.T) {
	e1, e2, a, _ := heldRCPairRetry(t, 7) // Timeout 14: 67 ms
	retries := func() uint64 { return e1.f.Stats().Retries }
	loopRound := func() { // a polling loop's round
		before := e1.f.Stats().StepsExecuted
		e1.f.idle()
		require.Equal(t, before+1, e1.f.Stats().StepsExecuted, "idle ran no round")
		// A round that read the clock tells the engine when the loop
		// last ran: hold it off again.
		e1.f.drivenAt.Store(math.MaxInt64 / 2)
	}
	quiet := func(n uint32) {
		e1.f.mu.Lock()
		e1.f.quietRounds = n // within a run of rounds with nothing to do
		e1.f.mu.Unlock()
	}
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(0), e2.mr.RKey()), inlineSeg([]byte("1")))
	loopRound() // the request leaves: a round in which something happened
	require.Zero(t, e1.f.quietRounds)
	// The round after one in which something happened looks: the ACK
	// timer gets its time.
	loopRound()
	time.Sleep(100 * time.Millisecond) // its timer runs out
	quiet(1)
	for i := 1; i <= 3; i++ {
		loopRound()
		require.Zero(t, retries(), "quiet round %d of the run looked at the timer", i)
	}
	loopRound()
	require.Equal(t, uint64(1), retries(), "the fourth quiet round looks at the timer")
	require.Zero(t, e1.f.quietRounds, "the retry is something that happened")

	// The engine's round looks whatever the count.
	time.Sleep(200 * time.Millisecond) // the retry's timer runs out
	quiet(1)
	stepRound(e1.f)
	require.Equal(t, uint64(2), retries(), "the engine's round looks at the timer")
}

// TestWireRetryCountZeroSendsOnce: between processes, as in one, retry_cnt
// counts retransmissions: with 0 the request's first timer running out
// fails it with RETRY_EXC_ERR, and nothing was sent again (before, one
// retry was made: 2 + retry_cnt transmissions).
func TestWireRetryCountZeroSendsOnce(t *testing.T) {
	e1, e2, a, _ := heldRCPairRetry(t, 0) // Timeout 14: 67 ms
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(0), e2.mr.RKey()), inlineSeg([]byte("1")))
	stepRound(e1.f)
	stepRound(e1.f)                    // the ACK timer gets its time (ackTimerStart)
	time.Sleep(100 * time.Millisecond) // the timer runs out, unanswered
	stepRound(e1.f)
	c, ok := a.scq.poll()
	require.True(t, ok, "the first timeout fails the request")
	require.Equal(t, prm.SyndromeTransportRetryExc, c.synd)
	require.Zero(t, e1.f.Stats().Retries, "retry_cnt 0: no retransmission")
}

// TestWireRNRNakRestartsTransportRetries: an RNR NAK is an answer, so the
// transport retries start again after it, between processes as in one
// (perform resets them when the peer is reached): RetryCount 1, a timeout
// (the one retry), an RNR NAK, then another timeout is a retry again, not
// RETRY_EXC_ERR.
func TestWireRNRNakRestartsTransportRetries(t *testing.T) {
	e1, e2, a, _ := heldRCPairRetry(t, 1) // Timeout 14: 67 ms; no receive posted
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("x")))
	stepRound(e1.f)
	stepRound(e1.f) // the ACK timer gets its time (ackTimerStart)
	time.Sleep(100 * time.Millisecond)
	stepRound(e1.f) // the timeout: the one retry
	require.Equal(t, uint64(1), e1.f.Stats().Retries)
	for range 2 {
		stepRound(e2.f) // no receive: RNR NAKs
	}
	stepRound(e1.f) // the RNR NAK taken
	require.Positive(t, e1.f.Stats().RNRNaks)
	time.Sleep(time.Millisecond) // the RNR timer (0.01 ms)
	stepRound(e1.f)              // sent again; the responder says nothing now
	time.Sleep(100 * time.Millisecond)
	stepRound(e1.f) // the timeout: a retry again
	c, ok := a.scq.poll()
	require.False(t, ok, "completed after an RNR NAK and one timeout: %+v", c)
	require.Equal(t, uint64(2), e1.f.Stats().Retries)
}

// TestAckTimerGetsItsTimeNextRound: in Engine mode with the time-stamp
// counter, a request sent in a round that read no clock leaves its ACK
// timer without a time (ackTimerStart); the requester's next round gives
// it one, never earlier than the send plus the ACK timeout and at most the
// timer slack after that round; an ACK taken before that round leaves no
// timer to set, and the QP sends on as before.
func TestAckTimerGetsItsTimeNextRound(t *testing.T) {
	e1, e2, a, q := heldRCPairRetry(t, 7) // Timeout 14: 67 ms
	if !e1.f.useTicks {
		t.Skip("the time-stamp counter is not trusted here: timers are set at once")
	}
	timeout := int64(ctx.AckTimeoutDuration(14))
	e1.f.mu.Lock()
	aq := e1.f.qps[a.qp.QPN()]
	e1.f.mu.Unlock()
	deadline := func() int64 {
		e1.f.mu.Lock()
		defer e1.f.mu.Unlock()
		return aq.wire.deadline
	}
	q.postRecv()
	w := writeImmWQE(a, e2.addr(0), e2.mr.RKey())

	// A round that reads no clock: the counter says the time last read
	// is young.
	stepRound(e1.f)
	before := e1.f.Now()
	a.postWQE(w, 1)
	stepRound(e1.f)
	require.Equal(t, int64(wireUnarmed), deadline(), "the request's ACK timer has no time yet")
	stepRound(e1.f) // looks at the timer: no ACK came, it gets its time
	after := e1.f.Now()
	d := deadline()
	require.NotEqual(t, int64(wireUnarmed), d)
	require.GreaterOrEqual(t, d, int64(before)+timeout, "a timer set early")
	require.LessOrEqual(t, d, int64(after)+timeout+int64(timerSlack)+int64(time.Microsecond), "a timer set more than the slack late")

	// Answered before the next round: nothing is left to set.
	stepRound(e2.f)
	stepRound(e2.f)
	stepRound(e1.f)
	c, ok := a.scq.poll()
	require.True(t, ok)
	require.Equal(t, prm.CQEReq, c.op)
	q.postRecv()
	a.postWQE(w, 2)
	stepRound(e1.f)
	stepRound(e2.f)
	stepRound(e2.f)
	stepRound(e1.f) // the ACK, taken in the second pass's place
	c, ok = a.scq.poll()
	require.True(t, ok)
	require.Equal(t, prm.CQEReq, c.op)
	e1.f.mu.Lock()
	segN := aq.wire.segN
	e1.f.mu.Unlock()
	require.Zero(t, segN)
	require.Zero(t, e1.f.Stats().Retries)
	require.Equal(t, []uint32{1, 2}, imms(q.rcq.drain()))
}

// imms returns the immediates of the receive CQEs cs.
func imms(cs []cqe) []uint32 {
	var out []uint32
	for _, c := range cs {
		out = append(out, c.imm)
	}
	return out
}

// TestUCNextSegmentWaitsForLoss: a UC requester between processes waits
// wireUCLoss for the model's answer to each segment in flight. When the
// answer to its oldest comes, the next oldest's timer starts (wireSegDone)
// with that same wait, not with the ACK timeout of the QP's attributes,
// which a UC QP has none of (0): the next segment is not taken as lost,
// and its WQE not completed, before its answer, in a round that read the
// clock as in one that did not (ackTimerStart).
func TestUCNextSegmentWaitsForLoss(t *testing.T) {
	name := testFabricName(t)
	e1 := newEnv(t, Options{Mode: Engine, Fabric: name})
	e2 := newEnv(t, Options{Mode: Engine, Fabric: name})
	a, q := ucQP(e1, e1.pd), ucQP(e2, e2.pd)
	connectUC(t, a, q)
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	q.postRecv()
	q.postRecv()
	w := writeImmWQE(a, e2.addr(0), e2.mr.RKey())
	a.postWQE(w, 1)
	a.postWQE(w, 2)
	stepRound(e1.f) // both leave
	e1.f.mu.Lock()
	aq := e1.f.qps[a.qp.QPN()]
	require.Equal(t, 2, aq.wire.segN)
	e1.f.mu.Unlock()
	time.Sleep(time.Millisecond) // the time last read is old: the next round reads the clock
	stepRound(e1.f)              // the first segment's timer gets its time, if it had none
	stepRound(e2.f)              // executes the first; its answer held
	stepRound(e2.f)              // the first's answer leaves; the second executes, its answer held
	time.Sleep(time.Millisecond)
	stepRound(e1.f) // reads the clock, then takes the first answer
	c, ok := a.scq.poll()
	require.True(t, ok, "the first WQE completes with its answer")
	require.Equal(t, prm.CQEReq, c.op)
	time.Sleep(time.Millisecond)
	stepRound(e1.f)
	stepRound(e1.f)
	c, ok = a.scq.poll()
	require.False(t, ok, "the second WQE completed as lost a millisecond after the first's answer, its own not yet sent: %+v", c)
	e1.f.mu.Lock()
	segN := aq.wire.segN
	e1.f.mu.Unlock()
	require.Equal(t, 1, segN, "the second segment is still in flight")
	stepRound(e2.f) // the second's answer leaves
	stepRound(e1.f)
	c, ok = a.scq.poll()
	require.True(t, ok, "the second WQE completes with its answer")
	require.Equal(t, prm.CQEReq, c.op)
	require.Equal(t, []uint32{1, 2}, imms(q.rcq.drain()))
}
