package addrvec_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestGRHAddresses reads the addresses of each form (transport's
// TestParseGRH checks the rest of the header through ParseGRH).
func TestGRHAddresses(t *testing.T) {
	gid := func(s string) ctx.GID { return netip.MustParseAddr(s).As16() }
	grh := func(first byte, src, dst ctx.GID) []byte {
		b := make([]byte, prm.GRHSize)
		b[0] = first
		copy(b[8:], src[:])
		copy(b[24:], dst[:])
		return b
	}
	ipv4 := func(first byte, sum bool) []byte {
		b := make([]byte, prm.GRHSize)
		b[0] = first
		ip := b[addrvec.GRHIPv4At:]
		ip[0], ip[9] = prm.IPv4VersionIHL, prm.IPProtoUDP
		copy(ip[12:], []byte{192, 0, 2, 1, 192, 0, 2, 2})
		if sum {
			c := prm.IPv4HeaderChecksum(ip)
			ip[10], ip[11] = byte(c>>8), byte(c)
		}
		return b
	}
	v6a, v6b := gid("2001:db8::1"), gid("fe80::2")
	v4a, v4b := gid("::ffff:192.0.2.1"), gid("::ffff:192.0.2.2")
	for _, c := range []struct {
		name       string
		b          []byte
		sgid, dgid ctx.GID
		ipv4, ok   bool
	}{
		{"InfiniBand or IPv6", grh(0x60, v6a, v6b), v6a, v6b, false, true},
		{"IPv4 behind undefined bytes", ipv4(0, false), v4a, v4b, true, true},
		{"IPv4 with its checksum behind a 6", ipv4(0x60, true), v4a, v4b, true, true},
		{"IPv4 without its checksum behind a 6", ipv4(0x60, false),
			ctx.GID{12: prm.IPv4VersionIHL}, ctx.GID{5: prm.IPProtoUDP, 8: 192, 10: 2, 11: 1, 12: 192, 14: 2, 15: 2}, false, true},
		{"neither", make([]byte, prm.GRHSize), ctx.GID{}, ctx.GID{}, false, false},
		{"short", grh(0x60, v6a, v6b)[:prm.GRHSize-1], ctx.GID{}, ctx.GID{}, false, false},
	} {
		sgid, dgid, v4, ok := addrvec.GRHAddresses(c.b)
		require.Equal(t, c.ok, ok, c.name)
		require.Equal(t, c.ipv4, v4, c.name)
		require.Equal(t, c.sgid, sgid, c.name)
		require.Equal(t, c.dgid, dgid, c.name)
	}
}
