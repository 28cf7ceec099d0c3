package ud_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/ud"
)

// TestTrafficClass: Config.TrafficClass reaches the GRH of the address
// handle NewRemote creates on RoCE; a path by LID (InfiniBand) has no GRH
// and carries none.
func TestTrafficClass(t *testing.T) {
	for _, link := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		t.Run(link.String(), func(t *testing.T) {
			e, log := transporttest.NewRecording(t, sim.Options{LinkLayer: link})
			a, err := ud.New(e.PD[0], e.CQ(0, 16), ud.Config{SendDepth: 4, QKey: 1, TrafficClass: 0x28})
			require.NoError(t, err)
			defer func() { require.NoError(t, a.Close()) }()
			b, err := ud.New(e.PD[1], e.CQ(1, 16), ud.Config{SendDepth: 4, RecvDepth: 4, QKey: 1})
			require.NoError(t, err)
			defer func() { require.NoError(t, b.Close()) }()
			r, err := a.NewRemote(b.Endpoint())
			require.NoError(t, err)
			defer func() { require.NoError(t, r.Close()) }()
			ahs := log.AddressHandles()
			require.Len(t, ahs, 1)
			if link == ctx.LinkLayerEthernet {
				require.True(t, ahs[0].GlobalRoute)
				require.Equal(t, uint8(0x28), ahs[0].TrafficClass)
			} else {
				require.False(t, ahs[0].GlobalRoute)
				require.Zero(t, ahs[0].TrafficClass)
			}
		})
	}
}
