//go:build cgo && linux

package emulate

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestPortsFromEnv: MLX5KIT_EMULATE_PORTS takes 1 to 255 (unset: 1) and
// names itself in the error for anything else.
func TestPortsFromEnv(t *testing.T) {
	for v, want := range map[string]uint8{"": 1, "1": 1, "2": 2, "255": 255} {
		n, err := portsFromEnv(v)
		require.NoError(t, err, "%q", v)
		require.Equal(t, want, n, "%q", v)
	}
	for _, v := range []string{"0", "256", "-1", "two", " 2"} {
		_, err := portsFromEnv(v)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%q", v)
		require.ErrorContains(t, err, envPorts, "%q", v)
	}
}
