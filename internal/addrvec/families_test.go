package addrvec_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
)

// TestFamiliesDiffer checks the paths ib_resolve_eth_dmac refuses: a
// unicast destination of the other IP family than the source GID, except
// a link-local one from a RoCE v1 source; a multicast destination (IPv6,
// or IPv4-mapped: rdma_is_multicast_addr) never.
func TestFamiliesDiffer(t *testing.T) {
	gid := func(s string) ctx.GID { return netip.MustParseAddr(s).As16() }
	v4 := gid("::ffff:192.0.2.1")
	v6 := gid("2001:db8::1")
	ll := gid("fe80::1")
	for _, c := range []struct {
		name string
		src  ctx.GIDEntry
		dgid ctx.GID
		want bool
	}{
		{"IPv4-mapped to IPv4-mapped", ctx.GIDEntry{GID: v4, Type: ctx.GIDTypeRoCEv2}, gid("::ffff:192.0.2.2"), false},
		{"IPv6 to IPv6", ctx.GIDEntry{GID: v6, Type: ctx.GIDTypeRoCEv2}, gid("2001:db8::2"), false},
		{"IPv4-mapped to IPv6", ctx.GIDEntry{GID: v4, Type: ctx.GIDTypeRoCEv2}, v6, true},
		{"IPv6 to IPv4-mapped", ctx.GIDEntry{GID: v6, Type: ctx.GIDTypeRoCEv2}, v4, true},
		{"IPv4-mapped to link-local, RoCE v2", ctx.GIDEntry{GID: v4, Type: ctx.GIDTypeRoCEv2}, ll, true},
		{"IPv4-mapped to link-local, RoCE v1", ctx.GIDEntry{GID: v4, Type: ctx.GIDTypeRoCEv1}, ll, false},
		{"IPv4-mapped to multicast", ctx.GIDEntry{GID: v4, Type: ctx.GIDTypeRoCEv2}, gid("ff0e::1"), false},
		{"IPv6 to IPv4-mapped multicast", ctx.GIDEntry{GID: v6, Type: ctx.GIDTypeRoCEv2}, gid("::ffff:239.1.2.3"), false},
		{"IPv6 to IPv4-mapped 240/4", ctx.GIDEntry{GID: v6, Type: ctx.GIDTypeRoCEv2}, gid("::ffff:240.1.2.3"), true},
	} {
		require.Equal(t, c.want, addrvec.FamiliesDiffer(c.src, c.dgid), c.name)
	}
}

// TestGIDTypeFits: a RoCE v2 entry answers RoCE v2 packets only, an
// InfiniBand or RoCE v1 entry GRH packets only, an entry of an unknown
// type either.
func TestGIDTypeFits(t *testing.T) {
	for _, c := range []struct {
		typ     ctx.GIDType
		v2, grh bool
	}{
		{ctx.GIDTypeRoCEv2, true, false},
		{ctx.GIDTypeRoCEv1, false, true},
		{ctx.GIDTypeIB, false, true},
		{ctx.GIDType(99), true, true},
	} {
		require.Equal(t, c.v2, addrvec.GIDTypeFits(c.typ, true), "%v, RoCE v2", c.typ)
		require.Equal(t, c.grh, addrvec.GIDTypeFits(c.typ, false), "%v, GRH", c.typ)
	}
}

// TestResolvedHopLimit checks which RoCE paths of a connected QP keep the
// hop limit given and which take the route's (64): every unicast
// destination ib_resolve_eth_dmac resolves through the IP stack, IPv6,
// IPv4-mapped and link-local from a RoCE v2 source, takes the route's; a
// multicast destination, IPv6 or IPv4-mapped, and a link-local one from a
// RoCE v1 source keep theirs.
func TestResolvedHopLimit(t *testing.T) {
	gid := func(s string) ctx.GID { return netip.MustParseAddr(s).As16() }
	v1 := ctx.GIDEntry{Type: ctx.GIDTypeRoCEv1, GID: gid("fe80::1")}
	v2 := ctx.GIDEntry{Type: ctx.GIDTypeRoCEv2, GID: gid("2001:db8::1")}
	v4 := ctx.GIDEntry{Type: ctx.GIDTypeRoCEv2, GID: gid("::ffff:192.0.2.1")}
	for _, c := range []struct {
		src  ctx.GIDEntry
		dgid string
		want uint8
	}{
		{v2, "2001:db8::7", addrvec.RouteHopLimit},
		{v1, "2001:db8::7", addrvec.RouteHopLimit},
		{v4, "::ffff:192.0.2.7", addrvec.RouteHopLimit},
		{v2, "fe80::7", addrvec.RouteHopLimit},
		{v1, "fe80::7", 1},
		{v2, "ff0e::1", 1},
		{v4, "::ffff:239.1.2.3", 1},
	} {
		require.Equal(t, c.want, addrvec.ResolvedHopLimit(c.src, gid(c.dgid), 1), "%v to %s", c.src.Type, c.dgid)
	}
	require.Equal(t, uint8(64), uint8(addrvec.RouteHopLimit))
}
