package dc

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestDCISettingsDCDepth: a DCI's reads and atomics are bounded by the
// lower of DC's requester depth and RC's (kernels apply one or the other,
// as qpstate.CheckAttr does), and by RC's where the device reports no DC
// depth; the default is 16 within the bound.
func TestDCISettingsDCDepth(t *testing.T) {
	for _, c := range []struct {
		name      string
		dev       ctx.DeviceAttr
		max, dflt uint8
	}{
		{"DC below RC", ctx.DeviceAttr{MaxQPInitRdAtomic: 16, MaxDCInitRdAtomic: 8}, 8, 8},
		{"DC above RC", ctx.DeviceAttr{MaxQPInitRdAtomic: 16, MaxDCInitRdAtomic: 64}, 16, 16},
		{"DC unknown", ctx.DeviceAttr{MaxQPInitRdAtomic: 32}, 32, 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rts ctx.QPAttr
			require.NoError(t, dciSettings(c.dev, DCIConfig{}, &rts))
			require.Equal(t, c.dflt, rts.MaxRdAtomic, "the default")
			rts = ctx.QPAttr{}
			require.NoError(t, dciSettings(c.dev, DCIConfig{MaxRdAtomic: int(c.max)}, &rts))
			require.Equal(t, c.max, rts.MaxRdAtomic)
			err := dciSettings(c.dev, DCIConfig{MaxRdAtomic: int(c.max) + 1}, &rts)
			require.ErrorIs(t, err, ctx.ErrInvalidArgument)
			require.ErrorContains(t, err, "reads/atomics")
		})
	}
}
