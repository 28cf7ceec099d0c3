package sim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/sim"
)

func TestClockFollowsVirtualTime(t *testing.T) {
	f := sim.New(sim.Options{})
	t.Cleanup(func() { _ = f.Close() })
	c, err := f.Open("")
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	before := time.Now()
	k, err := c.Clock()
	require.NoError(t, err)
	i := k.Info()
	require.Equal(t, uint64(sim.ClockMask), i.Mask)
	require.Equal(t, time.Second/sim.ClockKHz/1000, k.Resolution(), "one cycle at 250 MHz")
	// Manual mode: the clock stands at the Fabric's start until advanced.
	start := k.ToTime(i.LastCycles)
	require.False(t, start.After(before), "the Fabric started before Open")
	require.Zero(t, i.LastCycles)

	f.Advance(time.Millisecond)
	require.Equal(t, start, k.ToTime(0), "the old snapshot converts as before")
	require.NoError(t, k.Refresh())
	j := k.Info()
	require.Equal(t, uint64(time.Millisecond/4), j.LastCycles)
	require.Equal(t, start.Add(time.Millisecond), k.ToTime(j.LastCycles))
	require.Equal(t, start, k.ToTime(0), "a raw value before the snapshot")

	require.NoError(t, c.Close())
	require.ErrorIs(t, k.Refresh(), ctx.ErrClosed)
}
