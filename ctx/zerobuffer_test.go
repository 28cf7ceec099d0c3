package ctx_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestZeroBuffer: a zero Buffer (not made by AllocBuffer) closes without
// an error, as a zero value of every other ctx type does (its Close
// unmapped nothing and failed with EINVAL), and registering it, or a nil
// *Buffer, is an invalid argument, not a closed buffer.
func TestZeroBuffer(t *testing.T) {
	_, c := openFake(t)
	defer c.Close()
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	for name, b := range map[string]*ctx.Buffer{"zero": {}, "nil": nil} {
		_, err = pd.RegisterBuffer(b, ctx.AccessLocalWrite)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
		require.NotErrorIs(t, err, ctx.ErrClosed, name)
		require.NoError(t, b.Close(), name)
		require.NoError(t, b.Close(), name)
	}
}
