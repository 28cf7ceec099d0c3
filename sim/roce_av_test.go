package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestRoCEAddressVector checks the address vector the model's
// CreateAddressHandle builds on an Ethernet port against the bytes
// rdma-core's mlx5_create_ah writes (and the kit's hardware path):
//
//   - rmac is the destination's MAC, the one the kernel's neighbour
//     resolution answers (ib_resolve_eth_dmac), not the sender's own;
//   - rlid holds the UDP source port only for a RoCE v2 source GID
//     (mlx5_ah_set_udp_sport, from the flow label); for RoCE v1 it stays 0;
//   - a hop limit of 0 becomes 64, as the hardware path's fillAH makes
//     it (an IP TTL of 0 would not leave the host).
func TestRoCEAddressVector(t *testing.T) {
	e := newEnv(t, Options{LinkLayer: ctx.LinkLayerEthernet})
	theirs, err := e.c2.QueryGIDs(1)
	require.NoError(t, err)
	peerMAC, ok := e.f.PortMAC("sim1")
	require.True(t, ok)
	ownMAC, ok := e.f.PortMAC("sim0")
	require.True(t, ok)
	require.NotEqual(t, ownMAC, peerMAC)
	const fl = 0x9abcd
	sport := uint16(0xc000 | (fl^fl>>14)&0x3fff) // ibv_flow_label_to_udp_sport
	for _, c := range []struct {
		name  string
		idx   uint8
		hop   uint8
		sport uint16
		wantH uint8
	}{
		{"RoCEv1", 0, 17, 0, 17},
		{"RoCEv1-IPv4-mapped", 2, 17, 0, 17},
		{"RoCEv2-IPv6", 5, 17, sport, 17},
		{"RoCEv2-IPv4", 3, 17, sport, 17},
		{"RoCEv2-hop-limit-0", 3, 0, sport, 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			dgid := theirs[c.idx].GID
			ah, err := e.pd.CreateAddressHandle(ctx.AddressAttr{GlobalRoute: true, DGID: dgid, SGIDIndex: c.idx,
				HopLimit: c.hop, TrafficClass: 0xa5, FlowLabel: fl, SL: 5})
			require.NoError(t, err)
			want := addrvec.Address{RoCE: true, Global: true, DGID: dgid, SGIDIndex: c.idx, FlowLabel: fl,
				TrafficClass: 0xa5, HopLimit: c.wantH, SL: 5, RMAC: peerMAC, UDPSourcePort: c.sport}.AV()
			require.Equal(t, want, ah.AV())
			require.NoError(t, ah.Close())
		})
	}
}

// TestAddressVectorStaticRate checks the rate nibble of stat_rate_sl: the
// mlx5 rate code rdma-core's ah_attr_to_mlx5_rate makes of the ibv_rate
// code (IBV_RATE_10_GBPS, 3, is mlx5 code 8; IBV_RATE_1200_GBPS, 24, and
// IBV_RATE_MAX, 0, are 0, the port's rate), on both link layers.
func TestAddressVectorStaticRate(t *testing.T) {
	for _, link := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		e := newEnv(t, Options{LinkLayer: link})
		theirs, err := e.c2.QueryGIDs(1)
		require.NoError(t, err)
		for _, c := range []struct{ ibv, mlx5 uint8 }{{0, 0}, {2, 7}, {3, 8}, {7, 12}, {16, 15}, {18, 0}, {19, 9}, {20, 13}, {24, 0}} {
			ah, err := e.pd.CreateAddressHandle(ctx.AddressAttr{DLID: 2, GlobalRoute: true, DGID: theirs[0].GID, HopLimit: 1, StaticRate: c.ibv})
			require.NoError(t, err)
			av := ah.AV()
			require.Equal(t, c.mlx5, av[prm.AVStatRateSL]>>prm.AVStatRateShift, "%v: ibv_rate %d", link, c.ibv)
			require.NoError(t, ah.Close())
		}
	}
}
