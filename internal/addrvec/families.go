package addrvec

import (
	"net/netip"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// multicastGID reports whether the kernel takes gid for a multicast
// address (rdma_is_multicast_addr): an IPv6 multicast GID (ff00::/8) or an
// IPv4-mapped one of 224.0.0.0/4.
func multicastGID(gid ctx.GID) bool {
	return gid[0] == 0xff || netip.AddrFrom16(gid).Is4In6() && gid[12]&0xf0 == 0xe0
}

// FamiliesDiffer reports whether ib_resolve_eth_dmac refuses a RoCE path
// from the GID table entry src to the destination GID dgid: a unicast
// destination is resolved by IP (rdma_resolve_ip), which refuses a source
// and destination of different families (one GID IPv4-mapped, the other
// not), unless it is link-local and the source GID RoCE v1 (its MAC is in
// the GID); a multicast destination is mapped, not resolved. The software
// HCA and the emulated kernel refuse such a path with EINVAL.
func FamiliesDiffer(src ctx.GIDEntry, dgid ctx.GID) bool {
	d := netip.AddrFrom16(dgid)
	if multicastGID(dgid) || d.IsLinkLocalUnicast() && src.Type == ctx.GIDTypeRoCEv1 {
		return false
	}
	return netip.AddrFrom16(src.GID).Is4In6() != d.Is4In6()
}

// RouteHopLimit is the hop limit the kernel's route lookup gives a RoCE
// destination it resolves through the IP stack (rdma_resolve_ip's
// dev_addr.hoplimit: ip4_dst_hoplimit, ip6_dst_hoplimit) on a route
// without a hop limit of its own: the IPv4 default TTL
// (net.ipv4.ip_default_ttl) and the IPv6 default hop limit
// (net.ipv6.conf.*.hop_limit), both 64 unless set otherwise.
const RouteHopLimit = 64

// ResolvedHopLimit returns the hop limit that stays in a connected QP's
// (RC, UC) RoCE path given hop, from the GID table entry src to dgid:
// _ib_modify_qp resolves such a path's destination MAC with
// ib_resolve_eth_dmac, whose ib_resolve_unicast_gid_dmac replaces the hop
// limit by the route's (RouteHopLimit) when it resolves a unicast
// destination through the IP stack. A multicast destination (mapped, not
// resolved) and a link-local one from a RoCE v1 source GID (its MAC is in
// the GID) keep hop. mlx5_set_path writes what stays into the QP context,
// and QUERY_QP reads it back.
func ResolvedHopLimit(src ctx.GIDEntry, dgid ctx.GID, hop uint8) uint8 {
	d := netip.AddrFrom16(dgid)
	if multicastGID(dgid) || d.IsLinkLocalUnicast() && src.Type == ctx.GIDTypeRoCEv1 {
		return hop
	}
	return RouteHopLimit
}

// GIDTypeFits reports whether a GID table entry of type t can answer a
// packet that came as RoCE v2 (roceV2) or, if not, with an InfiniBand or
// RoCE v1 GRH, as ibv_init_ah_from_wc picks the entry by the received
// header's kind: an entry of an unknown type fits either.
func GIDTypeFits(t ctx.GIDType, roceV2 bool) bool {
	switch t {
	case ctx.GIDTypeRoCEv2:
		return roceV2
	case ctx.GIDTypeRoCEv1, ctx.GIDTypeIB:
		return !roceV2
	}
	return true
}

// AddressedGID returns the index of the entry of gids that holds gid and
// can answer a packet that came as RoCE v2 (roceV2) or with a GRH
// (GIDTypeFits): the local GID a datagram was sent to, as
// ibv_find_gid_index finds it for ibv_init_ah_from_wc; ok is false when
// no entry does.
func AddressedGID(gids []ctx.GIDEntry, gid ctx.GID, roceV2 bool) (index uint8, ok bool) {
	for _, e := range gids {
		if e.GID == gid && GIDTypeFits(e.Type, roceV2) {
			return uint8(e.Index), true
		}
	}
	return 0, false
}
