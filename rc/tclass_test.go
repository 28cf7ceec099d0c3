package rc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestTrafficClass: Config.TrafficClass reaches the GRH of the RTR path on
// RoCE; a path by LID (InfiniBand) has no GRH and carries none.
func TestTrafficClass(t *testing.T) {
	for _, link := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		t.Run(link.String(), func(t *testing.T) {
			e, log := transporttest.NewRecording(t, sim.Options{LinkLayer: link})
			a, err := rc.New(e.PD[0], e.CQ(0, 16), rc.Config{SendDepth: 4, TrafficClass: 0x68})
			require.NoError(t, err)
			b, err := rc.New(e.PD[1], e.CQ(1, 16), rc.Config{SendDepth: 4})
			require.NoError(t, err)
			require.NoError(t, a.Connect(b.Endpoint()))
			require.NoError(t, b.Connect(a.Endpoint()))
			rtrA, ok := log.Last(a.QPN(), ctx.QPStateRTR)
			require.True(t, ok)
			rtrB, ok := log.Last(b.QPN(), ctx.QPStateRTR)
			require.True(t, ok)
			require.Zero(t, rtrB.Path.TrafficClass, "the default")
			if link == ctx.LinkLayerEthernet {
				require.True(t, rtrA.Path.GlobalRoute)
				require.Equal(t, uint8(0x68), rtrA.Path.TrafficClass)
			} else {
				require.False(t, rtrA.Path.GlobalRoute)
				require.Zero(t, rtrA.Path.TrafficClass)
			}
		})
	}
}
