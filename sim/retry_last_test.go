package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestLastAckTimeoutFailsThoughPeerBack: with retry_cnt 0 a request whose
// first transmission got no answer is not sent again when its ACK timer
// runs out, even if the peer has become reachable meanwhile: it completes
// with RETRY_EXC_ERR and nothing reaches the responder. Before, the model
// sent it once more and completed it with success.
func TestLastAckTimeoutFailsThoughPeerBack(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: b.qp.QPN(), PathMTU: ctx.MTU1024, Path: ctx.AddressAttr{DLID: 2}, MaxDestRdAtomic: 1}))
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 10, RetryCount: 0}))
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
	i := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte{5}))
	for range 2 { // the first transmission, lost: b is in INIT
		_, err := e.f.Step()
		require.NoError(t, err)
	}
	require.Empty(t, a.scq.drain())
	// b becomes ready while a waits for its ACK timeout.
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: a.qp.QPN(), PathMTU: ctx.MTU1024, Path: ctx.AddressAttr{DLID: 1}, MaxDestRdAtomic: 1}))
	e.f.Advance(ctx.AckTimeoutDuration(10) + 1)
	e.run()
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeTransportRetryExc, i)
	require.Zero(t, e.mem2(0, 1)[0], "retry_cnt 0 sends nothing again")
	require.Equal(t, ctx.QPStateError, qpState(t, a))
}
