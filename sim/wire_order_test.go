package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// The order of a round between processes (stepLocked): sends first, then
// the plain ACKs held from the last round, then the inbound messages up
// to the first that writes a CQE.

// stepRound runs one round of f (its engine held off) on this goroutine.
func stepRound(f *Fabric) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stepLocked()
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

// TestHeldAckFollowsAnswer: the responder's round that executes a write
// with immediate holds its ACK; the answer its polling loop posts then
// leaves in the next round ahead of that ACK, and the requester takes the
// answer (a receive CQE) in one round, the ACK (its send CQE) in the next.
func TestHeldAckFollowsAnswer(t *testing.T) {
	e1, e2, a, q := sharedRCPair(t)
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	_, s1 := e1.f.SharedFabric()
	_, s2 := e2.f.SharedFabric()
	q.postRecv()
	a.postRecv()

	a.postWQE(writeImmWQE(a, e2.addr(0), e2.mr.RKey()), 1)
	stepRound(e1.f)
	kinds, _ := inbound(e2.f, s1)
	require.Equal(t, []uint8{wireRequest}, kinds, "the request is out after the requester's round")

	stepRound(e2.f)
	c, ok := q.rcq.poll()
	require.True(t, ok, "the responder's round wrote the receive CQE")
	require.Equal(t, prm.CQERespWrImm, c.op)
	kinds, _ = inbound(e1.f, s2)
	require.Empty(t, kinds, "the ACK is held until the responder's next round")

	q.postWQE(writeImmWQE(q, e1.addr(0), e1.mr.RKey()), 2) // the answer
	stepRound(e2.f)
	kinds, psns := inbound(e1.f, s2)
	require.Equal(t, []uint8{wireRequest, wireResponse}, kinds, "the answer leaves ahead of the held ACK")
	require.Equal(t, uint32(0), psns[1], "the ACK of the requester's PSN 0")

	stepRound(e1.f)
	c, ok = a.rcq.poll()
	require.True(t, ok, "the answer's receive CQE")
	require.Equal(t, uint32(2), c.imm)
	_, ok = a.scq.poll()
	require.False(t, ok, "the round ended at the answer's CQE, before the ACK")
	stepRound(e1.f)
	c, ok = a.scq.poll()
	require.True(t, ok, "the ACK's send CQE, one round later")
	require.Equal(t, prm.CQEReq, c.op)
}

// TestHeldAcksGoBeforeAnotherAnswer: an answer that is not a plain ACK
// (here an RNR NAK) sends the ACKs held before it, so that the requester
// gets the answers to its segments in order: the WRITE completes, and the
// SEND that met no receive is sent again after the RNR timer.
func TestHeldAcksGoBeforeAnotherAnswer(t *testing.T) {
	e1, e2, a, _ := sharedRCPair(t)
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	_, s1 := e1.f.SharedFabric()
	_, s2 := e2.f.SharedFabric()

	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(0), e2.mr.RKey()), inlineSeg([]byte("w")))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("s")))
	stepRound(e1.f)
	kinds, _ := inbound(e2.f, s1)
	require.Equal(t, []uint8{wireRequest, wireRequest}, kinds)

	stepRound(e2.f) // no receive posted: the SEND meets an RNR NAK
	var status []uint8
	var psns []uint32
	walkRing(e1.f.shm.in, s2, func(h *wireHdr, _ []byte) {
		if h.Kind == wireResponse {
			status = append(status, h.Status)
			psns = append(psns, h.PSN)
		}
	})
	require.Equal(t, []uint8{wireAck, wireRNR}, status, "the held ACK goes ahead of the NAK")
	require.Equal(t, []uint32{0, 1}, psns)

	stepRound(e1.f)
	stepRound(e1.f)
	c, ok := a.scq.poll()
	require.True(t, ok, "the WRITE completes")
	require.Equal(t, prm.CQEReq, c.op)
	require.Equal(t, uint64(1), e1.f.Stats().RNRNaks, "the SEND waits for its RNR timer")
	_, ok = a.scq.poll()
	require.False(t, ok)
}

// TestDrainStopsAtCompletion: a round takes inbound messages up to the
// first that writes a CQE, so that a polling loop sees it at once; each
// following round takes the next.
func TestDrainStopsAtCompletion(t *testing.T) {
	e1, e2, a, q := sharedRCPair(t)
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	for i := 0; i < 3; i++ {
		q.postRecv()
	}
	w := writeImmWQE(a, e2.addr(0), e2.mr.RKey())
	for i := uint32(0); i < 3; i++ {
		a.postWQE(w, i)
	}
	stepRound(e1.f)
	_, s1 := e1.f.SharedFabric()
	kinds, _ := inbound(e2.f, s1)
	require.Len(t, kinds, 3, "the three requests are out")
	for i := uint32(0); i < 3; i++ {
		stepRound(e2.f)
		c, ok := q.rcq.poll()
		require.True(t, ok, "round %d", i)
		require.Equal(t, i, c.imm)
		_, ok = q.rcq.poll()
		require.False(t, ok, "round %d took one completing message", i)
	}
}

// TestDrainTakesSendersInTurn: when messages that complete wait in the
// rings of two senders, successive rounds take them from each in turn,
// not all from the first.
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
	w1 := writeImmWQE(a1, e3.addr(0), e3.mr.RKey())
	w2 := writeImmWQE(a2, e3.addr(0), e3.mr.RKey())
	for i := uint32(0); i < 3; i++ {
		a1.postWQE(w1, i)
		a2.postWQE(w2, i)
	}
	stepRound(e1.f)
	stepRound(e2.f)
	var order []*testQP
	for i := 0; i < 6; i++ {
		stepRound(e3.f)
		for _, q := range []*testQP{q1, q2} {
			if _, ok := q.rcq.poll(); ok {
				order = append(order, q)
			}
		}
		require.Len(t, order, i+1, "round %d", i)
	}
	for i := 1; i < len(order); i++ {
		require.NotSame(t, order[i-1], order[i], "round %d took the same sender again", i)
	}
}

// TestDrainTakesAllAnswers: the answers to this process's requests are
// all taken in one round, whatever they complete: three ACKs, three send
// CQEs.
func TestDrainTakesAllAnswers(t *testing.T) {
	e1, e2, a, _ := sharedRCPair(t)
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
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
