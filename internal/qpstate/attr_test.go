package qpstate

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// A ConnectX-like device: 2 ports, 128 P_Keys, a RoCE port's GID table
// of 8, RC depths 16 and a DC requester depth of 4.
var testLimits = Limits{Ports: 2, PKeys: 128, GIDs: 8, LinkLayer: ctx.LinkLayerEthernet,
	MaxQPInitRdAtomic: 16, MaxQPRdAtomic: 16, MaxDCInitRdAtomic: 4}

// TestCheckAttr checks each attribute CheckAttr refuses, on the
// transitions whose derived mask carries it, against the limit written out
// by hand: the value one past the limit is refused with EINVAL and
// ctx.ErrInvalidArgument, naming the attribute, the value and the limit,
// and the limit itself passes.
func TestCheckAttr(t *testing.T) {
	roce := func(a *ctx.QPAttr) { a.Path.GlobalRoute = true }
	cases := []struct {
		typ      ctx.QPType
		from, to ctx.QPState
		l        Limits
		attr     string
		bad, max uint64
		set      func(*ctx.QPAttr, uint64)
	}{
		{ctx.QPTypeRC, ctx.QPStateReset, ctx.QPStateInit, testLimits, "Port", 3, 2, func(a *ctx.QPAttr, v uint64) { a.Port = uint8(v) }},
		{ctx.QPTypeUD, ctx.QPStateInit, ctx.QPStateInit, testLimits, "Port", 3, 2, func(a *ctx.QPAttr, v uint64) { a.Port = uint8(v) }},
		{ctx.QPTypeDCT, ctx.QPStateReset, ctx.QPStateInit, testLimits, "Port", 3, 2, func(a *ctx.QPAttr, v uint64) { a.Port = uint8(v) }},
		{ctx.QPTypeRC, ctx.QPStateReset, ctx.QPStateInit, testLimits, "PKeyIndex", 128, 127, func(a *ctx.QPAttr, v uint64) { a.PKeyIndex = uint16(v) }},
		{ctx.QPTypeDCI, ctx.QPStateInit, ctx.QPStateInit, testLimits, "PKeyIndex", 128, 127, func(a *ctx.QPAttr, v uint64) { a.PKeyIndex = uint16(v) }},
		{ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, testLimits, "MaxDestRdAtomic", 17, 16, func(a *ctx.QPAttr, v uint64) { roce(a); a.MaxDestRdAtomic = uint8(v) }},
		{ctx.QPTypeRC, ctx.QPStateRTR, ctx.QPStateRTS, testLimits, "MaxRdAtomic", 17, 16, func(a *ctx.QPAttr, v uint64) { a.MaxRdAtomic = uint8(v) }},
		{ctx.QPTypeDCI, ctx.QPStateRTR, ctx.QPStateRTS, testLimits, "MaxRdAtomic", 5, 4, func(a *ctx.QPAttr, v uint64) { a.MaxRdAtomic = uint8(v) }},
		// DC's depth unknown: RC's, which older kernels apply to a DCI.
		{ctx.QPTypeDCI, ctx.QPStateRTR, ctx.QPStateRTS, Limits{MaxQPInitRdAtomic: 16}, "MaxRdAtomic", 17, 16, func(a *ctx.QPAttr, v uint64) { a.MaxRdAtomic = uint8(v) }},
		// DC's above RC's: RC's, which every kernel accepts.
		{ctx.QPTypeDCI, ctx.QPStateRTR, ctx.QPStateRTS, Limits{MaxQPInitRdAtomic: 8, MaxDCInitRdAtomic: 32}, "MaxRdAtomic", 9, 8, func(a *ctx.QPAttr, v uint64) { a.MaxRdAtomic = uint8(v) }},
		{ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, testLimits, "PathMTU", 6, 5, func(a *ctx.QPAttr, v uint64) { roce(a); a.PathMTU = ctx.MTU(v) }},
		{ctx.QPTypeDCI, ctx.QPStateInit, ctx.QPStateRTR, testLimits, "PathMTU", 6, 5, func(a *ctx.QPAttr, v uint64) { a.PathMTU = ctx.MTU(v) }},
		{ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, testLimits, "Path.SGIDIndex", 8, 7, func(a *ctx.QPAttr, v uint64) { roce(a); a.Path.SGIDIndex = uint8(v) }},
		{ctx.QPTypeDCT, ctx.QPStateInit, ctx.QPStateRTR, testLimits, "Path.SGIDIndex", 8, 7, func(a *ctx.QPAttr, v uint64) { roce(a); a.Path.SGIDIndex = uint8(v) }},
		{ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, testLimits, "Path.GlobalRoute", 0, 1, func(a *ctx.QPAttr, v uint64) { a.Path.GlobalRoute = v == 1 }},
		{ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, testLimits, "Path.Port", 3, 2, func(a *ctx.QPAttr, v uint64) { roce(a); a.Path.Port = uint8(v) }},
		// mlx5r_ib_rate: 1 is no rate, 26 past IB_RATE_1600_GBPS.
		{ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, testLimits, "Path.StaticRate", 26, 25, func(a *ctx.QPAttr, v uint64) { roce(a); a.Path.StaticRate = uint8(v) }},
		{ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, testLimits, "Path.StaticRate", 1, 25, func(a *ctx.QPAttr, v uint64) { roce(a); a.Path.StaticRate = uint8(v) }},
		{ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, Limits{}, "Path.StaticRate", 255, 25, func(a *ctx.QPAttr, v uint64) { a.Path.StaticRate = uint8(v) }},
	}
	for _, c := range cases {
		name := c.typ.String() + " " + c.from.String() + "→" + c.to.String() + " " + c.attr
		m, err := Derive(c.typ, c.from, c.to)
		require.NoError(t, err, name)
		// A QP brought to INIT on port 2, sending from port 2.
		base := ctx.QPAttr{State: c.to, Port: 2, Path: ctx.AddressAttr{Port: 2}, PathMTU: ctx.MTU1024}
		bad, good := base, base
		c.set(&bad, c.bad)
		c.set(&good, c.max)
		err = CheckAttr(c.typ, c.from, c.to, m, &bad, 2, c.l)
		require.ErrorIs(t, err, syscall.EINVAL, name)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
		var ae *AttrError
		require.True(t, errors.As(err, &ae), name)
		require.Equal(t, c.attr, ae.Attr, name)
		require.Equal(t, c.bad, ae.Value, name)
		require.Equal(t, c.max, ae.Max, name)
		require.Equal(t, c.typ, ae.Type, name)
		require.Contains(t, err.Error(), "drivers/infiniband/", name)
		require.NoError(t, CheckAttr(c.typ, c.from, c.to, m, &good, 2, c.l), name)
	}
}

// TestCheckAttrPathPort checks uverbs' rule that the address vector at RTR
// leaves from the port the QP was brought to INIT on.
func TestCheckAttrPathPort(t *testing.T) {
	a := ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU1024, Path: ctx.AddressAttr{Port: 1, GlobalRoute: true}}
	m, err := Derive(ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR)
	require.NoError(t, err)
	err = CheckAttr(ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, m, &a, 2, testLimits)
	var ae *AttrError
	require.True(t, errors.As(err, &ae))
	require.Equal(t, "Path.Port", ae.Attr)
	require.Equal(t, uint64(2), ae.Min)
	require.Contains(t, err.Error(), "Path.Port 1, must be 2")
	require.NoError(t, CheckAttr(ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, m, &a, 1, testLimits))
}

// TestCheckPorts checks that CheckPorts makes the port checks of uverbs
// modify_qp (Port, Path.Port, at RTR the QP's port) and none of the
// others, which come after the Q_Key.
func TestCheckPorts(t *testing.T) {
	m, err := Derive(ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR)
	require.NoError(t, err)
	a := ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: 0, MaxDestRdAtomic: 255,
		Path: ctx.AddressAttr{Port: 1, GlobalRoute: false, SGIDIndex: 200, StaticRate: 1}}
	require.NoError(t, CheckPorts(ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, m, &a, 1, testLimits),
		"GRH, SGID index, read depth, MTU and rate are not its")
	require.Error(t, CheckAttr(ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, m, &a, 1, testLimits))
	var ae *AttrError
	for _, c := range []struct {
		mod    func(*ctx.QPAttr)
		qpPort uint8
	}{
		{func(a *ctx.QPAttr) { a.Path.Port = 3 }, 1},
		{func(a *ctx.QPAttr) { a.Path.Port = 2 }, 1},
	} {
		b := a
		c.mod(&b)
		require.True(t, errors.As(CheckPorts(ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, m, &b, c.qpPort, testLimits), &ae))
		require.Equal(t, "Path.Port", ae.Attr)
	}
	m, err = Derive(ctx.QPTypeUD, ctx.QPStateReset, ctx.QPStateInit)
	require.NoError(t, err)
	u := ctx.QPAttr{State: ctx.QPStateInit, Port: 3, PKeyIndex: 0xffff}
	require.True(t, errors.As(CheckPorts(ctx.QPTypeUD, ctx.QPStateReset, ctx.QPStateInit, m, &u, 0, testLimits), &ae))
	require.Equal(t, "Port", ae.Attr)
	u.Port = 2
	require.NoError(t, CheckPorts(ctx.QPTypeUD, ctx.QPStateReset, ctx.QPStateInit, m, &u, 0, testLimits), "the P_Key index is mlx5_ib's")
}

// TestCheckAttrLeavesUnchecked checks that what the kernel does not look
// at passes: a DCT's P_Key index and path MTU (mlx5_ib_modify_dct checks
// neither), timers and retry counts past their field widths, attributes
// the mask does not carry, and limits the provider could not tell (0).
func TestCheckAttrLeavesUnchecked(t *testing.T) {
	huge := ctx.QPAttr{Port: 1, PKeyIndex: 0xffff, PathMTU: 7, MinRNRTimer: 255, Timeout: 255,
		RetryCount: 255, RNRRetry: 255, MaxRdAtomic: 255, MaxDestRdAtomic: 255,
		Path: ctx.AddressAttr{Port: 1, GlobalRoute: true}}
	for _, c := range []struct {
		typ      ctx.QPType
		from, to ctx.QPState
		l        Limits
	}{
		{ctx.QPTypeDCT, ctx.QPStateReset, ctx.QPStateInit, testLimits},
		{ctx.QPTypeDCT, ctx.QPStateInit, ctx.QPStateRTR, testLimits},
		{ctx.QPTypeUD, ctx.QPStateRTR, ctx.QPStateRTS, testLimits},
		{ctx.QPTypeRC, ctx.QPStateRTS, ctx.QPStateRTS, testLimits},
		{ctx.QPTypeRC, ctx.QPStateRTS, ctx.QPStateError, testLimits},
		{ctx.QPTypeRC, ctx.QPStateRTR, ctx.QPStateRTS, Limits{}},
	} {
		a := huge
		a.State = c.to
		m, err := Derive(c.typ, c.from, c.to)
		require.NoError(t, err)
		require.NoError(t, CheckAttr(c.typ, c.from, c.to, m, &a, 1, c.l), "%v %v→%v", c.typ, c.from, c.to)
	}
}

// TestStaticRate checks the static rates mlx5r_ib_rate takes (0 and 2 to
// 25, IB_RATE_2_5_GBPS to IB_RATE_1600_GBPS) and what QUERY_QP reads back:
// 0 for IB_RATE_800_GBPS and IB_RATE_1600_GBPS, which have no mlx5 code;
// that a DCT's is not looked at (mlx5_ib_modify_dct); and that a path MTU
// the kernel refuses is named before the rate, as __mlx5_ib_modify_qp
// checks it before mlx5_set_path.
func TestStaticRate(t *testing.T) {
	for r := 0; r < 256; r++ {
		want := r == 0 || r >= 2 && r <= 25
		require.Equal(t, want, StaticRateValid(uint8(r)), "rate %d", r)
	}
	for r, kept := range map[uint8]uint8{0: 0, 2: 2, 3: 3, 21: 21, 22: 22, 23: 0, 24: 24, 25: 0} {
		require.Equal(t, kept, StaticRateKept(r), "rate %d", r)
	}
	dct := ctx.QPAttr{State: ctx.QPStateRTR, Path: ctx.AddressAttr{Port: 1, GlobalRoute: true, StaticRate: 1}}
	m, err := Derive(ctx.QPTypeDCT, ctx.QPStateInit, ctx.QPStateRTR)
	require.NoError(t, err)
	require.NoError(t, CheckAttr(ctx.QPTypeDCT, ctx.QPStateInit, ctx.QPStateRTR, m, &dct, 1, testLimits))

	both := ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: 7, Path: ctx.AddressAttr{Port: 1, GlobalRoute: true, StaticRate: 1}}
	m, err = Derive(ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR)
	require.NoError(t, err)
	var ae *AttrError
	require.True(t, errors.As(CheckAttr(ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, m, &both, 1, testLimits), &ae))
	require.Equal(t, "PathMTU", ae.Attr)
	both.PathMTU = ctx.MTU1024
	require.True(t, errors.As(CheckAttr(ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, m, &both, 1, testLimits), &ae))
	require.Equal(t, "Path.StaticRate", ae.Attr)
	require.Contains(t, ae.Error(), "Path.StaticRate 1 outside 2..25")
	require.Contains(t, ae.Error(), "mlx5r_ib_rate")
}

// TestLimitsOf checks which device and port attribute each limit comes
// from.
func TestLimitsOf(t *testing.T) {
	l := LimitsOf(ctx.DeviceAttr{PhysPortCount: 2, MaxQPInitRdAtomic: 16, MaxQPRdAtomic: 8, MaxDCInitRdAtomic: 4, MaxDCRdAtomic: 2},
		ctx.PortAttr{PKeyTableLen: 1, GIDTableLen: 6, LinkLayer: ctx.LinkLayerEthernet})
	require.Equal(t, Limits{Ports: 2, PKeys: 1, GIDs: 6, LinkLayer: ctx.LinkLayerEthernet,
		MaxQPInitRdAtomic: 16, MaxQPRdAtomic: 8, MaxDCInitRdAtomic: 4}, l)
}
