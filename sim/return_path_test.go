package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestRCAnswerOnResponderPath: an RC responder answers on its own path
// (the address path of its QP context), not on the request's source: a
// responder whose path does not lead back to the requester's port sends
// ACKs no one receives, and the requester ends in RETRY_EXC_ERR after its
// retries, as over a network. UC, which answers nothing, is not
// affected.
func TestRCAnswerOnResponderPath(t *testing.T) {
	for _, uc := range []bool{false, true} {
		e := newEnv(t, Options{})
		var a, b *testQP
		if uc {
			a, b = ucQP(e, e.pd), ucQP(e, e.pd2)
		} else {
			a, b = e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC}), e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
		}
		lidA, lidB := lidOf(t, e.c), lidOf(t, e.c2)
		require.NotEqual(t, lidA, lidB)
		for _, x := range []struct {
			q    *testQP
			peer uint32
			dlid uint16
		}{{a, b.qp.QPN(), lidB}, {b, a.qp.QPN(), lidB}} { // b's path leads to its own port
			require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
			rtr := ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: x.peer, PathMTU: ctx.MTU1024, Path: ctx.AddressAttr{DLID: x.dlid}}
			rts := ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 10, RetryCount: 2}
			if !uc {
				rtr.MaxDestRdAtomic, rtr.MinRNRTimer = 1, 1
				rts.MaxRdAtomic = 1
			}
			require.NoError(t, x.q.qp.Modify(rtr))
			require.NoError(t, x.q.qp.Modify(rts))
		}
		i := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte{1}))
		e.run()
		c := a.scq.one(t)
		if uc {
			require.Equal(t, prm.CQEReq, c.op, "UC: sent, and nothing answers")
			require.Equal(t, byte(1), e.mem2(0, 1)[0])
			continue
		}
		requireErr(t, c, prm.CQEReqErr, prm.SyndromeTransportRetryExc, i)
		require.Equal(t, uint64(2), e.f.Stats().Retries, "retry_cnt resends after the first try")
	}
}
