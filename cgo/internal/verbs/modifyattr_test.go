//go:build cgo && linux

package verbs

import (
	"errors"
	"syscall"
	"testing"

	"github.com/mlx5kit/mlx5kit/internal/devattr"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
)

// TestPrecheckModifyRefusesKernelLimits runs Modify's pre-check without a
// device, against the limits of a ConnectX-like RoCE device (1 port, 128
// P_Keys, 16 GIDs, RC depths 16, a DC initiator depth of 8): each value
// the kernel refuses at ibv_modify_qp is refused before the verb with a
// VerbError that carries EINVAL and ctx.ErrInvalidArgument and names the
// attribute, its value and the limit; the limit itself passes, and the
// limits are asked for the mask of the transition.
func TestPrecheckModifyRefusesKernelLimits(t *testing.T) {
	limits := qpstate.Limits{Ports: 1, PKeys: 128, GIDs: 16, LinkLayer: ctx.LinkLayerEthernet,
		MaxQPInitRdAtomic: 16, MaxQPRdAtomic: 16, MaxDCInitRdAtomic: 8}
	path := ctx.AddressAttr{Port: 1, GlobalRoute: true, SGIDIndex: 3}
	cases := []struct {
		typ       ctx.QPType
		cur       ctx.QPState
		attr      ctx.QPAttr
		field     string
		bad, good func(*ctx.QPAttr)
		want      string
	}{
		{ctx.QPTypeRC, ctx.QPStateReset, ctx.QPAttr{State: ctx.QPStateInit, Port: 1}, "Port",
			func(a *ctx.QPAttr) { a.Port = 2 }, func(a *ctx.QPAttr) { a.Port = 1 }, "Port 2, must be 1, the device's 1 port(s)"},
		{ctx.QPTypeUD, ctx.QPStateReset, ctx.QPAttr{State: ctx.QPStateInit, Port: 1}, "PKeyIndex",
			func(a *ctx.QPAttr) { a.PKeyIndex = 128 }, func(a *ctx.QPAttr) { a.PKeyIndex = 127 }, "PKeyIndex 128 above 127"},
		{ctx.QPTypeRC, ctx.QPStateInit, ctx.QPAttr{State: ctx.QPStateRTR, Port: 1, Path: path, PathMTU: ctx.MTU1024}, "MaxDestRdAtomic",
			func(a *ctx.QPAttr) { a.MaxDestRdAtomic = 17 }, func(a *ctx.QPAttr) { a.MaxDestRdAtomic = 16 }, "max_qp_rd_atom"},
		{ctx.QPTypeRC, ctx.QPStateRTR, ctx.QPAttr{State: ctx.QPStateRTS, Port: 1}, "MaxRdAtomic",
			func(a *ctx.QPAttr) { a.MaxRdAtomic = 17 }, func(a *ctx.QPAttr) { a.MaxRdAtomic = 16 }, "max_qp_init_rd_atom"},
		{ctx.QPTypeDCI, ctx.QPStateRTR, ctx.QPAttr{State: ctx.QPStateRTS, Port: 1}, "MaxRdAtomic",
			func(a *ctx.QPAttr) { a.MaxRdAtomic = 9 }, func(a *ctx.QPAttr) { a.MaxRdAtomic = 8 }, "MaxRdAtomic 9 above 8, max_dc_init_rd_atom"},
		{ctx.QPTypeRC, ctx.QPStateInit, ctx.QPAttr{State: ctx.QPStateRTR, Port: 1, Path: path}, "PathMTU",
			func(a *ctx.QPAttr) { a.PathMTU = 0 }, func(a *ctx.QPAttr) { a.PathMTU = ctx.MTU4096 }, "PathMTU 0 outside 1..5"},
		{ctx.QPTypeRC, ctx.QPStateInit, ctx.QPAttr{State: ctx.QPStateRTR, Port: 1, Path: path, PathMTU: ctx.MTU1024}, "Path.SGIDIndex",
			func(a *ctx.QPAttr) { a.Path.SGIDIndex = 16 }, func(a *ctx.QPAttr) { a.Path.SGIDIndex = 15 }, "GID table of 16 entries"},
		{ctx.QPTypeDCT, ctx.QPStateInit, ctx.QPAttr{State: ctx.QPStateRTR, Port: 1, Path: path, PathMTU: ctx.MTU1024}, "Path.GlobalRoute",
			func(a *ctx.QPAttr) { a.Path.GlobalRoute = false }, func(a *ctx.QPAttr) { a.Path.GlobalRoute = true }, "needs a GRH"},
		{ctx.QPTypeRC, ctx.QPStateInit, ctx.QPAttr{State: ctx.QPStateRTR, Port: 1, Path: path, PathMTU: ctx.MTU1024}, "Path.StaticRate",
			func(a *ctx.QPAttr) { a.Path.StaticRate = 1 }, func(a *ctx.QPAttr) { a.Path.StaticRate = 2 }, "mlx5r_ib_rate"},
	}
	for _, c := range cases {
		name := c.typ.String() + " " + c.field
		var asked []int
		lim := func(mask int) (qpstate.Limits, error) {
			asked = append(asked, mask)
			return limits, nil
		}
		bad, good := c.attr, c.attr
		c.bad(&bad)
		c.good(&good)
		mask, err := precheckModify(c.typ, c.cur, &bad, 1, lim, "QP 0x1")
		require.Zero(t, mask, name)
		var ve *VerbError
		require.True(t, errors.As(err, &ve), "%s: %v", name, err)
		require.Equal(t, "ibv_modify_qp", ve.Verb, name)
		require.Equal(t, syscall.EINVAL, ve.Errno, name)
		require.ErrorIs(t, err, syscall.EINVAL, name)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
		require.Contains(t, err.Error(), c.field, name)
		require.Contains(t, err.Error(), c.want, name)
		require.Contains(t, err.Error(), "drivers/infiniband/", "%s: names the kernel check", name)

		mask, err = precheckModify(c.typ, c.cur, &good, 1, lim, "QP 0x1")
		require.NoError(t, err, name)
		want, derr := qpstate.Derive(c.typ, c.cur, c.attr.State)
		require.NoError(t, derr)
		require.Equal(t, int(want), mask, name)
		require.Equal(t, []int{mask, mask}, asked, "%s: the limits are asked for the transition's mask", name)
	}
}

// TestPrecheckModifyLimitsError checks that a failed query of the limits
// is returned as it is, and that a transition the table refuses is refused
// before the limits are queried.
func TestPrecheckModifyLimitsError(t *testing.T) {
	qerr := &VerbError{Verb: "ibv_query_device_ex", Errno: syscall.EIO}
	_, err := precheckModify(ctx.QPTypeRC, ctx.QPStateReset, &ctx.QPAttr{State: ctx.QPStateInit, Port: 1},
		1, func(int) (qpstate.Limits, error) { return qpstate.Limits{}, qerr }, "QP 0x1")
	require.Same(t, qerr, err)

	_, err = precheckModify(ctx.QPTypeDCT, ctx.QPStateRTR, &ctx.QPAttr{State: ctx.QPStateError, Port: 1},
		1, func(int) (qpstate.Limits, error) {
			t.Fatal("limits queried for a refused transition")
			return qpstate.Limits{}, nil
		}, "QP 0x1")
	require.ErrorIs(t, err, syscall.EINVAL)
	require.ErrorIs(t, err, ctx.ErrInvalidState)
}

// TestDCRdAtomicFollowsKernel checks which of rdma-core's DC depths
// ctx.DeviceAttr calls the initiator's: max_dc_init_rd_atom (1 <<
// log_max_ra_res_dc), the one validate_rd_atomic bounds a DCI's
// max_rd_atomic by; none without the capability bit.
func TestDCRdAtomicFollowsKernel(t *testing.T) {
	dv := DVAttr{CompMask: devattr.DVMaskMaxDCRdAtomic, MaxDCRequesterRdAtomic: 32, MaxDCResponderRdAtomic: 8}
	init, resp := dcRdAtomic(dv)
	require.Equal(t, uint32(8), init, "max_dc_init_rd_atom bounds a DCI")
	require.Equal(t, uint32(32), resp)
	dv.CompMask = 0
	init, resp = dcRdAtomic(dv)
	require.Zero(t, init)
	require.Zero(t, resp)
}

// TestDCDepthUnreportedWhenZero: libmlx5 (47 and later) sets
// MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM whenever it is asked, but reads the
// two depths with a DEVX QUERY_HCA_CAP at context creation and leaves them
// 0 when that command fails (get_hca_general_caps returns early); a depth
// it did read is 1 << log_max_ra_*_dc, never 0. A zero initiator depth is
// therefore no report, and the DCI probe must run as without the bit.
func TestDCDepthUnreportedWhenZero(t *testing.T) {
	require.True(t, dcDepthUnreported(DVAttr{}), "no capability bit")
	dv := DVAttr{CompMask: devattr.DVMaskMaxDCRdAtomic}
	require.True(t, dcDepthUnreported(dv), "bit set, depths left 0 by a failed DEVX query")
	dv.MaxDCRequesterRdAtomic, dv.MaxDCResponderRdAtomic = 32, 8
	require.False(t, dcDepthUnreported(dv), "bit set with the depths read")
}

// TestDCDepthProbedWhenReportedZero runs the probe on the first mlx5
// device (the emulated one under MLX5KIT_EMULATE=1) as a libmlx5 whose
// DEVX query failed would describe it: the capability bit set and both DC
// depths 0. The DC initiator depth must then be probed, not left 0 (which
// would bound a DCI's max_rd_atomic by RC's depth only).
func TestDCDepthProbedWhenReportedZero(t *testing.T) {
	if why := NoDeviceReason(); why != "" {
		t.Skip(why)
	}
	d, err := Open("")
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	d.dv.CompMask |= devattr.DVMaskMaxDCRdAtomic
	d.dv.MaxDCRequesterRdAtomic, d.dv.MaxDCResponderRdAtomic = 0, 0
	attr, err := d.Query()
	require.NoError(t, err)
	if !attr.DC {
		t.Skip("the device has no DC")
	}
	require.NotZero(t, attr.MaxDCInitRdAtomic, "DC initiator depth neither reported nor probed")
	l, err := func() (qpstate.Limits, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.modifyLimits(int(qpstate.MaxQPRdAtomic), 1)
	}()
	require.NoError(t, err)
	require.Equal(t, attr.MaxDCInitRdAtomic, l.MaxDCInitRdAtomic, "Modify's pre-check bounds a DCI by the probed depth")
}
