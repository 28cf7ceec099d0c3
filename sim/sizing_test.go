package sim

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
)

// TestSendQueueLimitsPerType checks that the model reports the send-queue
// limits of each QP type that rdma-core's sizing gives a ConnectX with the
// kit's send operations, hands out the rings it would allocate, and
// refuses a configuration one past a type's limit with an error naming it,
// where another type may still accept the same value.
func TestSendQueueLimitsPerType(t *testing.T) {
	e := newEnv(t, Options{})
	a, err := e.c.Query()
	require.NoError(t, err)
	require.Equal(t, uint32(maxSQDescSize), a.MaxSendWQESize)
	cq := e.newCQ(e.c, 16, 0)
	srq := e.newSRQ(e.pd, 4, 1)
	for _, typ := range []ctx.QPType{ctx.QPTypeRC, ctx.QPTypeUD, ctx.QPTypeDCI} {
		lim := a.SendLimits(typ)
		ov := sqsize.Overhead(typ, sqsize.KitOps(typ, true))
		// The largest WQE, less the type's overhead and the inline header,
		// within what the ds count lets a WQE of the kit carry.
		require.Equal(t, min(uint32(maxSQDescSize-ov-prm.InlineHeaderSize), sqsize.KitMaxInline(typ)), lim.MaxInline, "%v", typ)
		require.Equal(t, min(uint32((maxSQDescSize-ov)/prm.DataSize), maxSGE, sqsize.KitMaxSGE(typ)), lim.MaxSGE, "%v", typ)
		require.Equal(t, sqsize.LimitsOf(typ, sendQueueDevice), lim, "%v", typ)
		create := func(caps ctx.QueuePairCaps) (*ctx.QueuePair, error) {
			cfg := ctx.QueuePairConfig{Type: typ, SendCQ: cq.cq, Caps: caps}
			if typ != ctx.QPTypeDCI {
				cfg.SRQ = srq.srq
			}
			return e.pd.CreateQueuePair(cfg)
		}
		for _, c := range []struct {
			name       string
			caps, over ctx.QueuePairCaps
			limit      string
		}{
			{"depth", ctx.QueuePairCaps{SendDepth: lim.MaxDepth, MaxSendSGE: 1}, ctx.QueuePairCaps{SendDepth: lim.MaxDepth + 1, MaxSendSGE: 1},
				fmt.Sprintf("send depth %d above the %v limit of %d", lim.MaxDepth+1, typ, lim.MaxDepth)},
			{"SGE", ctx.QueuePairCaps{SendDepth: 4, MaxSendSGE: lim.MaxSGE}, ctx.QueuePairCaps{SendDepth: 4, MaxSendSGE: lim.MaxSGE + 1},
				fmt.Sprintf("max send SGE %d above the %v limit of %d", lim.MaxSGE+1, typ, lim.MaxSGE)},
			{"inline", ctx.QueuePairCaps{SendDepth: 4, MaxInline: lim.MaxInline}, ctx.QueuePairCaps{SendDepth: 4, MaxInline: lim.MaxInline + 1},
				fmt.Sprintf("max inline %d above the %v limit of %d", lim.MaxInline+1, typ, lim.MaxInline)},
		} {
			qp, err := create(c.caps)
			require.NoError(t, err, "%v %s at the limit", typ, c.name)
			_, g, err := sqsize.Plan(typ, c.caps, sendQueueDevice)
			require.NoError(t, err)
			d := provider.QPDescriptor(qp)
			require.Equal(t, g.WQECnt, d.SQ.WQECnt, "%v %s", typ, c.name)
			require.Equal(t, g.MaxInline, d.MaxInline, "%v %s", typ, c.name)
			require.Equal(t, g.MaxSGE, d.MaxSendSGE, "%v %s", typ, c.name)
			require.GreaterOrEqual(t, d.MaxInline, c.caps.MaxInline)
			require.GreaterOrEqual(t, d.MaxSendSGE, c.caps.MaxSendSGE)
			require.NoError(t, qp.Close())

			_, err = create(c.over)
			require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%v %s past the limit", typ, c.name)
			require.Contains(t, err.Error(), c.limit)
		}
	}
	// An inline size an RC QP may carry but a DCI may not.
	dci := a.SendLimitsDCI.MaxInline + 1
	require.LessOrEqual(t, dci, a.SendLimitsRC.MaxInline)
	_, err = e.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeDCI, SendCQ: cq.cq, Caps: ctx.QueuePairCaps{SendDepth: 4, MaxInline: dci}})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	qp, err := e.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq.cq, Caps: ctx.QueuePairCaps{SendDepth: 4, MaxInline: dci}})
	require.NoError(t, err)
	require.NoError(t, qp.Close())
}

// TestBlueFlameRegisterLimit checks the model's register handout: with
// BlueFlameRegisters 2 the first two QPs with a send queue on a device
// get a UAR page each, later ones one page they share, doorbell only; a
// DCT takes none; a closed QP's register goes to the next QP.
func TestBlueFlameRegisterLimit(t *testing.T) {
	e := newEnv(t, Options{BlueFlameRegisters: 2})
	var qps []*testQP
	for range 4 {
		qps = append(qps, e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC}))
	}
	dct := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeDCT, srq: e.newSRQ(e.pd, 4, 1)})
	require.Nil(t, dct.d.BlueFlame)
	require.Zero(t, dct.d.BlueFlameSize)
	for i, q := range qps {
		if i < 2 {
			require.Equal(t, uint32(bfSize), q.d.BlueFlameSize, "QP %d", i)
		} else {
			require.Zero(t, q.d.BlueFlameSize, "QP %d", i)
			require.Equal(t, qps[2].d.BlueFlame, q.d.BlueFlame, "QP %d shares the register", i)
		}
	}
	require.NotEqual(t, qps[0].d.BlueFlame, qps[1].d.BlueFlame)
	require.NotEqual(t, qps[0].d.BlueFlame, qps[2].d.BlueFlame)
	// The other device has registers of its own.
	other := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	require.Equal(t, uint32(bfSize), other.d.BlueFlameSize)

	require.NoError(t, qps[0].qp.Close())
	next := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeUD})
	require.Equal(t, uint32(bfSize), next.d.BlueFlameSize, "the closed QP's register is free again")
	next2 := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeDCI})
	require.Zero(t, next2.d.BlueFlameSize)

	// Negative: no dedicated register at all.
	e2 := newEnv(t, Options{BlueFlameRegisters: -1})
	q := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	require.Zero(t, q.d.BlueFlameSize)
	require.NotNil(t, q.d.BlueFlame)
}

// TestSharedRegisterRefusesBlueFlameCopies checks the strict check of a
// shared register: 8-byte doorbells pass, a BlueFlame copy (more than 8
// bytes) is a violation, since two QPs posting from different goroutines
// could interleave their copies' 64-byte chunks.
func TestSharedRegisterRefusesBlueFlameCopies(t *testing.T) {
	e := newEnv(t, Options{BlueFlameRegisters: -1})
	e.allowViolations = true
	a, b := e.rcPair(qpOpts{})
	require.Zero(t, a.d.BlueFlameSize)
	reg := unsafe.Slice((*byte)(a.d.BlueFlame), 2*bfSize)

	w := a.build(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte("doorbell")))
	a.write(w)
	a.ring()
	copy(reg[:8], w[:8]) // the doorbell
	e.run()
	require.Len(t, a.scq.drain(), 1)
	require.Empty(t, e.f.Violations())

	w = b.build(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr(0), e.mr.RKey()), inlineSeg([]byte("a copy")))
	b.write(w)
	b.ring()
	copy(unsafe.Slice((*byte)(b.d.BlueFlame), 2*bfSize), w) // a BlueFlame copy
	a.post(prm.OpNop, 0, 0, 0)
	e.run()
	vs := e.f.Violations()
	require.NotEmpty(t, vs)
	require.Equal(t, ViolationBlueFlame, vs[0].Kind)
	require.Contains(t, vs[0].Detail, "shared doorbell-only register")
}
