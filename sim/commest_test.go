package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// toRTR moves q through INIT to RTR, connected to peer, and leaves it there.
func toRTR(t *testing.T, q, peer *testQP) {
	t.Helper()
	require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
	require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: peer.qp.QPN(), PathMTU: ctx.MTU4096,
		Path: ctx.AddressAttr{DLID: lidOf(t, peer.qp.ProtectionDomain().Context())}, MinRNRTimer: 1, MaxDestRdAtomic: 16}))
}

// toRTS moves q, in RTR, to RTS.
func toRTS(t *testing.T, q *testQP) {
	t.Helper()
	require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 16}))
}

// TestCommEstablished: an RC QP in RTR that receives its first packet
// raises COMM_EST (the IBA's communication established event, which
// mlx5_ib passes on), once: not for the packets after it, and not in RTS.
// The requester raises none.
func TestCommEstablished(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	toRTR(t, a, b)
	toRTS(t, a)
	toRTR(t, b, a)
	require.Empty(t, readEvents(t, e.c2), "no packet yet")

	for i := 0; i < 2; i++ {
		b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(i*64)))
		a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("in RTR")))
		e.run()
		require.Equal(t, prm.CQEReq, a.scq.one(t).op)
		require.Equal(t, prm.CQERespSend, b.rcq.one(t).op, "a QP in RTR receives")
	}
	ev := readEvents(t, e.c2)
	require.Len(t, ev, 1, "one event for the first packet: %v", ev)
	require.Equal(t, ctx.EventCommEstablished, ev[0].Type)
	require.Equal(t, b.qp.QPN(), ev[0].QPN)

	toRTS(t, b)
	b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(128)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("in RTS")))
	e.run()
	require.Equal(t, prm.CQERespSend, b.rcq.one(t).op)
	require.Empty(t, readEvents(t, e.c2), "none in RTS")
	require.Empty(t, readEvents(t, e.c), "none at the requester")
}

// TestSharedCommEstablished: the same across processes of a shared
// fabric: the responder in RTR raises COMM_EST once, at the first
// request it takes.
func TestSharedCommEstablished(t *testing.T) {
	e1, e2 := sharedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	toRTR(t, a, b)
	toRTS(t, a)
	toRTR(t, b, a)
	for i := 0; i < 2; i++ {
		b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(i*64)))
		a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("in RTR")))
		require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
		require.Equal(t, prm.CQERespSend, waitCQE(t, b.rcq, 5*time.Second).op)
	}
	ev := readEvents(t, e2.c)
	require.Len(t, ev, 1, "one event for the first packet: %v", ev)
	require.Equal(t, ctx.EventCommEstablished, ev[0].Type)
	require.Equal(t, b.qp.QPN(), ev[0].QPN)
	require.Empty(t, readEvents(t, e1.c), "none at the requester")
}
