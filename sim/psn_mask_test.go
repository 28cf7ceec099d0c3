package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
)

// TestModifyMasksPSNsTo24Bits: a modify that reaches the model with the
// kernel's mask (the emulated kernel's MODIFY_QP) and an RQ or SQ PSN wider
// than 24 bits keeps the low 24 bits, as __mlx5_ib_modify_qp writes
// next_rcv_psn and next_send_psn into 24-bit fields of the QP context with
// MLX5_SET and QUERY_QP reads them back from there; the QP's first request
// then carries that PSN.
func TestModifyMasksPSNsTo24Bits(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	p := provider.QueuePairOf(a.qp)
	from := ctx.QPStateReset
	for _, to := range []ctx.QPState{ctx.QPStateInit, ctx.QPStateRTR, ctx.QPStateRTS} {
		attr := e.transitionAttr(ctx.QPTypeRC, to)
		attr.Port, attr.Path.Port = 1, 1
		attr.RQPSN, attr.SQPSN = 0xab123456, 0xcd654321
		mask, err := qpstate.Derive(ctx.QPTypeRC, from, to)
		require.NoError(t, err)
		require.NoError(t, modifyQueuePair(p, attr, mask))
		from = to
	}
	st, attr, ok := queuePairAttributes(p)
	require.True(t, ok)
	require.Equal(t, ctx.QPStateRTS, st)
	require.Equal(t, uint32(0x123456), attr.RQPSN)
	require.Equal(t, uint32(0x654321), attr.SQPSN)
	require.Equal(t, uint32(0x654321), p.(*qp).wire.next, "the PSN of the first request")
}
