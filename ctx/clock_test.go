package ctx_test

import (
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// exactTime is the clock's reading at raw as a rational number: the
// snapshot's time plus the signed distance from LastCycles, taken modulo
// the counter's width and centred on it, times one cycle's length.
func exactTime(i ctx.ClockInfo, raw uint64) *big.Rat {
	width := new(big.Int).SetUint64(i.Mask)
	width.Add(width, big.NewInt(1))
	d := new(big.Int).Sub(new(big.Int).SetUint64(raw), new(big.Int).SetUint64(i.LastCycles))
	d.Mod(d, width)
	if d.Cmp(new(big.Int).Rsh(width, 1)) >= 0 {
		d.Sub(d, width)
	}
	scale := new(big.Int).Lsh(big.NewInt(1), uint(i.Shift))
	num := new(big.Int).Mul(d, big.NewInt(int64(i.Mult)))
	num.Add(num, new(big.Int).SetUint64(i.Frac))
	r := new(big.Rat).SetFrac(num, scale)
	return r.Add(r, new(big.Rat).SetInt(new(big.Int).SetUint64(i.Nanoseconds)))
}

// requireWithinOneNanosecond checks a conversion against exactTime: the
// integer arithmetic rounds, never by a whole nanosecond.
func requireWithinOneNanosecond(t *testing.T, i ctx.ClockInfo, raw uint64) {
	t.Helper()
	got := new(big.Rat).SetInt(new(big.Int).SetUint64(i.ToNanoseconds(raw)))
	diff := new(big.Rat).Sub(got, exactTime(i, raw))
	diff.Abs(diff)
	require.Equal(t, -1, diff.Cmp(big.NewRat(1, 1)), "raw %d: got %v, exact %v", raw, got.FloatString(3), exactTime(i, raw).FloatString(3))
}

func TestClockInfoConversion(t *testing.T) {
	// 156.25 MHz, 6.4 ns a cycle, as Mult/2^Shift with a rounding error the
	// way the kernel chooses them; a 41-bit counter; a fraction pending.
	const shift = 22
	mult := uint32(32 << shift / 5) // 6.4 × 2^shift, rounded down
	now := uint64(time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC).UnixNano())
	info := ctx.ClockInfo{Nanoseconds: now, LastCycles: 1 << 40, Frac: 3 << (shift - 2), Mult: mult, Shift: shift, Mask: 1<<41 - 1}
	for _, raw := range []uint64{
		info.LastCycles, info.LastCycles + 1, info.LastCycles + 1_000_000, info.LastCycles - 1, info.LastCycles - 1_000_000,
	} {
		requireWithinOneNanosecond(t, info, raw)
	}
	// Ahead and behind by the same distance land on either side.
	require.Greater(t, info.ToNanoseconds(info.LastCycles+1000), now)
	require.Less(t, info.ToNanoseconds(info.LastCycles-1000), now)

	// Across the counter's wrap: a snapshot just below the mask, a raw
	// value just after the wrap is ahead of it, one below is behind.
	wrap := info
	wrap.LastCycles = info.Mask - 10
	for _, raw := range []uint64{5, 1000, info.Mask - 2000, info.Mask} {
		requireWithinOneNanosecond(t, wrap, raw)
	}
	require.Greater(t, wrap.ToNanoseconds(5), wrap.ToNanoseconds(info.Mask))
	// Bits above the mask are ignored, as the device never sets them.
	require.Equal(t, wrap.ToNanoseconds(5), wrap.ToNanoseconds(5|1<<50))

	// A cycle shorter than the pending fraction (2 GHz, 0.75 ns pending):
	// one cycle back is still after Nanoseconds.
	fast := ctx.ClockInfo{Nanoseconds: now, LastCycles: 1 << 30, Frac: 3 << (shift - 2), Mult: 1 << (shift - 1), Shift: shift, Mask: 1<<48 - 1}
	for _, raw := range []uint64{fast.LastCycles - 1, fast.LastCycles - 2, fast.LastCycles - 3, fast.LastCycles + 1} {
		requireWithinOneNanosecond(t, fast, raw)
	}
	require.Equal(t, now, fast.ToNanoseconds(fast.LastCycles-1))

	// Monotonic over a sweep of a million cycles either side.
	prev := info.ToNanoseconds(info.LastCycles - 1_000_000)
	for raw := info.LastCycles - 1_000_000 + 997; raw < info.LastCycles+1_000_000; raw += 997 {
		ns := info.ToNanoseconds(raw)
		require.GreaterOrEqual(t, ns, prev, "raw %d", raw)
		prev = ns
	}
}

func TestNewClock(t *testing.T) {
	info := ctx.ClockInfo{Nanoseconds: 1_700_000_000_000_000_000, LastCycles: 100, Mult: 4 << 24, Shift: 24, Mask: 1<<48 - 1}
	k, err := ctx.NewClock(info)
	require.NoError(t, err)
	require.Equal(t, info, k.Info())
	require.Equal(t, 4*time.Nanosecond, k.Resolution())
	require.Equal(t, info.Nanoseconds+400, k.ToNanoseconds(200))
	require.Equal(t, time.Unix(0, int64(info.Nanoseconds)+400), k.ToTime(200))
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = k.ToNanoseconds(12345) }))
	err = k.Refresh()
	require.ErrorIs(t, err, ctx.ErrNotSupported)

	for _, bad := range []ctx.ClockInfo{
		{Mult: 0, Shift: 1, Mask: 1},
		{Mult: 1, Shift: 64, Mask: 1},
		{Mult: 1, Shift: 1, Mask: 0},
	} {
		_, err := ctx.NewClock(bad)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%+v", bad)
		var op *ctx.OpError
		require.True(t, errors.As(err, &op))
		require.Equal(t, "new clock", op.Op)
	}
}

func TestClockNotSupported(t *testing.T) {
	// The fake provider's device has no clock.
	_, c := openFake(t)
	_, err := c.Clock()
	require.ErrorIs(t, err, ctx.ErrNotSupported)
}

// Clock of a nil *Context is refused with ErrInvalidArgument, as the
// Context's other verbs refuse it; it answered ErrNotSupported, taking the
// nil Context for a Clock made by NewClock.
func TestClockOfNilContext(t *testing.T) {
	var c *ctx.Context
	k, err := c.Clock()
	require.Nil(t, k)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.NotErrorIs(t, err, ctx.ErrNotSupported)
}

// A snapshot converts raw values anywhere within half the counter's range,
// as Clock's refresh rule says, also with the large Mult of recent kernels
// (shift 29 for a 156.25 MHz clock), where the product of cycles and Mult
// passes 64 bits about 34 s from the snapshot: it wrapped there, giving
// times off by hours.
func TestClockInfoConversionFarFromSnapshot(t *testing.T) {
	const shift = 29
	mult := uint32(32 << shift / 5) // 6.4 × 2^shift, rounded down
	now := uint64(time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC).UnixNano())
	info := ctx.ClockInfo{Nanoseconds: now, LastCycles: 1 << 39, Frac: 5 << (shift - 3), Mult: mult, Shift: shift, Mask: 1<<41 - 1}
	minute := uint64(60e9 / 6.4)
	for _, raw := range []uint64{
		info.LastCycles + minute, info.LastCycles - minute,
		info.LastCycles + 100*minute, info.LastCycles - 100*minute,
		info.LastCycles + info.Mask/2, info.LastCycles - info.Mask/2,
	} {
		requireWithinOneNanosecond(t, info, raw&info.Mask)
	}
	k, err := ctx.NewClock(info)
	require.NoError(t, err)
	require.InDelta(t, float64(now+60e9), float64(k.ToNanoseconds(info.LastCycles+minute)), 10)
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = k.ToNanoseconds(info.LastCycles - 100*minute) }))
}

// A zero Clock converts to 0 and refuses Refresh with ErrInvalidArgument;
// its conversions panicked on the missing snapshot, and Refresh took it
// for a Clock of NewClock.
func TestZeroClock(t *testing.T) {
	var k ctx.Clock
	require.NotPanics(t, func() {
		require.Zero(t, k.ToNanoseconds(12345))
		require.Equal(t, time.Unix(0, 0), k.ToTime(12345))
		require.Zero(t, k.Info())
		require.Zero(t, k.Resolution())
	})
	err := k.Refresh()
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.NotErrorIs(t, err, ctx.ErrNotSupported)
}
