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
	// The kernel keeps the page current: a snapshot taken later reads a
	// later time, by about as much as passed.
	k, err := ctx.NewClock(info)
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	later, err := d.ClockInfo()
	require.NoError(t, err)
	passed := time.Duration(k.ToNanoseconds(later.LastCycles) - info.Nanoseconds)
	require.InDelta(t, float64(20*time.Millisecond), float64(passed), float64(15*time.Millisecond))
}
