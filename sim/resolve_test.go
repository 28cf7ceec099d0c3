package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestNeighbourMACOfAnotherProcess resolves the GIDs of another process's
// RoCE ports, on a shared fabric and on a TCP link, to their MACs, as a
// kernel's neighbour resolution finds a host of its subnet: every GID of
// the table (link-local, IPv4-mapped, IPv6), not only the link-local ones
// whose MAC the GID spells. It is what CREATE_AH of the emulated kernel
// asks for a UD address handle to a peer process (ibv_ud_pingpong -g 3);
// it used to look at this Fabric's own devices only and fail with
// ETIMEDOUT. A GID of a slot nobody holds, of this process's own slot
// but no device of it, or of a live peer's slot beyond its devices, stays
// unresolved.
func TestNeighbourMACOfAnotherProcess(t *testing.T) {
	for _, c := range []struct {
		name string
		pair func(t *testing.T) (e1, e2 *env)
	}{
		{"shared", func(t *testing.T) (e1, e2 *env) {
			skipOnEmulatedCPU(t)
			name := testFabricName(t)
			e1 = newEnv(t, Options{Mode: Engine, Fabric: name, LinkLayer: ctx.LinkLayerEthernet})
			e2 = newEnv(t, Options{Mode: Engine, Fabric: name, LinkLayer: ctx.LinkLayerEthernet})
			return e1, e2
		}},
		{"link", func(t *testing.T) (e1, e2 *env) {
			skipOnEmulatedCPU(t)
			e1 = newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey, LinkLayer: ctx.LinkLayerEthernet})
			st, ok := e1.f.Link()
			require.True(t, ok)
			e2 = newEnv(t, Options{Mode: Engine, Link: st.Address, LinkKey: testLinkKey, LinkLayer: ctx.LinkLayerEthernet})
			require.Eventually(t, func() bool { s, _ := e1.f.Link(); return s.Peers == 1 }, 10*time.Second, time.Millisecond)
			return e1, e2
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e1, e2 := c.pair(t)
			for _, dev := range []struct {
				name string
				c    *ctx.Context
			}{{"sim0", e2.c}, {"sim1", e2.c2}} {
				want, ok := e2.f.PortMAC(dev.name)
				require.True(t, ok)
				gids, err := dev.c.QueryGIDs(1)
				require.NoError(t, err)
				require.Len(t, gids, 6)
				for _, g := range gids {
					// The peer resolves it; so does its own process.
					for _, f := range []*Fabric{e1.f, e2.f} {
						got, ok := f.neighbourMAC(g.GID)
						require.True(t, ok, "GID %s of %s", g.GID, dev.name)
						require.Equal(t, want, got, "GID %s of %s", g.GID, dev.name)
					}
				}
			}
			// The same forms naming no live HCA: a slot nobody holds,
			// and a third device of e1's own slot (it has two).
			own, err := e1.c.QueryGIDs(1)
			require.NoError(t, err)
			for _, g := range []ctx.GID{
				{0xfe, 0x80, 8: 0x00, 9: 0x02, 10: 0xc9, 11: 0x03, 12: 0x00, 13: 0xa0, 14: 0xbf, 15: 0xc0},
				{10: 0xff, 11: 0xff, 12: 10, 13: 77, 14: 0x0f, 15: 0xc1},
				{0x20, 0x01, 0x0d, 0xb8, 0x00, 0x77, 14: 0x0f, 15: 0xc1},
			} {
				_, ok := e1.f.neighbourMAC(g)
				require.False(t, ok, "GID %s", g)
			}
			third := own[3].GID
			third[15] += 2
			_, ok := e1.f.neighbourMAC(third)
			require.False(t, ok, "GID %s", third)
			// Nor a third device of e2's slot: the GID names a live
			// process, which has two HCAs (each of its GID forms).
			peer, err := e2.c2.QueryGIDs(1)
			require.NoError(t, err)
			for _, e := range peer {
				g := e.GID
				g[15]++
				_, ok := e1.f.neighbourMAC(g)
				require.False(t, ok, "GID %s, after the peer's last HCA's %s", g, e.GID)
			}

			// Once the peer is gone, its GIDs no longer resolve.
			gids, err := e2.c.QueryGIDs(1)
			require.NoError(t, err)
			require.NoError(t, e2.f.Close())
			require.Eventually(t, func() bool {
				_, ok := e1.f.neighbourMAC(gids[3].GID)
				return !ok
			}, 10*time.Second, time.Millisecond)
		})
	}
}

// TestHCAIndexOfGID: every GID newHCA gives an HCA reads back as that
// HCA's index, across the byte boundaries of the encoding.
func TestHCAIndexOfGID(t *testing.T) {
	for _, i := range []int{0, 1, 254, 255, 256, 511, 4095} {
		for _, e := range newHCA(i, ctx.LinkLayerEthernet).gids {
			got, ok := hcaIndexOfGID(e.GID)
			require.True(t, ok, "HCA %d GID %d", i, e.Index)
			require.Equal(t, i, got, "HCA %d GID %d", i, e.Index)
		}
	}
	_, ok := hcaIndexOfGID(ctx.GID{0xfe, 0x80, 15: 1}) // a GUID of another vendor
	require.False(t, ok)
}

// TestNeighbourMACAcrossLinkedFabrics: on a TCP link, a connecting Fabric
// learns from the listener's announcement the HCAs of a Fabric that
// connected after it, and resolves their GIDs, but not a GID past that
// Fabric's last HCA.
func TestNeighbourMACAcrossLinkedFabrics(t *testing.T) {
	skipOnEmulatedCPU(t)
	hub := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey, LinkLayer: ctx.LinkLayerEthernet})
	st, ok := hub.f.Link()
	require.True(t, ok)
	a := newEnv(t, Options{Mode: Engine, Link: st.Address, LinkKey: testLinkKey, LinkLayer: ctx.LinkLayerEthernet})
	b := newEnv(t, Options{Mode: Engine, Link: st.Address, LinkKey: testLinkKey, LinkLayer: ctx.LinkLayerEthernet})
	gids, err := b.c2.QueryGIDs(1)
	require.NoError(t, err)
	want, ok := b.f.PortMAC("sim1")
	require.True(t, ok)
	require.Eventually(t, func() bool {
		got, ok := a.f.neighbourMAC(gids[3].GID)
		return ok && got == want
	}, 10*time.Second, time.Millisecond, "a resolves the GID of b's second HCA")
	for _, e := range gids {
		got, ok := a.f.neighbourMAC(e.GID)
		require.True(t, ok, "GID %s", e.GID)
		require.Equal(t, want, got, "GID %s", e.GID)
		g := e.GID
		g[15]++
		_, ok = a.f.neighbourMAC(g)
		require.False(t, ok, "GID %s, after b's last HCA's", g)
	}
}
