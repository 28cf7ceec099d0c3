package channel_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestRoCEChannelGID builds channels between two RoCE ports, whose GID
// tables begin with link-local RoCE v1 and v2 entries as a ConnectX's do.
// Left unset, the GID is chosen: RoCE v2 IPv4-mapped (index 3), not index
// 0; an explicit index overrides it. Either way the channel and both
// endpoints say which GID is used, and a write and a send cross.
func TestRoCEChannelGID(t *testing.T) {
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		for _, c := range []struct {
			name string
			sel  ctx.GIDSelector
			want uint8
			v4   bool
		}{
			{"chosen", ctx.GIDSelector{}, 3, true},
			{"index 5", ctx.GIDIndex(5), 5, false},
		} {
			t.Run(tr.String()+"/"+c.name, func(t *testing.T) {
				f := sim.New(sim.Options{Mode: sim.Engine, LinkLayer: ctx.LinkLayerEthernet, IdleSleep: 20 * time.Microsecond})
				t.Cleanup(func() { _ = f.Close() })
				a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
				opts := channel.Options{Transport: tr, GID: c.sel, WaitTimeout: 10 * time.Second}

				pa, err := channel.New(a.pd, opts)
				require.NoError(t, err)
				pb, err := channel.New(b.pd, opts)
				require.NoError(t, err)
				require.NoError(t, pb.Share(b.mr))
				for i, x := range []struct {
					h *host
					p *channel.Prepared
				}{{a, pa}, {b, pb}} {
					gids, err := x.h.dev.QueryGIDs(1)
					require.NoError(t, err)
					g := x.p.GID()
					require.Equal(t, gids[c.want], g, "side %d", i)
					require.Equal(t, ctx.GIDTypeRoCEv2, g.Type, "side %d", i)
					require.Equal(t, c.v4, netip.AddrFrom16(g.GID).Is4In6(), "side %d: GID %v", i, g.GID)
					ep := x.p.Endpoint()
					require.Equal(t, c.want, ep.GIDIndex, "side %d: the endpoint says which GID", i)
					require.Equal(t, g.GID, ep.GID, "side %d", i)
				}
				ea, eb := wire(t, pa.Endpoint()), wire(t, pb.Endpoint())
				ca, err := pa.Handshake(eb)
				require.NoError(t, err)
				cb, err := pb.Handshake(ea)
				require.NoError(t, err)
				t.Cleanup(func() { _ = ca.Close(); _ = cb.Close() })
				require.Equal(t, pa.GID(), ca.GID())
				require.Equal(t, pa.GID(), ca.MultiChannel.GID())
				require.Equal(t, c.want, cb.Remote(0).GIDIndex)

				region, err := ca.RemoteRegion(0, 0)
				require.NoError(t, err)
				copy(a.bytes()[200:], "over RoCE v2")
				require.NoError(t, ca.Write(context.Background(), channel.WriteRequest{Local: a.sge(200, 12), Remote: channel.At(region, 12000)}))
				require.Equal(t, "over RoCE v2", string(b.bytes()[12000:12012]))
				pend, err := cb.PostReceive(channel.RecvRequest{Local: b.sge(4096, 64)})
				require.NoError(t, err)
				require.NoError(t, ca.Send(context.Background(), channel.SendRequest{Local: a.sge(200, 12)}))
				require.NoError(t, pend.Wait(context.Background()))
				require.Equal(t, "over RoCE v2", string(b.bytes()[4096:4108]))
			})
		}
	}
}

// TestChannelGIDRefused: an explicit GID index the port's table does not
// have is refused at Build with an error naming it.
func TestChannelGIDRefused(t *testing.T) {
	f := sim.New(sim.Options{LinkLayer: ctx.LinkLayerEthernet})
	t.Cleanup(func() { _ = f.Close() })
	a := newHost(t, f, 0, 1<<16)
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		_, err := channel.New(a.pd, channel.Options{Transport: tr, GID: ctx.GIDIndex(9)})
		require.ErrorIs(t, err, ctx.ErrNotFound, "%v", tr)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%v", tr)
		require.Contains(t, err.Error(), "index 9", "%v", tr)
	}
}

// TestInfiniBandGIDIndexPastTableRefused: on InfiniBand a GID index past
// the port's GID table is refused at Build, as on RoCE; before, the
// channel was made and reported the index with a zero GID.
func TestInfiniBandGIDIndexPastTableRefused(t *testing.T) {
	f := newFabric(t, 1)
	a := newHost(t, f, 0, 1<<16)
	pa, err := a.dev.QueryPort(1)
	require.NoError(t, err)
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		_, err := channel.New(a.pd, channel.Options{Transport: tr, GID: ctx.GIDIndex(uint8(pa.GIDTableLen))})
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%v", tr)
		require.ErrorContains(t, err, fmt.Sprintf("GID table has %d entries", pa.GIDTableLen), "%v", tr)
	}
}

// TestInfiniBandChannelGID: on InfiniBand the channel reports the port GID
// (index 0) and connects by LID.
func TestInfiniBandChannelGID(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, _ := pair(t, a, b, channel.Options{WaitTimeout: 10 * time.Second})
	gids, err := a.dev.QueryGIDs(1)
	require.NoError(t, err)
	require.Equal(t, gids[0], ca.GID())
	require.Equal(t, ctx.GIDTypeIB, ca.GID().Type)
	require.NotZero(t, ca.Remote(0).LID)
}

// TestRoCEHandshakeRefusesEndpointWithoutGID: on RoCE a port is addressed
// by its GID; an endpoint that gives a LID and no GID is refused with
// ErrHandshake before anything is connected, as on InfiniBand one with
// neither, and the prepared channel then connects to the real peer.
func TestRoCEHandshakeRefusesEndpointWithoutGID(t *testing.T) {
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		t.Run(tr.String(), func(t *testing.T) {
			f := sim.New(sim.Options{Mode: sim.Engine, LinkLayer: ctx.LinkLayerEthernet, IdleSleep: 20 * time.Microsecond})
			t.Cleanup(func() { _ = f.Close() })
			a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
			opts := channel.Options{Transport: tr, WaitTimeout: 10 * time.Second}
			pa, err := channel.New(a.pd, opts)
			require.NoError(t, err)
			pb, err := channel.New(b.pd, opts)
			require.NoError(t, err)
			bad := pb.Endpoint()
			bad.LID, bad.GID = 1, ctx.GID{}
			requireRefusedThenConnects(t, pa, pb, bad)
		})
	}
}
