package ctx

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"
)

// ClockInfo is a snapshot of a device's free-running clock, the fields of
// struct mlx5dv_clock_info: at device cycle LastCycles the clock read
// Nanoseconds plus Frac/2^Shift nanoseconds, and one cycle lasts
// Mult/2^Shift nanoseconds. Cycles wrap at Mask. The hardware provider
// reads it from the clock page the kernel keeps up to date
// (mlx5dv_get_clock_info); the software HCA makes it from its own clock.
type ClockInfo struct {
	// Nanoseconds is the clock's reading, in nanoseconds since the Unix
	// epoch, at LastCycles (its fraction is in Frac).
	Nanoseconds uint64
	// LastCycles is the device cycle count the snapshot was taken at.
	LastCycles uint64
	// Frac is the fractional nanoseconds at LastCycles, scaled by 2^Shift.
	Frac uint64
	// Mult and Shift give the length of one cycle: Mult/2^Shift ns.
	Mult  uint32
	Shift uint32
	// Mask is the largest cycle count: the counter wraps to 0 after it.
	Mask uint64
}

// ToNanoseconds converts a raw device timestamp (a CQE's timestamp field, in
// device cycles) to nanoseconds since the Unix epoch, the arithmetic of
// mlx5dv_ts_to_ns: the cycles between raw and LastCycles, taken modulo the
// counter's width, are scaled by Mult/2^Shift and added to (or, for a raw
// value that precedes the snapshot by less than half the counter's range,
// subtracted from) Nanoseconds. The cycles times Mult are taken in 128
// bits, so a raw value anywhere within half the counter's range of
// LastCycles converts exactly; mlx5dv_ts_to_ns's 64-bit product overflows
// beyond 2^64/Mult cycles (half a minute at 156.25 MHz with the Mult of
// recent kernels, whose shift is 29), the span the kernel keeps its clock
// page refreshed within.
func (i *ClockInfo) ToNanoseconds(raw uint64) uint64 {
	ahead := (raw - i.LastCycles) & i.Mask
	if ahead <= i.Mask/2 {
		hi, lo := bits.Mul64(ahead, uint64(i.Mult))
		lo, carry := bits.Add64(lo, i.Frac, 0)
		return i.Nanoseconds + shiftRight128(hi+carry, lo, i.Shift)
	}
	behind := (i.LastCycles - raw) & i.Mask
	hi, back := bits.Mul64(behind, uint64(i.Mult))
	if hi == 0 && back < i.Frac {
		// Less than the pending fraction back (a cycle shorter than the
		// fraction): still after Nanoseconds.
		return i.Nanoseconds + (i.Frac-back)>>i.Shift
	}
	lo, borrow := bits.Sub64(back, i.Frac, 0)
	return i.Nanoseconds - shiftRight128(hi-borrow, lo, i.Shift)
}

// shiftRight128 returns the low 64 bits of the 128-bit hi:lo shifted right
// by shift (below 64).
func shiftRight128(hi, lo uint64, shift uint32) uint64 {
	return lo>>shift | hi<<(64-shift)
}

// check reports a snapshot that cannot convert anything.
func (i *ClockInfo) check() error {
	switch {
	case i.Mult == 0:
		return fmt.Errorf("clock info: cycle length 0 (mult 0): %w", ErrInvalidArgument)
	case i.Shift >= 64:
		return fmt.Errorf("clock info: shift %d not below 64: %w", i.Shift, ErrInvalidArgument)
	case i.Mask == 0:
		return fmt.Errorf("clock info: counter mask 0: %w", ErrInvalidArgument)
	}
	return nil
}

// Clock converts the raw completion timestamps of a Context's device to
// nanoseconds and time.Time. It holds a ClockInfo snapshot that the
// conversions read without a lock or an allocation; Refresh takes a new
// one. The hardware clock is steered (NTP / PTP adjust the kernel's Mult)
// and its conversion is exact only near the snapshot: refresh once in a
// while, at least once per half counter period (Mask/2 cycles) and before
// converting timestamps far from the last refresh. A Clock may be used from
// several goroutines. A zero Clock (not made by Context.Clock or NewClock)
// converts every timestamp to 0, and its Refresh fails with
// ErrInvalidArgument.
type Clock struct {
	c    *Context
	info atomic.Pointer[ClockInfo]
}

// idleHandle is the optional provider method behind Context.Idle: what to
// run while a poll finds nothing (nil on a NIC).
type idleHandle interface {
	IdleFunc() func()
}

// clockHandle is the optional provider method behind Context.Clock.
type clockHandle interface {
	ClockInfo() (ClockInfo, error)
}

// Clock returns the device's clock, with a fresh snapshot. It fails with
// ErrNotSupported when the provider or the device does not expose its
// clock (on hardware: mlx5dv_get_clock_info failed, as on a kernel without
// the clock info page), and with ErrInvalidArgument on a nil or zero
// Context (not made by Open).
func (c *Context) Clock() (*Clock, error) {
	if c == nil {
		// Not a Clock of NewClock, which Refresh would take it for.
		return nil, &OpError{Op: "read clock info", Err: errNilContext}
	}
	k := &Clock{c: c}
	if err := k.Refresh(); err != nil {
		return nil, err
	}
	return k, nil
}

// NewClock returns a Clock over a fixed snapshot, not tied to a device: for
// converting recorded timestamps and for tests. Refresh on it fails.
func NewClock(info ClockInfo) (*Clock, error) {
	if err := info.check(); err != nil {
		return nil, &OpError{Op: "new clock", Err: err}
	}
	k := &Clock{}
	k.info.Store(&info)
	return k, nil
}

// Refresh reads a new snapshot of the device clock.
func (k *Clock) Refresh() error {
	const op = "read clock info"
	if k.c == nil {
		if k.info.Load() == nil {
			return &OpError{Op: op, Err: errZero}
		}
		return &OpError{Op: op, Err: fmt.Errorf("clock made by NewClock has no device: %w", ErrNotSupported)}
	}
	if err := k.c.lock(op); err != nil {
		return err
	}
	ch, ok := k.c.dev.(clockHandle)
	var info ClockInfo
	var err error
	if ok {
		info, err = ch.ClockInfo()
	} else {
		err = fmt.Errorf("provider %s: %w", k.c.provider, ErrNotSupported)
	}
	k.c.tree.mu.Unlock()
	if err != nil {
		return opErr(op, err)
	}
	if err := info.check(); err != nil {
		return &OpError{Op: op, Err: err}
	}
	k.info.Store(&info)
	return nil
}

// zeroClockInfo is the snapshot of a zero Clock.
var zeroClockInfo ClockInfo

// snapshot returns the snapshot the conversions use now: zeroClockInfo,
// which converts everything to 0, for a zero Clock.
func (k *Clock) snapshot() *ClockInfo {
	if i := k.info.Load(); i != nil {
		return i
	}
	return &zeroClockInfo
}

// Info returns the snapshot the conversions use now.
func (k *Clock) Info() ClockInfo { return *k.snapshot() }

// ToNanoseconds converts a raw completion timestamp to nanoseconds since
// the Unix epoch (see ClockInfo.ToNanoseconds). It neither locks nor
// allocates.
func (k *Clock) ToNanoseconds(raw uint64) uint64 { return k.snapshot().ToNanoseconds(raw) }

// ToTime converts a raw completion timestamp to a time.Time.
func (k *Clock) ToTime(raw uint64) time.Time { return time.Unix(0, int64(k.ToNanoseconds(raw))) }

// Resolution returns the length of one device cycle, rounded up to the
// nanosecond: converted timestamps step by it.
func (k *Clock) Resolution() time.Duration {
	i := k.snapshot()
	ns := (uint64(i.Mult) + 1<<i.Shift - 1) >> i.Shift
	return time.Duration(ns)
}
