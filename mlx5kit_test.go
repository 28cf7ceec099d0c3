package mlx5kit_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit"
	"github.com/mlx5kit/mlx5kit/ctx"
)

func TestOpenFallsBackToSoftwareHCA(t *testing.T) {
	t.Setenv(ctx.EnvProvider, "")
	c, err := mlx5kit.Open(mlx5kit.Options{})
	require.NoError(t, err)
	defer c.Close()
	if c.Provider() == ctx.ProviderHardware {
		t.Skip("an mlx5 device is present: Open chose it")
	}
	require.Equal(t, ctx.ProviderSoftware, c.Provider())
	require.Equal(t, ctx.KindSoftware, c.Kind())
}

func TestOpenExplicitProvider(t *testing.T) {
	c, err := mlx5kit.Open(mlx5kit.Options{Provider: ctx.ProviderSoftware})
	require.NoError(t, err)
	require.Equal(t, ctx.ProviderSoftware, c.Provider())
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close is idempotent")

	_, err = mlx5kit.Open(mlx5kit.Options{Provider: "no-such-provider"})
	require.ErrorIs(t, err, ctx.ErrNotFound)
}

func TestOpenEnvironmentChoosesProvider(t *testing.T) {
	t.Setenv(ctx.EnvProvider, ctx.ProviderSoftware)
	c, err := mlx5kit.Open(mlx5kit.Options{})
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, ctx.ProviderSoftware, c.Provider())
}
