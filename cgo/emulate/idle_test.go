//go:build cgo && linux

package emulate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestIdleRunsTheEmulatedModel: on a device of the hardware provider over
// the emulated kernel, Context.Idle runs rounds of the model behind it,
// as it does on the software HCA, and allocates nothing; a loop that
// calls it drives the model (the engine leaves it the rounds).
func TestIdleRunsTheEmulatedModel(t *testing.T) {
	maps := emulate.MappingCount()
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware})
	require.NoError(t, err)
	defer closeContextAndCollect(t, c, maps)
	require.Equal(t, ctx.KindHardware, c.Kind())
	f := emulate.Fabric()
	require.NotNil(t, f)
	c.Idle() // the engine steps aside from here on
	const n = 2000
	before := f.Stats().StepsExecuted
	for i := 0; i < n; i++ {
		c.Idle()
	}
	rounds := f.Stats().StepsExecuted - before
	// Each call runs a round unless the engine holds the model's lock
	// (then it yields); the engine sleeps while a loop drives the rounds.
	require.GreaterOrEqual(t, rounds, uint64(n/2), "rounds run by %d calls of Idle", n)
	require.Zero(t, testing.AllocsPerRun(100, c.Idle))
}
