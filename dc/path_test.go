package dc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// TestPathMTUAndTrafficClass: DCIConfig.MTU and DCTConfig.MTU are the
// path MTU of the RTR transition (0: the port's); TrafficClass reaches the
// GRH of every address handle NewRemote creates and of the DCT's RTR path
// on RoCE, and nothing on InfiniBand by LID; an MTU that is no MTU is
// refused before anything is created.
func TestPathMTUAndTrafficClass(t *testing.T) {
	for _, link := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		t.Run(link.String(), func(t *testing.T) {
			e, log := transporttest.NewRecording(t, sim.Options{LinkLayer: link})
			roce := link == ctx.LinkLayerEthernet
			srq, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: 4})
			require.NoError(t, err)
			defer func() { require.NoError(t, srq.Close()) }()
			dct, err := dc.NewDCT(e.PD[1], e.CQ(1, 16), dc.DCTConfig{SRQ: srq, Key: 7, MTU: ctx.MTU1024, TrafficClass: 0x48})
			require.NoError(t, err)
			defer func() { require.NoError(t, dct.Close()) }()
			rtr, ok := log.Last(dct.QPN(), ctx.QPStateRTR)
			require.True(t, ok)
			require.Equal(t, ctx.MTU1024, rtr.PathMTU)
			if roce {
				require.Equal(t, uint8(0x48), rtr.Path.TrafficClass)
			} else {
				require.Zero(t, rtr.Path.TrafficClass, "no GRH")
			}

			for _, c := range []struct {
				cfg dc.DCIConfig
				mtu ctx.MTU
			}{
				{dc.DCIConfig{SendDepth: 4, MTU: ctx.MTU512, TrafficClass: 0x60}, ctx.MTU512},
				{dc.DCIConfig{SendDepth: 4, TrafficClass: 0x60}, ctx.MTU4096},
			} {
				dci, err := dc.NewDCI(e.PD[0], e.CQ(0, 16), c.cfg)
				require.NoError(t, err)
				rtr, ok := log.Last(dci.QPN(), ctx.QPStateRTR)
				require.True(t, ok)
				require.Equal(t, c.mtu, rtr.PathMTU)
				before := len(log.AddressHandles())
				r, err := dci.NewRemote(dct.Endpoint())
				require.NoError(t, err)
				ahs := log.AddressHandles()
				require.Len(t, ahs, before+1)
				require.Equal(t, roce, ahs[before].GlobalRoute)
				if roce {
					require.Equal(t, uint8(0x60), ahs[before].TrafficClass)
				} else {
					require.Zero(t, ahs[before].TrafficClass)
				}
				require.NoError(t, r.Close())
				require.NoError(t, dci.Close())
			}

			_, err = dc.NewDCI(e.PD[0], e.CQ(0, 16), dc.DCIConfig{SendDepth: 4, MTU: 9})
			require.ErrorIs(t, err, ctx.ErrInvalidArgument)
			require.ErrorContains(t, err, "new DCI: path MTU 9")
			_, err = dc.NewDCT(e.PD[1], e.CQ(1, 16), dc.DCTConfig{SRQ: srq, MTU: 6})
			require.ErrorIs(t, err, ctx.ErrInvalidArgument)
			require.ErrorContains(t, err, "new DCT: path MTU 6")
		})
	}
}

// TestDCTEndpointMTU: a DCT's Endpoint carries the path MTU the DCT was
// configured with (endpoint.Endpoint.MTU: "the path MTU the queue was or
// will be configured with"), DCTConfig.MTU where it is below the port's;
// it carried the port's active MTU whatever DCTConfig.MTU said.
func TestDCTEndpointMTU(t *testing.T) {
	e, log := transporttest.NewRecording(t, sim.Options{})
	srq, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	for _, c := range []struct{ cfg, want ctx.MTU }{
		{ctx.MTU1024, ctx.MTU1024},
		{0, ctx.MTU4096},
		{ctx.MTU4096, ctx.MTU4096},
	} {
		dct, err := dc.NewDCT(e.PD[1], e.CQ(1, 16), dc.DCTConfig{SRQ: srq, Key: 7, MTU: c.cfg})
		require.NoError(t, err)
		rtr, ok := log.Last(dct.QPN(), ctx.QPStateRTR)
		require.True(t, ok)
		require.Equal(t, c.want, rtr.PathMTU)
		require.Equal(t, c.want, dct.Endpoint().MTU, "DCTConfig.MTU %v", c.cfg)
		require.NoError(t, dct.Close())
	}
}

// TestDCTServiceLevel: DCTConfig.SL is the SL of the DCT's RTR path, which
// mlx5_ib makes the priority (eth_prio) of the DCT's responses on RoCE, as
// perftest's -S sets it on the DCT too; an SL wider than the port's field
// is refused before anything is created. The DCT's path had SL 0 whatever
// the initiators used.
func TestDCTServiceLevel(t *testing.T) {
	for _, link := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		t.Run(link.String(), func(t *testing.T) {
			e, log := transporttest.NewRecording(t, sim.Options{LinkLayer: link})
			srq, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: 4})
			require.NoError(t, err)
			dct, err := dc.NewDCT(e.PD[1], e.CQ(1, 16), dc.DCTConfig{SRQ: srq, Key: 7, SL: 3})
			require.NoError(t, err)
			rtr, ok := log.Last(dct.QPN(), ctx.QPStateRTR)
			require.True(t, ok)
			require.Equal(t, uint8(3), rtr.Path.SL)
			require.NoError(t, dct.Close())

			wide := uint8(16)
			if link == ctx.LinkLayerEthernet {
				wide = 8
			}
			_, err = dc.NewDCT(e.PD[1], e.CQ(1, 16), dc.DCTConfig{SRQ: srq, Key: 7, SL: wide})
			require.ErrorIs(t, err, ctx.ErrInvalidArgument)
			require.ErrorContains(t, err, "new DCT: SL")
		})
	}
}
