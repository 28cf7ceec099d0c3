package sim

import (
	"encoding/binary"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// The model's device clock: a free-running counter of ClockKHz kHz that
// counts the model's time (virtual in Manual mode, time since New in Engine
// mode) from the wall-clock instant the Fabric was made. It is what CQEs of
// a CQ created with ctx.CompletionQueueConfig.Timestamps carry, and what
// ClockInfo describes, so ctx.Clock converts them back to that wall time
// to within one cycle (4 ns).
const (
	// ClockKHz is the frequency of the model's device clock
	// (hca_core_clock): 250 MHz, one cycle every 4 ns.
	ClockKHz = 250_000
	// ClockMask is the largest value of the model's cycle counter, which
	// wraps to 0 after it (48 bits, about 13 days at 250 MHz).
	ClockMask = 1<<48 - 1

	cycleNanoseconds = 1_000_000 / ClockKHz
	clockShift       = 24
)

// cycles returns the device clock at model time now (ns since the start).
func cycles(now int64) uint64 { return uint64(now) / cycleNanoseconds & ClockMask }

// clockInfoLocked returns a snapshot of the device clock (f.mu held).
func (f *Fabric) clockInfoLocked() ctx.ClockInfo {
	now := f.now()
	c := cycles(now)
	// Nanoseconds is the wall time at exactly cycle c: the start plus the
	// cycles' whole length, so that the conversion needs no fraction.
	base := uint64(f.start.UnixNano()) + uint64(now)/cycleNanoseconds*cycleNanoseconds
	return ctx.ClockInfo{
		Nanoseconds: base,
		LastCycles:  c,
		Mult:        cycleNanoseconds << clockShift,
		Shift:       clockShift,
		Mask:        ClockMask,
	}
}

// ClockInfo returns a snapshot of the model's device clock (see ClockKHz).
func (d *device) ClockInfo() (ctx.ClockInfo, error) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	return d.f.clockInfoLocked(), nil
}

// stamp writes the device clock into a CQE (f.mu held).
func (f *Fabric) stamp(cqe []byte) {
	binary.BigEndian.PutUint64(cqe[prm.CQETimestamp:], cycles(f.now()))
}

// The clock the kernel-side model (package cgo/emulate) copies into the
// clock info page it maps for libmlx5.
func init() {
	simadopt.ClockInfo = func(p any) (ctx.ClockInfo, bool) {
		f, ok := p.(*Fabric)
		if !ok {
			return ctx.ClockInfo{}, false
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.clockInfoLocked(), true
	}
}
