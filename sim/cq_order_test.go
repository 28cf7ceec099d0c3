package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestDueOverrunFlushesBeforeSend: delayed CQEs that fall due in a round
// and overrun their CQ move the QP to error before that round lets the QP
// send, so an RDMA WRITE posted meanwhile is flushed and never reaches the
// responder's memory.
func TestDueOverrunFlushesBeforeSend(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{cqDepth: 3, sendDepth: 16})
	require.NoError(t, e.f.DelayCompletions(a.scq.cq.CQN(), time.Millisecond))
	for i := 0; i < 5; i++ {
		a.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	}
	for i := 0; i < 8; i++ {
		_, err := e.f.Step()
		require.NoError(t, err)
	}
	require.Empty(t, a.scq.drain(), "the NOPs' CQEs are delayed")
	require.Equal(t, ctx.QPStateRTS, qpState(t, a))

	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte{7}))
	e.f.Advance(time.Millisecond)
	_, err := e.f.Step()
	require.NoError(t, err)
	require.Error(t, e.f.CQError(a.scq.cq.CQN()), "the due CQEs overran the CQ")
	require.Equal(t, ctx.QPStateError, qpState(t, a))
	require.Equal(t, byte(0), e.mem2(0, 1)[0], "the WRITE was flushed, not executed")
}
