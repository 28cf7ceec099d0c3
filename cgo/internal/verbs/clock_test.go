//go:build cgo && linux

package verbs_test

import (
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
	require.NoError(t, err)
	if os.Getenv("MLX5KIT_EMULATE") == "1" {
		// 4 ns a cycle, a 48-bit counter.
		require.Equal(t, uint64(4), uint64(info.Mult)>>info.Shift)
		require.Zero(t, uint64(info.Mult)&(1<<info.Shift-1))
		require.Equal(t, uint64(sim.ClockMask), info.Mask)
	}
	require.NotZero(t, info.Mult)
	require.NotZero(t, info.Mask)
	require.NoError(t, cqErr)
	require.NoError(t, cq.Close())
	// The kernel keeps the page current: snapshots taken later read later
	// times, never ahead of the time that passed. A loaded machine may
	// delay a refresh, so the check waits (up to 2 s) for the page to
	// move 20 ms on; the page may lag by the refresh period (at most
	// 10 ms, mlx5dv's max_clock_info_update_nsec on the model).
	start := time.Now()
	first, err := d.ClockInfo()
	require.NoError(t, err)
	k, err := ctx.NewClock(first)
	require.NoError(t, err)
	var passed time.Duration
	for time.Since(start) < 2*time.Second {
		time.Sleep(5 * time.Millisecond)
		later, err := d.ClockInfo()
		require.NoError(t, err)
		passed = time.Duration(k.ToNanoseconds(later.LastCycles) - first.Nanoseconds)
		if passed >= 20*time.Millisecond {
			break
		}
	}
	wall := time.Since(start)
	require.GreaterOrEqual(t, passed, 20*time.Millisecond, "the page's time after %v", wall)
	require.LessOrEqual(t, passed, wall+10*time.Millisecond, "the page's time runs ahead of the time that passed")
}
