package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestReceiveFoundAfterTheRoundsLook: a round reads each QP's doorbell
// records in turn, so it can read a receiver's before the application
// posts a receive and a sender's after it posts the send that the
// receive is for. A message that then finds the receive queue (or SRQ)
// empty reads its doorbell record again, as a device does, and takes the
// receive: a datagram is not dropped, a SEND gets no RNR NAK.
func TestReceiveFoundAfterTheRoundsLook(t *testing.T) {
	for _, withSRQ := range []bool{false, true} {
		e := newEnv(t, Options{})
		o := qpOpts{typ: ctx.QPTypeRC, recvDepth: 8}
		var srq *testSRQ
		if withSRQ {
			srq = e.newSRQ(e.pd2, 8, 1)
			o = qpOpts{typ: ctx.QPTypeRC, srq: srq}
		}
		a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
		b := e.newQP(e.pd2, o)
		e.connectRC(a, b, 7, 1)
		e.run() // the round has read b's empty receive queue
		q := e.f.qps[b.qp.QPN()]

		if withSRQ {
			srq.post(dataSeg(4, e.mr2.LKey(), e.addr2(0)))
		} else {
			b.postRecv(dataSeg(4, e.mr2.LKey(), e.addr2(0)))
		}
		e.f.mu.Lock()
		_, ok := e.f.peekRecv(q)
		e.f.mu.Unlock()
		require.True(t, ok, "SRQ %v: the receive posted after the round's look", withSRQ)
	}
}
