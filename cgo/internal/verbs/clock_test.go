//go:build cgo && linux

package verbs_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	. "github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestHardwareClock reads the device clock page and creates a CQ with
// completion timestamps. On the emulated device the page describes the
// model's clock (sim.ClockKHz), the clock its CQE timestamps count in.
func TestHardwareClock(t *testing.T) {
	d := hwDevice(t)
	info, err := d.ClockInfo()
	cq, cqErr := d.CreateCompletionQueue(CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 8, Timestamps: true}})
	emulated := os.Getenv("MLX5KIT_EMULATE") == "1"
	// A device function without a clock page (mlx5dv_get_clock_info fails
	// with EOPNOTSUPP, as libmlx5 does when the device reports a clock
	// frequency of 0) is no kit defect: skipped on a NIC, never on the
	// emulated device, whose page the model always writes.
	if err != nil && !emulated && errors.Is(err, ctx.ErrNotSupported) {
		if cqErr == nil {
			require.NoError(t, cq.Close())
		}
		t.Skipf("the device has no clock page: %v", err)
	}
	require.NoError(t, err)
	if emulated {
		// 4 ns a cycle, a 48-bit counter.
		require.Equal(t, uint64(4), uint64(info.Mult)>>info.Shift)
		require.Zero(t, uint64(info.Mult)&(1<<info.Shift-1))
		require.Equal(t, uint64(sim.ClockMask), info.Mask)
	}
	require.NotZero(t, info.Mult)
	require.NotZero(t, info.Mask)
	require.NoError(t, cqErr)
	require.NoError(t, cq.Close())
	// The emulated kernel rewrites the page every 10 ms. mlx5_core
	// rewrites it from its overflow work (mlx5_timestamp_overflow, every
	// overflow_period: about 4 to 17 s on kernels that size the cycle
	// counter's shift by the device frequency, 12 minutes and more on
	// those with the fixed shift of 23, Debian 12's 6.1 among them) and
	// when the PTP clock is adjusted (ptp4l or phc2sys running). On a NIC
	// whose page does not change within the wait, what needs refreshes is
	// skipped, saying so; on the emulated device it fails.
	// The kernel keeps the page current: snapshots taken later read later
	// times, never ahead of the time that passed. How stale the page is
	// when first read depends on when its refresher last ran, which a
	// loaded machine delays (by 60 ms and more under a full test run on
	// two CPUs), so the times are taken from refreshes this test sees
	// happen: it reads the page until its snapshot changes, twice, at
	// least 20 ms apart. A snapshot was written after the read before the
	// one that saw it began, so the time between the two snapshots is at
	// most the time from that earlier read to the read that saw the
	// second; 2 ms more covers the refresher's own step from taking its
	// snapshot to writing it.
	refreshed := func(after ctx.ClockInfo, deadline time.Time) (info ctx.ClockInfo, before, seen time.Time) {
		t.Helper()
		for before = time.Now(); ; before = seen {
			var err error
			info, err = d.ClockInfo()
			require.NoError(t, err)
			seen = time.Now()
			if info.Nanoseconds != after.Nanoseconds || info.LastCycles != after.LastCycles {
				return info, before, seen
			}
			if !seen.Before(deadline) {
				if !emulated {
					t.Skipf("the clock page did not change in 5 s (its snapshot %+v): mlx5_core rewrites it only every overflow period (seconds to minutes, by kernel and device clock frequency) or when the PTP clock is adjusted; run ptp4l or phc2sys on the device's PTP clock to check its refreshes", after)
				}
				require.Fail(t, "the clock page did not change in 5 s", "its snapshot %+v", after)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	first, err := d.ClockInfo()
	require.NoError(t, err)
	first, firstBefore, firstSeen := refreshed(first, time.Now().Add(5*time.Second))
	k, err := ctx.NewClock(first)
	require.NoError(t, err)
	later, laterSeen := first, firstSeen
	deadline := time.Now().Add(5 * time.Second)
	for laterSeen.Sub(firstSeen) < 20*time.Millisecond {
		later, _, laterSeen = refreshed(later, deadline)
	}
	passed := time.Duration(k.ToNanoseconds(later.LastCycles) - first.Nanoseconds)
	require.Positive(t, passed, "the page's time went back")
	require.LessOrEqual(t, passed, laterSeen.Sub(firstBefore)+2*time.Millisecond,
		"the page's time runs ahead of the time that passed")
}
