package addrvec_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
)

// TestResolveMAC checks the destination MACs ib_resolve_eth_dmac finds:
// multicast GIDs mapped (IPv6 and IPv4), a neighbour's answer first for a
// unicast GID, a link-local GID nothing answers for from its interface
// identifier, and any other GID unresolved.
func TestResolveMAC(t *testing.T) {
	gid := func(s string) ctx.GID { return netip.MustParseAddr(s).As16() }
	known := gid("2001:db8::7")
	neighbour := func(g ctx.GID) ([6]byte, bool) {
		if g == known {
			return [6]byte{2, 0, 0, 0, 0, 7}, true
		}
		return [6]byte{}, false
	}
	for _, tc := range []struct {
		gid  string
		mac  [6]byte
		want bool
	}{
		{"ff0e::1:2:3", [6]byte{0x33, 0x33, 0, 2, 0, 3}, true},
		{"::ffff:239.129.2.3", [6]byte{0x01, 0x00, 0x5e, 0x01, 2, 3}, true},
		{"2001:db8::7", [6]byte{2, 0, 0, 0, 0, 7}, true},
		{"fe80::211:22ff:fe33:4455", [6]byte{0x00, 0x11, 0x22, 0x33, 0x44, 0x55}, true},
		{"2001:db8::8", [6]byte{}, false},
		{"::ffff:192.0.2.1", [6]byte{}, false},
	} {
		mac, ok := addrvec.ResolveMAC(gid(tc.gid), neighbour)
		require.Equal(t, tc.want, ok, tc.gid)
		require.Equal(t, tc.mac, mac, tc.gid)
	}
}
