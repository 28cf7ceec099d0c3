package sim

import (
	"syscall"
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

// TestRoCEAddressFamilies checks that an Ethernet port refuses, with
// EINVAL, an address handle or an RC path whose source GID and unicast
// destination GID are of different IP families (one IPv4-mapped, the other
// not), as the kernel's ib_resolve_eth_dmac does: rdma_resolve_ip refuses
// a source and destination address of different families. Only a
// link-local destination from a RoCE v1 source GID skips the IP stack (its
// MAC is in the GID); multicast destinations are mapped, not resolved.
func TestRoCEAddressFamilies(t *testing.T) {
	e := newEnv(t, Options{LinkLayer: ctx.LinkLayerEthernet})
	theirs, err := e.c2.QueryGIDs(1)
	require.NoError(t, err)
	// The tables: 0 v1 fe80, 1 v2 fe80, 2 v1 IPv4, 3 v2 IPv4, 4 v1 IPv6, 5 v2 IPv6.
	mcast := ctx.GID{0: 0xff, 1: 0x0e, 15: 1}
	for _, c := range []struct {
		sgid uint8
		dgid ctx.GID
		ok   bool
	}{
		{3, theirs[3].GID, true},
		{5, theirs[5].GID, true},
		{5, theirs[1].GID, true},  // IPv6 to link-local IPv6
		{2, theirs[0].GID, true},  // RoCE v1 to link-local: the MAC is in the GID
		{0, theirs[0].GID, true},  // RoCE v1 link-local
		{3, mcast, true},          // multicast: mapped, not resolved
		{3, theirs[5].GID, false}, // IPv4 to IPv6
		{3, theirs[1].GID, false}, // RoCE v2 IPv4 to link-local IPv6: resolved by IP
		{5, theirs[3].GID, false}, // IPv6 to IPv4
		{4, theirs[2].GID, false}, // RoCE v1 IPv6 to IPv4
	} {
		ah, err := e.pd.CreateAddressHandle(ctx.AddressAttr{GlobalRoute: true, DGID: c.dgid, SGIDIndex: c.sgid, HopLimit: 64})
		if c.ok {
			require.NoError(t, err, "SGID index %d to %v", c.sgid, c.dgid)
			require.NoError(t, ah.Close())
		} else {
			require.ErrorIs(t, err, ctx.ErrInvalidArgument, "SGID index %d to %v", c.sgid, c.dgid)
			require.ErrorIs(t, err, syscall.EINVAL)
		}
		if c.dgid == mcast {
			continue
		}
		qp := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
		require.NoError(t, qp.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: ctx.AccessRemoteWrite}))
		err = qp.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: 1, PathMTU: ctx.MTU1024,
			Path: ctx.AddressAttr{Port: 1, GlobalRoute: true, DGID: c.dgid, SGIDIndex: c.sgid, HopLimit: 64}})
		if c.ok {
			require.NoError(t, err, "RC: SGID index %d to %v", c.sgid, c.dgid)
		} else {
			require.ErrorIs(t, err, syscall.EINVAL, "RC: SGID index %d to %v", c.sgid, c.dgid)
		}
	}
}
