package sim

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/kerrno"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
)

// attrBase returns attributes the model accepts for moving a QP of type
// typ to state to on a port of link layer ll: those transitionAttr gives,
// with a GRH in the path on RoCE and a DCI's depth within DC's.
func (e *env) attrBase(typ ctx.QPType, to ctx.QPState, ll ctx.LinkLayer) ctx.QPAttr {
	a := e.transitionAttr(typ, to)
	if to == ctx.QPStateRTR && ll == ctx.LinkLayerEthernet && (typ == ctx.QPTypeRC || typ == ctx.QPTypeDCT) {
		// RoCE v2 from the global IPv6 GID to a link-local one: one IP
		// family, as ib_resolve_eth_dmac needs.
		a.Path.GlobalRoute, a.Path.SGIDIndex, a.Path.HopLimit = true, 5, 64
		a.Path.DGID[0], a.Path.DGID[1] = 0xfe, 0x80
	}
	return a
}

// TestModifyRefusesAttributesLikeKernel goes through ctx to the model with
// attribute values the kernel refuses at ibv_modify_qp for an mlx5 device
// (uverbs modify_qp, rdma_check_ah_attr and rdma_get_gid_attr in the core,
// mlx5_ib_modify_qp, validate_rd_atomic and __mlx5_ib_modify_qp in
// mlx5_ib): each is refused with EINVAL and ctx.ErrInvalidArgument, the
// error names the attribute, its value and the limit, the QP stays in its
// state, and the limit itself is then accepted. The model's limits are one
// port, one P_Key, its GID table (1 entry on InfiniBand, 6 on RoCE), RC
// read/atomic depths of 16 and a DC requester depth of 8.
func TestModifyRefusesAttributesLikeKernel(t *testing.T) {
	cases := []struct {
		typ ctx.QPType
		ll  ctx.LinkLayer
		to  ctx.QPState
		// attr is the field the error names; bad its refused value, max
		// the limit, which the model accepts.
		attr     string
		bad, max uint64
		set      func(a *ctx.QPAttr, v uint64)
	}{
		{ctx.QPTypeRC, 0, ctx.QPStateInit, "Port", 2, 1, func(a *ctx.QPAttr, v uint64) { a.Port = uint8(v) }},
		{ctx.QPTypeUD, 0, ctx.QPStateInit, "Port", 255, 1, func(a *ctx.QPAttr, v uint64) { a.Port = uint8(v) }},
		{ctx.QPTypeDCI, 0, ctx.QPStateInit, "Port", 2, 1, func(a *ctx.QPAttr, v uint64) { a.Port = uint8(v) }},
		{ctx.QPTypeDCT, 0, ctx.QPStateInit, "Port", 2, 1, func(a *ctx.QPAttr, v uint64) { a.Port = uint8(v) }},
		{ctx.QPTypeRC, 0, ctx.QPStateInit, "PKeyIndex", 1, 0, func(a *ctx.QPAttr, v uint64) { a.PKeyIndex = uint16(v) }},
		{ctx.QPTypeUD, 0, ctx.QPStateInit, "PKeyIndex", 0xffff, 0, func(a *ctx.QPAttr, v uint64) { a.PKeyIndex = uint16(v) }},
		{ctx.QPTypeDCI, ctx.LinkLayerEthernet, ctx.QPStateInit, "PKeyIndex", 1, 0, func(a *ctx.QPAttr, v uint64) { a.PKeyIndex = uint16(v) }},
		{ctx.QPTypeRC, 0, ctx.QPStateRTR, "MaxDestRdAtomic", maxRdAtomic + 1, maxRdAtomic, func(a *ctx.QPAttr, v uint64) { a.MaxDestRdAtomic = uint8(v) }},
		{ctx.QPTypeRC, 0, ctx.QPStateRTR, "MaxDestRdAtomic", 255, maxRdAtomic, func(a *ctx.QPAttr, v uint64) { a.MaxDestRdAtomic = uint8(v) }},
		{ctx.QPTypeRC, 0, ctx.QPStateRTS, "MaxRdAtomic", maxRdAtomic + 1, maxRdAtomic, func(a *ctx.QPAttr, v uint64) { a.MaxRdAtomic = uint8(v) }},
		// Above DC's requester depth: the DC limit applies.
		{ctx.QPTypeDCI, 0, ctx.QPStateRTS, "MaxRdAtomic", maxDCInitRdAtomic + 1, maxDCInitRdAtomic, func(a *ctx.QPAttr, v uint64) { a.MaxRdAtomic = uint8(v) }},
		{ctx.QPTypeRC, 0, ctx.QPStateRTR, "PathMTU", uint64(ctx.MTU4096) + 1, uint64(ctx.MTU4096), func(a *ctx.QPAttr, v uint64) { a.PathMTU = ctx.MTU(v) }},
		{ctx.QPTypeRC, 0, ctx.QPStateRTR, "PathMTU", 0, uint64(ctx.MTU4096), func(a *ctx.QPAttr, v uint64) { a.PathMTU = ctx.MTU(v) }},
		{ctx.QPTypeDCI, 0, ctx.QPStateRTR, "PathMTU", 7, uint64(ctx.MTU4096), func(a *ctx.QPAttr, v uint64) { a.PathMTU = ctx.MTU(v) }},
		{ctx.QPTypeRC, 0, ctx.QPStateRTR, "Path.Port", 2, 1, func(a *ctx.QPAttr, v uint64) { a.Path.Port = uint8(v) }},
		{ctx.QPTypeDCT, ctx.LinkLayerEthernet, ctx.QPStateRTR, "Path.Port", 9, 1, func(a *ctx.QPAttr, v uint64) { a.Path.Port = uint8(v) }},
		{ctx.QPTypeRC, 0, ctx.QPStateRTR, "Path.SGIDIndex", 1, 0, func(a *ctx.QPAttr, v uint64) {
			a.Path.GlobalRoute, a.Path.SGIDIndex = true, uint8(v)
		}},
		{ctx.QPTypeRC, ctx.LinkLayerEthernet, ctx.QPStateRTR, "Path.SGIDIndex", 6, 5, func(a *ctx.QPAttr, v uint64) { a.Path.SGIDIndex = uint8(v) }},
		{ctx.QPTypeDCT, ctx.LinkLayerEthernet, ctx.QPStateRTR, "Path.SGIDIndex", 200, 5, func(a *ctx.QPAttr, v uint64) { a.Path.SGIDIndex = uint8(v) }},
		// On RoCE an address vector needs a GRH (the limit is "set").
		{ctx.QPTypeRC, ctx.LinkLayerEthernet, ctx.QPStateRTR, "Path.GlobalRoute", 0, 1, func(a *ctx.QPAttr, v uint64) { a.Path.GlobalRoute = v != 0 }},
		{ctx.QPTypeDCT, ctx.LinkLayerEthernet, ctx.QPStateRTR, "Path.GlobalRoute", 0, 1, func(a *ctx.QPAttr, v uint64) { a.Path.GlobalRoute = v != 0 }},
	}
	envs := map[ctx.LinkLayer]*env{}
	for _, c := range cases {
		ll := c.ll
		if ll == 0 {
			ll = ctx.LinkLayerInfiniBand
		}
		name := fmt.Sprintf("%v %v →%v %s %d", ll, c.typ, c.to, c.attr, c.bad)
		e := envs[ll]
		if e == nil {
			e = newEnv(t, Options{LinkLayer: ll})
			envs[ll] = e
		}
		o := qpOpts{typ: c.typ}
		if c.typ == ctx.QPTypeDCT {
			o.srq, o.dcKey = e.newSRQ(e.pd, 16, 1), 7
		}
		q := e.newQP(e.pd, o)
		from := ctx.QPStateReset
		for _, s := range []ctx.QPState{ctx.QPStateInit, ctx.QPStateRTR, ctx.QPStateRTS} {
			if s == c.to {
				break
			}
			require.NoError(t, q.qp.Modify(e.attrBase(c.typ, s, ll)), "%s: on the way to %v", name, s)
			from = s
		}

		bad := e.attrBase(c.typ, c.to, ll)
		c.set(&bad, c.bad)
		err := q.qp.Modify(bad)
		require.Error(t, err, name)
		require.ErrorIs(t, err, syscall.EINVAL, name)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
		var ae *qpstate.AttrError
		require.True(t, errors.As(err, &ae), "%s: %v", name, err)
		require.Equal(t, c.attr, ae.Attr, name)
		require.Equal(t, c.bad, ae.Value, name)
		require.Equal(t, c.max, ae.Max, name)
		require.Contains(t, err.Error(), ae.Limit, name)
		require.Contains(t, err.Error(), "drivers/infiniband/", "%s: names the kernel check", name)
		st, serr := q.qp.State()
		require.NoError(t, serr)
		require.Equal(t, from, st, "%s: a refused modify changes nothing", name)

		good := e.attrBase(c.typ, c.to, ll)
		c.set(&good, c.max)
		require.NoError(t, q.qp.Modify(good), "%s: the limit %d itself", name, c.max)
		st, serr = q.qp.State()
		require.NoError(t, serr)
		require.Equal(t, c.to, st, name)
		require.NoError(t, q.qp.Close(), name)
	}
}

// TestModifyControlledQKey: uverbs modify_qp refuses a Q_Key with bit 31
// set with EPERM unless the caller holds CAP_NET_RAW (since "RDMA/uverbs:
// Restrict usage of privileged QKEYs", Linux 6.4 and the stable kernels of
// June 2023); the hardware provider's verb error carries the errno and no
// sentinel. A refused modify changes nothing.
func TestModifyControlledQKey(t *testing.T) {
	saved := kerrno.HasRawCap
	t.Cleanup(func() { kerrno.HasRawCap = saved })
	e := newEnv(t, Options{})
	q := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeUD})
	a := e.attrBase(ctx.QPTypeUD, ctx.QPStateInit, ctx.LinkLayerInfiniBand)
	a.QKey = 0x80010000
	kerrno.HasRawCap = func() bool { return false }
	err := q.qp.Modify(a)
	require.ErrorIs(t, err, syscall.EPERM)
	require.Equal(t, syscall.EPERM, err.(*ctx.OpError).Errno())
	require.Contains(t, err.Error(), "without CAP_NET_RAW")
	st, serr := q.qp.State()
	require.NoError(t, serr)
	require.Equal(t, ctx.QPStateReset, st, "refused: still RESET")
	kerrno.HasRawCap = func() bool { return true }
	require.NoError(t, q.qp.Modify(a), "with CAP_NET_RAW")
}

// TestModifyControlledQKeyOrder: uverbs modify_qp refuses a port the
// device has not (EINVAL) before it looks at the Q_Key, and mlx5_ib
// refuses a P_Key index past its table (EINVAL) after: without
// CAP_NET_RAW a controlled Q_Key with a bad port is EINVAL, with a bad
// P_Key index EPERM.
func TestModifyControlledQKeyOrder(t *testing.T) {
	saved := kerrno.HasRawCap
	t.Cleanup(func() { kerrno.HasRawCap = saved })
	kerrno.HasRawCap = func() bool { return false }
	e := newEnv(t, Options{})
	q := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeUD})
	a := e.attrBase(ctx.QPTypeUD, ctx.QPStateInit, ctx.LinkLayerInfiniBand)
	a.QKey = 0x80010000

	badPort := a
	badPort.Port = 2
	err := q.qp.Modify(badPort)
	require.ErrorIs(t, err, syscall.EINVAL, "the port first")
	var ae *qpstate.AttrError
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, "Port", ae.Attr)

	badPKey := a
	badPKey.PKeyIndex = 1
	err = q.qp.Modify(badPKey)
	require.ErrorIs(t, err, syscall.EPERM, "the Q_Key before the P_Key index")
	require.False(t, errors.As(err, &ae), "%v", err)

	st, serr := q.qp.State()
	require.NoError(t, serr)
	require.Equal(t, ctx.QPStateReset, st, "refused: still RESET")
}
