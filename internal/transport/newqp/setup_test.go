package newqp_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
	"github.com/mlx5kit/mlx5kit/internal/transport/newqp"
)

// wqe512Attr is a ConnectX's max_qp_wr 32768, max_sge 30 and atomics with
// 512-byte send WQEs (half a ConnectX-4's, so that each type's WQE holds
// fewer SGEs than max_sge), and the per-type limits that follow.
func wqe512Attr() ctx.DeviceAttr {
	a := ctx.DeviceAttr{MaxQPWR: 1 << 15, MaxSGE: 30, AtomicHCA: true, MaxSendWQESize: 512}
	d := sqsize.DeviceOf(a)
	a.SendLimitsRC = sqsize.LimitsOf(ctx.QPTypeRC, d)
	a.SendLimitsUD = sqsize.LimitsOf(ctx.QPTypeUD, d)
	a.SendLimitsDCI = sqsize.LimitsOf(ctx.QPTypeDCI, d)
	a.MaxInline = a.SendLimitsRC.MaxInline
	return a
}

// TestCheckCapsPerType checks that a send queue is held to the limits of
// its own QP type, not to max_qp_wr, max_sge and RC's inline size: a depth
// of max_qp_wr cannot be had with the kit's two-block slots, a UD or DCI
// WQE has room for fewer SGEs and inline bytes than an RC one. Each
// refusal names the type's limit; nothing else is checked against it.
func TestCheckCapsPerType(t *testing.T) {
	a := wqe512Attr()
	for _, c := range []struct {
		name  string
		typ   ctx.QPType
		caps  ctx.QueuePairCaps
		hasRQ bool
		want  string // "" accepts
	}{
		{"RC at its depth", ctx.QPTypeRC, ctx.QueuePairCaps{SendDepth: a.SendLimitsRC.MaxDepth, MaxSendSGE: 1}, false, ""},
		{"RC at max_qp_wr", ctx.QPTypeRC, ctx.QueuePairCaps{SendDepth: a.MaxQPWR, MaxSendSGE: 1}, false, "send depth 32768 above the RC limit of 16384"},
		{"deep RC with inline", ctx.QPTypeRC, ctx.QueuePairCaps{SendDepth: 8192, MaxInline: 188}, false, ""},
		{"deeper RC with inline", ctx.QPTypeRC, ctx.QueuePairCaps{SendDepth: 8193, MaxInline: 188}, false, "send depth 8193 above the RC limit of 8192"},
		{"RC inline", ctx.QPTypeRC, ctx.QueuePairCaps{SendDepth: 1, MaxInline: 450}, false, ""},
		{"UD inline", ctx.QPTypeUD, ctx.QueuePairCaps{SendDepth: 1, MaxInline: 450}, false, "max inline 450 above the UD limit of 444"},
		{"DCI inline", ctx.QPTypeDCI, ctx.QueuePairCaps{SendDepth: 1, MaxInline: 420}, false, "max inline 420 above the DCI limit of 412"},
		{"RC SGEs", ctx.QPTypeRC, ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: 29}, false, ""},
		{"RC SGEs at max_sge", ctx.QPTypeRC, ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: 30}, false, "max send SGE 30 above the RC limit of 29"},
		{"DCI SGEs", ctx.QPTypeDCI, ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: 27}, false, "max send SGE 27 above the DCI limit of 26"},
		{"UD SGEs", ctx.QPTypeUD, ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: 28}, false, ""},
		{"receive depth", ctx.QPTypeRC, ctx.QueuePairCaps{SendDepth: 1, RecvDepth: a.MaxQPWR + 1}, true, "receive depth 32769 above the device's 32768"},
		{"receive SGEs", ctx.QPTypeUD, ctx.QueuePairCaps{SendDepth: 1, RecvDepth: 1, MaxRecvSGE: 31}, true, "max receive SGE 31 above the device's 30"},
		{"no send queue", ctx.QPTypeRC, ctx.QueuePairCaps{}, false, "send depth 0"},
	} {
		err := newqp.CheckCaps(a, c.typ, c.caps, c.hasRQ)
		if c.want == "" {
			require.NoError(t, err, c.name)
			continue
		}
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, c.name)
		require.Contains(t, err.Error(), c.want, c.name)
	}
	// A ConnectX's receive WQE takes 32 scatter entries where its max_sge
	// (the smaller of the send and receive limits) is 30.
	a.MaxRecvSGE = 32
	require.NoError(t, newqp.CheckCaps(a, ctx.QPTypeRC, ctx.QueuePairCaps{SendDepth: 1, RecvDepth: 1, MaxRecvSGE: 32}, true))
	err := newqp.CheckCaps(a, ctx.QPTypeRC, ctx.QueuePairCaps{SendDepth: 1, RecvDepth: 1, MaxRecvSGE: 33}, true)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Contains(t, err.Error(), "max receive SGE 33 above the device's 32")
	// A provider that cannot tell its WQE size keeps the device-wide
	// checks.
	a = ctx.DeviceAttr{MaxQPWR: 1 << 15, MaxSGE: 30, MaxInline: 460}
	require.NoError(t, newqp.CheckCaps(a, ctx.QPTypeDCI, ctx.QueuePairCaps{SendDepth: 1 << 15, MaxInline: 460}, false))
	require.ErrorIs(t, newqp.CheckCaps(a, ctx.QPTypeDCI, ctx.QueuePairCaps{SendDepth: 1<<15 + 1}, false), ctx.ErrInvalidArgument)
}
