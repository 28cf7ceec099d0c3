package sqsize_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
)

// wqe512 is a device as rdma-core sees it with a ConnectX's rings of up to
// 32768 basic blocks (log_max_qp_sz 15, also max_qp_wr), max_sge 30 and
// atomics, and 512-byte send WQEs (half a ConnectX's: the sizes below fit
// within the ds count, which TestLimitsWithinDS checks at 1 KiB).
var wqe512 = sqsize.Device{MaxSQDescSize: 512, MaxSendWQEBB: 1 << 15, MaxSGE: 30, Atomics: true}

var sendTypes = []ctx.QPType{ctx.QPTypeRC, ctx.QPTypeUD, ctx.QPTypeDCI}

// TestOverhead checks rdma-core's per-WQE overhead against the segment
// sizes it adds up: the control segment (16), remote address (16), atomic
// segment (16), the UMR control, mkey context and KLM room of a bind or
// invalidation (48 + 64 + 64), the address vector of UD and DCI (48).
func TestOverhead(t *testing.T) {
	const ctrl, raddr, atomic, umr, av = 16, 16, 16, 48 + 64 + 64, 48
	for _, c := range []struct {
		name string
		t    ctx.QPType
		ops  sqsize.Ops
		want int
	}{
		{"RC without send ops flags", ctx.QPTypeRC, sqsize.DefaultOps(ctx.QPTypeRC), ctrl + umr},
		{"DCI without send ops flags", ctx.QPTypeDCI, sqsize.DefaultOps(ctx.QPTypeDCI), ctrl + umr + av},
		{"UD without send ops flags", ctx.QPTypeUD, sqsize.DefaultOps(ctx.QPTypeUD), ctrl + av},
		{"RC, the kit's ops", ctx.QPTypeRC, sqsize.KitOps(ctx.QPTypeRC, true), ctrl + raddr + atomic},
		{"DCI, the kit's ops", ctx.QPTypeDCI, sqsize.KitOps(ctx.QPTypeDCI, true), ctrl + raddr + atomic + av},
		{"UD, the kit's ops", ctx.QPTypeUD, sqsize.KitOps(ctx.QPTypeUD, true), ctrl + av},
		{"RC, no atomics", ctx.QPTypeRC, sqsize.KitOps(ctx.QPTypeRC, false), ctrl + raddr},
		{"DCI, no atomics", ctx.QPTypeDCI, sqsize.KitOps(ctx.QPTypeDCI, false), ctrl + raddr + av},
		{"SEND only", ctx.QPTypeRC, sqsize.OpSend, ctrl},
		{"local invalidation alone", ctx.QPTypeRC, sqsize.OpLocalInv, ctrl + umr},
		{"DCT", ctx.QPTypeDCT, sqsize.KitOps(ctx.QPTypeRC, true), 0},
	} {
		require.Equal(t, c.want, sqsize.Overhead(c.t, c.ops), c.name)
	}
	// What the issue is about: 192 and 240 bytes without the flags.
	require.Equal(t, 192, sqsize.Overhead(ctx.QPTypeRC, sqsize.DefaultOps(ctx.QPTypeRC)))
	require.Equal(t, 240, sqsize.Overhead(ctx.QPTypeDCI, sqsize.DefaultOps(ctx.QPTypeDCI)))
	// The kit never asks for binds or invalidations.
	for _, typ := range sendTypes {
		require.Zero(t, sqsize.KitOps(typ, true)&(sqsize.OpBindMW|sqsize.OpLocalInv|sqsize.OpTSO), typ)
	}
	require.Zero(t, sqsize.KitOps(ctx.QPTypeUD, true)&(sqsize.OpRDMAWrite|sqsize.OpAtomicCS), "UD posts SENDs only")
}

// capsTable is a table of send-queue configurations: SGE counts and inline
// sizes around segment and basic-block boundaries, and depths.
func capsTable() []ctx.QueuePairCaps {
	var out []ctx.QueuePairCaps
	for _, sge := range []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 21, 24, 26, 27, 28, 29, 30} {
		for _, inl := range []uint32{0, 1, 12, 13, 28, 44, 45, 60, 64, 76, 92, 108, 124, 128, 188, 200, 252, 316, 380, 412, 444, 460} {
			for _, depth := range []uint32{1, 7, 64, 1000, 4096, 8192, 16384} {
				out = append(out, ctx.QueuePairCaps{SendDepth: depth, MaxSendSGE: sge, MaxInline: inl})
			}
		}
	}
	return out
}

// TestKitAndRDMACoreAgree checks, for every QP type and a table of caps,
// that the ring rdma-core computes for the kit's request (Request's caps
// and KitOps, through Compute's model of mlx5_calc_sq_size) has slots of
// exactly the size of the kit's largest WQE as sqsize.KitWQEBBs (the
// bound wqebuilder is configured with) computes it from the granted
// limits, that the ring holds the asked depth of such WQEs, and that a
// configuration Check refuses is really beyond a limit.
func TestKitAndRDMACoreAgree(t *testing.T) {
	devices := map[string]sqsize.Device{
		"ConnectX":               wqe512,
		"no atomics":             {MaxSQDescSize: 512, MaxSendWQEBB: 1 << 15, MaxSGE: 30},
		"1 KiB WQEs, 16 SGEs":    {MaxSQDescSize: 1024, MaxSendWQEBB: 1 << 14, MaxSGE: 16, Atomics: true},
		"unaligned descriptor":   {MaxSQDescSize: 500, MaxSendWQEBB: 1 << 15, MaxSGE: 30, Atomics: true},
		"small rings, 256 bytes": {MaxSQDescSize: 256, MaxSendWQEBB: 1 << 10, Atomics: true},
	}
	for name, d := range devices {
		for _, typ := range sendTypes {
			accepted, refused := 0, 0
			lim := sqsize.LimitsOf(typ, d)
			for _, caps := range capsTable() {
				what := fmt.Sprintf("%s %v %+v", name, typ, caps)
				req, g, err := sqsize.Plan(typ, caps, d)
				if err != nil {
					refused++
					require.ErrorIs(t, err, ctx.ErrInvalidArgument, what)
					var le *sqsize.LimitError
					require.True(t, errors.As(err, &le), what)
					require.Contains(t, le.Msg, "limit", what)
					// Refused only beyond a limit: SGEs, inline bytes, or
					// a ring of the asked depth of the slots the request
					// needs.
					ops := sqsize.KitOps(typ, d.Atomics)
					slot := sqsize.Request(typ, ops, caps, d)
					g1, err1 := sqsize.Compute(typ, ops, ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: slot.MaxSendSGE, MaxInline: slot.MaxInline}, d)
					beyond := caps.MaxSendSGE > lim.MaxSGE || caps.MaxInline > lim.MaxInline || err1 != nil ||
						uint64(caps.SendDepth)*uint64(g1.WQESize) > uint64(d.MaxSendWQEBB)*prm.WQEBBSize
					require.True(t, beyond, "%s: refused within the limits: %v", what, err)
					continue
				}
				accepted++
				kit := sqsize.KitWQEBBs(typ, g.MaxSGE, g.MaxInline)
				require.Equal(t, kit*prm.WQEBBSize, g.WQESize, "%s: rdma-core's slot and the kit's largest WQE", what)
				require.Equal(t, kit, sqsize.KitWQEBBs(typ, g.MaxSGE, g.MaxInline), what)
				require.GreaterOrEqual(t, g.WQESize, sqsize.KitWQEBBs(typ, caps.MaxSendSGE, caps.MaxInline)*prm.WQEBBSize, what)
				require.GreaterOrEqual(t, g.MaxSGE, caps.MaxSendSGE, what)
				require.GreaterOrEqual(t, g.MaxInline, caps.MaxInline, what)
				require.GreaterOrEqual(t, g.MaxPost, caps.SendDepth, what)
				// wqebuilder starts a WQE only with MaxWQEBBs free: the
				// ring must hold the depth in WQEs of that size.
				require.GreaterOrEqual(t, g.WQECnt/kit, caps.SendDepth, what)
				require.LessOrEqual(t, g.WQECnt, d.MaxSendWQEBB, what)
				require.Equal(t, g.WQECnt&(g.WQECnt-1), uint32(0), "%s: a power of two", what)
				// rdma-core grants exactly what was asked on a filled slot.
				require.Equal(t, req.MaxInline, g.MaxInline, what)
				require.Equal(t, req.MaxSendSGE, g.MaxSGE, what)
				require.LessOrEqual(t, g.MaxSGE, max(caps.MaxSendSGE, lim.MaxSGE), what)
				require.LessOrEqual(t, g.MaxInline, lim.MaxInline, what)
			}
			require.NotZero(t, accepted, "%s %v", name, typ)
			if name == "ConnectX" {
				require.NotZero(t, refused, "%s %v: the table reaches past the limits", name, typ)
			}
		}
	}
}

// TestLimitsConnectX checks the per-type limits of a ConnectX-like device
// against the arithmetic of rdma-core's sizing with the kit's operations,
// and that Check accepts each limit and refuses one more, naming it.
func TestLimitsConnectX(t *testing.T) {
	for _, typ := range sendTypes {
		ov := sqsize.Overhead(typ, sqsize.KitOps(typ, true))
		// The smallest slot is the kit's largest WQE with one SGE: two
		// basic blocks (a masked compare-and-swap with its result, or the
		// builder's least headroom).
		smallest := max(align(ov+16, 64), 2*64)
		want := ctx.SendQueueLimits{
			MaxDepth:  uint32(int(wqe512.MaxSendWQEBB) * 64 / smallest),
			MaxSGE:    min(uint32((512-ov)/16), wqe512.MaxSGE),
			MaxInline: uint32(512 - ov - 4),
		}
		lim := sqsize.LimitsOf(typ, wqe512)
		require.Equal(t, want, lim, typ)
		t.Logf("%v: overhead %d bytes, limits %+v", typ, ov, lim)

		one := ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: 1}
		for _, c := range []struct {
			name   string
			ok, no ctx.QueuePairCaps
			limit  string
		}{
			{"depth", with(one, func(c *ctx.QueuePairCaps) { c.SendDepth = lim.MaxDepth }), with(one, func(c *ctx.QueuePairCaps) { c.SendDepth = lim.MaxDepth + 1 }),
				fmt.Sprintf("send depth %d above the %v limit of %d", lim.MaxDepth+1, typ, lim.MaxDepth)},
			{"SGE", with(one, func(c *ctx.QueuePairCaps) { c.MaxSendSGE = lim.MaxSGE }), with(one, func(c *ctx.QueuePairCaps) { c.MaxSendSGE = lim.MaxSGE + 1 }),
				fmt.Sprintf("max send SGE %d above the %v limit of %d", lim.MaxSGE+1, typ, lim.MaxSGE)},
			{"inline", with(one, func(c *ctx.QueuePairCaps) { c.MaxInline = lim.MaxInline }), with(one, func(c *ctx.QueuePairCaps) { c.MaxInline = lim.MaxInline + 1 }),
				fmt.Sprintf("max inline %d above the %v limit of %d", lim.MaxInline+1, typ, lim.MaxInline)},
		} {
			require.NoError(t, sqsize.Check(typ, c.ok, wqe512), "%v %s at the limit", typ, c.name)
			err := sqsize.Check(typ, c.no, wqe512)
			require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%v %s past the limit", typ, c.name)
			require.Contains(t, err.Error(), c.limit)
		}
		// A larger WQE lowers the depth limit, and the message says so.
		big := ctx.QueuePairCaps{SendDepth: lim.MaxDepth, MaxSendSGE: 1, MaxInline: 200}
		err := sqsize.Check(typ, big, wqe512)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument)
		require.Contains(t, err.Error(), "max inline 200")
	}
	// The limits differ by type: an inline size RC allows, UD and DCI may
	// not.
	rc, ud, dci := sqsize.LimitsOf(ctx.QPTypeRC, wqe512), sqsize.LimitsOf(ctx.QPTypeUD, wqe512), sqsize.LimitsOf(ctx.QPTypeDCI, wqe512)
	require.Greater(t, rc.MaxInline, ud.MaxInline)
	require.Greater(t, ud.MaxInline, dci.MaxInline)
	require.Greater(t, rc.MaxSGE, dci.MaxSGE)
}

// TestDefaultOpsQuarterDepth shows what creating QPs without send ops flags
// costs on a ConnectX: RC slots of 256 bytes for a one-SGE WQE, so a send
// queue deeper than max_qp_wr/4 fails (EINVAL in rdma-core), where the
// kit's ops give 128-byte slots and max_qp_wr/2.
func TestDefaultOpsQuarterDepth(t *testing.T) {
	for _, typ := range []ctx.QPType{ctx.QPTypeRC, ctx.QPTypeDCI} {
		caps := ctx.QueuePairCaps{SendDepth: wqe512.MaxSendWQEBB/4 + 1, MaxSendSGE: 1}
		_, err := sqsize.Compute(typ, sqsize.DefaultOps(typ), caps, wqe512)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, typ)
		g, err := sqsize.Compute(typ, sqsize.DefaultOps(typ), ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: 1}, wqe512)
		require.NoError(t, err)
		require.Equal(t, uint32(256), g.WQESize, typ)

		ops := sqsize.KitOps(typ, true)
		g, err = sqsize.Compute(typ, ops, sqsize.Request(typ, ops, caps, wqe512), wqe512)
		require.NoError(t, err, typ)
		require.Equal(t, uint32(128), g.WQESize, typ)
		require.NoError(t, sqsize.Check(typ, ctx.QueuePairCaps{SendDepth: wqe512.MaxSendWQEBB / 2, MaxSendSGE: 1}, wqe512))
	}
	// The SGEs that fit a 512-byte WQE without the flags: 20 on RC, 17 on
	// a DCI, below the 30 the device reports.
	for typ, want := range map[ctx.QPType]uint32{ctx.QPTypeRC: 20, ctx.QPTypeDCI: 17} {
		_, err := sqsize.Compute(typ, sqsize.DefaultOps(typ), ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: want}, wqe512)
		require.NoError(t, err)
		_, err = sqsize.Compute(typ, sqsize.DefaultOps(typ), ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: want + 1}, wqe512)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	}
}

// TestComputeMatchesRDMACore spells out mlx5_calc_sq_size for a few
// requests: the WQE is the overhead plus the larger of the data segments
// and the inline segment, in basic blocks; the ring the depth times that,
// rounded up to a power of two; the inline size granted what fills the
// WQE.
func TestComputeMatchesRDMACore(t *testing.T) {
	ops := sqsize.KitOps(ctx.QPTypeRC, true)
	for _, c := range []struct {
		caps             ctx.QueuePairCaps
		size, cnt, inl   uint32
		post             uint32
		refusedBecauseOf string
	}{
		{caps: ctx.QueuePairCaps{SendDepth: 100, MaxSendSGE: 1}, size: 64, cnt: 128, inl: 12, post: 128},
		{caps: ctx.QueuePairCaps{SendDepth: 100, MaxSendSGE: 2, MaxInline: 64}, size: 128, cnt: 256, inl: 76, post: 128},
		{caps: ctx.QueuePairCaps{SendDepth: 3, MaxSendSGE: 8}, size: 192, cnt: 16, inl: 140, post: 5},
		{caps: ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: 29}, size: 512, cnt: 8, inl: 460, post: 1},
		{caps: ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: 30}, refusedBecauseOf: "max send SGE 30 above the RC limit of 29"},
		{caps: ctx.QueuePairCaps{SendDepth: 1, MaxInline: 461}, refusedBecauseOf: "above max_sq_desc_sz 512"},
		{caps: ctx.QueuePairCaps{SendDepth: 1 << 15, MaxSendSGE: 1}, size: 64, cnt: 1 << 15, inl: 12, post: 1 << 15},
		{caps: ctx.QueuePairCaps{SendDepth: 1<<15 + 1, MaxSendSGE: 1}, refusedBecauseOf: "send depth 32769 above the RC limit of 32768 for 64-byte"},
	} {
		g, err := sqsize.Compute(ctx.QPTypeRC, ops, c.caps, wqe512)
		if c.refusedBecauseOf != "" {
			require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%+v", c.caps)
			require.Contains(t, err.Error(), c.refusedBecauseOf)
			continue
		}
		require.NoError(t, err, "%+v", c.caps)
		require.Equal(t, sqsize.Geometry{Overhead: 48, WQESize: c.size, WQECnt: c.cnt, MaxPost: c.post, MaxInline: c.inl, MaxSGE: c.caps.MaxSendSGE}, g, "%+v", c.caps)
	}
	// No send queue: nothing to size.
	g, err := sqsize.Compute(ctx.QPTypeRC, ops, ctx.QueuePairCaps{}, wqe512)
	require.NoError(t, err)
	require.Zero(t, g)
}

func with(c ctx.QueuePairCaps, f func(*ctx.QueuePairCaps)) ctx.QueuePairCaps {
	f(&c)
	return c
}

func align(n, a int) int { return (n + a - 1) / a * a }

// TestLimitsWithinDS: on a device with 1 KiB send WQEs (what a ConnectX's
// firmware reports) rdma-core's sizing would allow inline sizes a WQE
// cannot express (the ds count has 6 bits: 63 segments of 16 bytes). The
// limits stop where a WQE of the kit still fits the ds count: RC 972, UD
// 940, DCI 924 bytes inline, and one byte more does not fit.
func TestLimitsWithinDS(t *testing.T) {
	big := sqsize.Device{MaxSQDescSize: 1024, MaxSendWQEBB: 1 << 15, Atomics: true}
	// Segments before the payload of the kit's largest WQE: control,
	// address vector, remote address.
	head := map[ctx.QPType]int{ctx.QPTypeRC: 2, ctx.QPTypeUD: 1 + prm.AVSegments, ctx.QPTypeDCI: 2 + prm.AVSegments}
	want := map[ctx.QPType]uint32{ctx.QPTypeRC: 972, ctx.QPTypeUD: 940, ctx.QPTypeDCI: 924}
	for _, atomics := range []bool{true, false} {
		big.Atomics = atomics
		for _, typ := range sendTypes {
			lim := sqsize.LimitsOf(typ, big)
			require.Equal(t, want[typ], lim.MaxInline, "%v atomics %v", typ, atomics)
			require.Equal(t, want[typ], sqsize.KitMaxInline(typ))
			require.LessOrEqual(t, head[typ]+prm.InlineDS(int(lim.MaxInline)), prm.MaxDS, "%v: the limit's WQE", typ)
			require.Greater(t, head[typ]+prm.InlineDS(int(lim.MaxInline)+1), prm.MaxDS, "%v: a byte more", typ)
			require.LessOrEqual(t, head[typ]+int(lim.MaxSGE), prm.MaxDS, "%v: SGEs", typ)
			require.NoError(t, sqsize.Check(typ, ctx.QueuePairCaps{SendDepth: 16, MaxInline: lim.MaxInline}, big))
			err := sqsize.Check(typ, ctx.QueuePairCaps{SendDepth: 16, MaxInline: lim.MaxInline + 1}, big)
			require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%v", typ)
		}
	}
}

// TestGranted: what libmlx5 grants for a 1 KiB slot beyond the ds count is
// taken at the limit; sizes no slot holds, and those within the limit,
// are left alone.
func TestGranted(t *testing.T) {
	d := sqsize.Device{MaxSQDescSize: 1024, MaxSendWQEBB: 1 << 15, MaxSGE: 16, Atomics: true}
	for typ, granted := range map[ctx.QPType]uint32{ctx.QPTypeRC: 1004, ctx.QPTypeUD: 956, ctx.QPTypeDCI: 956} {
		lim := sqsize.LimitsOf(typ, d)
		for _, inline := range []uint32{lim.MaxInline - 1, lim.MaxInline, lim.MaxInline + 1, granted} {
			c := sqsize.Granted(typ, ctx.QueuePairCaps{SendDepth: 4, MaxSendSGE: 1, MaxInline: inline}, d)
			require.Equal(t, min(inline, lim.MaxInline), c.MaxInline, "%v %d", typ, inline)
			require.NoError(t, sqsize.Check(typ, c, d), "%v %d", typ, inline)
		}
		c := sqsize.Granted(typ, ctx.QueuePairCaps{SendDepth: 4, MaxSendSGE: 1, MaxInline: granted + 1}, d)
		require.Equal(t, granted+1, c.MaxInline, "%v", typ)
		require.Error(t, sqsize.Check(typ, c, d))
	}
}
