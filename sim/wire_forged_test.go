package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestAnswerFromAnotherQPDropped: an answer to an RC QP's request that
// comes from a QP other than its remote QP is dropped, even with the PSN
// in flight, as a NIC drops a response outside its connection: another
// QP of the fabric (here of the responder's own process) cannot fail, or
// complete, the request. The request's own answer then completes it.
func TestAnswerFromAnotherQPDropped(t *testing.T) {
	e1, e2, a, q := heldRCPair(t)
	other := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	q.postRecv()
	a.postWQE(writeImmWQE(a, e2.addr(0), e2.mr.RKey()), 5)
	stepRound(e1.f) // the request leaves

	e1.f.mu.Lock()
	aq := e1.f.qpByNum(a.qp.QPN())
	inFlight := aq.wire.segN
	seg := aq.wire.segs[aq.wire.segHead]
	if inFlight != 1 {
		e1.f.mu.Unlock()
		t.Fatalf("%d segments in flight, not 1", inFlight)
	}
	from := e1.f.remoteSlot(q.qp.QPN())
	for _, status := range []uint8{wireNAK, wireAck} {
		forged := wireHdr{Kind: wireResponse, Op: uint8(prm.OpRdmaWriteImm), Status: status,
			Synd: uint8(prm.SyndromeRemoteAccess), DstQPN: a.qp.QPN(), SrcQPN: other.qp.QPN(), PSN: seg.psn}
		e1.f.wireIn(from, &forged, nil)
	}
	inFlight = aq.wire.segN
	e1.f.mu.Unlock()
	require.Equal(t, 1, inFlight, "the segment is still in flight after the forged answers")
	_, ok := a.scq.poll()
	require.False(t, ok, "a forged answer completed the request")

	stepRound(e2.f) // executes; the ACK is held for its next round
	c, ok := q.rcq.poll()
	require.True(t, ok)
	require.Equal(t, prm.CQERespWrImm, c.op)
	stepRound(e2.f) // sends the ACK
	stepRound(e1.f)
	c, ok = a.scq.poll()
	require.True(t, ok, "the request's own ACK completes it")
	require.Equal(t, prm.CQEReq, c.op)
}

// TestLongSendRefusedAtFirstSegment: the first segment of a SEND whose
// total is longer than the receive it lands in fails that receive
// (LOCAL_LENGTH) and is answered with a NAK at once: nothing is held for
// the message, so a peer that names a total of gigabytes costs the
// responder nothing more.
func TestLongSendRefusedAtFirstSegment(t *testing.T) {
	e1, e2, a, q := sharedRCPair(t)
	q.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(0)))
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	lid := lidOf(t, e2.c)
	e2.f.mu.Lock()
	tq := e2.f.qpByNum(q.qp.QPN())
	from := e2.f.remoteSlot(a.qp.QPN())
	payload := make([]byte, 4096)
	h := wireHdr{Kind: wireRequest, Op: uint8(prm.OpSend), DstQPN: q.qp.QPN(), SrcQPN: a.qp.QPN(),
		PSN: tq.wire.resp.expect, Total: 1 << 28, Seg: uint32(len(payload)), DLID: lid}
	e2.f.wireIn(from, &h, payload)
	held := tq.wire.resp.recv != nil
	e2.f.mu.Unlock()
	require.False(t, held, "a receive held for a message longer than it")
	c, ok := q.rcq.poll()
	require.True(t, ok, "the receive completes at the first segment")
	require.Equal(t, prm.SyndromeLocalLength, c.synd)
}
