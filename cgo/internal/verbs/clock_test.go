//go:build cgo && linux

package verbs_test

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	. "github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestHardwareClock reads the device clock page and creates a CQ with
// completion timestamps. The emulated device maps no clock page (refused
// with ErrNotSupported, naming the verb) and stamps CQEs from the model's
// clock.
func TestHardwareClock(t *testing.T) {
	d := hwDevice(t)
	info, err := d.ClockInfo()
	cq, cqErr := d.CreateCompletionQueue(CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 8, Timestamps: true}})
	if os.Getenv("MLX5KIT_EMULATE") == "1" {
		require.ErrorIs(t, err, ctx.ErrNotSupported)
		var ve *VerbError
		require.True(t, errors.As(err, &ve), "%v", err)
		require.Equal(t, "mlx5dv_get_clock_info", ve.Verb)
		require.Equal(t, syscall.EINVAL, ve.Errno)
		require.NoError(t, cqErr, "the model stamps CQEs")
		require.NoError(t, cq.Close())
		return
	}
	require.NoError(t, err)
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
