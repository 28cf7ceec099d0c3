package sim_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestRoCEGIDTable: an Ethernet port's GID table is laid out as a ConnectX
// fills it for a network device with an IPv4 and a global IPv6 address:
// each address as a RoCE v1 then a RoCE v2 entry, the link-local address
// first, so index 0 is RoCE v1 link-local and the choice (ctx.ChooseGID)
// is index 3, RoCE v2 IPv4-mapped. Each device has its own addresses.
func TestRoCEGIDTable(t *testing.T) {
	f := sim.New(sim.Options{LinkLayer: ctx.LinkLayerEthernet, Devices: 3})
	t.Cleanup(func() { _ = f.Close() })
	seen := map[ctx.GID]string{}
	for _, name := range []string{"sim0", "sim1", "sim2"} {
		c, err := f.Open(name)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		pa, err := c.QueryPort(1)
		require.NoError(t, err)
		gids, err := c.QueryGIDs(1)
		require.NoError(t, err)
		require.Len(t, gids, 6, name)
		require.Equal(t, len(gids), pa.GIDTableLen, name)
		for i, g := range gids {
			require.Equal(t, i, g.Index, name)
			require.Equal(t, uint8(1), g.Port, name)
			want := ctx.GIDTypeRoCEv1
			if i%2 == 1 {
				want = ctx.GIDTypeRoCEv2
				require.Equal(t, gids[i-1].GID, g.GID, "%s: entries %d and %d share an address", name, i-1, i)
			} else if other, dup := seen[g.GID]; dup {
				t.Fatalf("%s: GID %v also on %s", name, g.GID, other)
			}
			seen[g.GID] = name
			require.Equal(t, want, g.Type, "%s: GID %d", name, i)
		}
		a := func(i int) netip.Addr { return netip.AddrFrom16(gids[i].GID) }
		require.True(t, a(0).IsLinkLocalUnicast(), "%s: %v", name, a(0))
		require.True(t, a(2).Is4In6() && a(2).Unmap().IsPrivate(), "%s: %v", name, a(2))
		require.True(t, !a(4).Is4In6() && a(4).IsGlobalUnicast() && !a(4).IsLinkLocalUnicast(), "%s: %v", name, a(4))

		chosen, err := c.ChooseGID(1, ctx.GIDSelector{})
		require.NoError(t, err)
		require.Equal(t, gids[3], chosen, name)
	}
}

// TestInfiniBandGIDTable: an InfiniBand port has its port GID (the
// link-local prefix and the port GUID) at index 0, and that is the choice.
func TestInfiniBandGIDTable(t *testing.T) {
	f := sim.New(sim.Options{})
	t.Cleanup(func() { _ = f.Close() })
	c, err := f.Open("sim0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	gids, err := c.QueryGIDs(1)
	require.NoError(t, err)
	require.Len(t, gids, 1)
	require.Equal(t, ctx.GIDTypeIB, gids[0].Type)
	require.True(t, netip.AddrFrom16(gids[0].GID).IsLinkLocalUnicast())
	chosen, err := c.ChooseGID(1, ctx.GIDSelector{})
	require.NoError(t, err)
	require.Equal(t, gids[0], chosen)
}
