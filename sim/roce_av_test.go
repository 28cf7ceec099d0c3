package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
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
