package mlx5kit_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/mlx5kit/mlx5kit/cgo"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestMain chooses the software HCA for the examples when the host has no
// mlx5 device and MLX5KIT_PROVIDER is unset: Open never falls back to it
// by itself, and the examples call Open with no provider named.
func TestMain(m *testing.M) {
	if why := cgo.NoDeviceReason(); why != "" && os.Getenv(ctx.EnvProvider) == "" {
		fmt.Fprintf(os.Stderr, "mlx5kit: no mlx5 device (%s): %s=%s for the examples\n", why, ctx.EnvProvider, ctx.ProviderSoftware)
		if err := os.Setenv(ctx.EnvProvider, ctx.ProviderSoftware); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}
