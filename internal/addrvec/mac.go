package addrvec

import (
	"github.com/mlx5kit/mlx5kit/ctx"
)

// ResolveMAC finds the destination MAC of a RoCE address to gid as the
// kernel's ib_resolve_eth_dmac does: a multicast GID maps to its multicast
// MAC (ip_eth_mc_map for an IPv4-mapped one, ipv6_eth_mc_map otherwise); a
// unicast GID is looked up by neighbour (the fabric's GID tables stand for
// the neighbour table); a link-local GID nothing answers for gives the MAC
// its interface identifier encodes (rdma_get_ll_mac). ok is false when
// nothing resolves it, where the kernel fails with ETIMEDOUT.
func ResolveMAC(gid ctx.GID, neighbour func(ctx.GID) ([6]byte, bool)) (mac [6]byte, ok bool) {
	switch {
	case gid[0] == 0xff:
		return [6]byte{0x33, 0x33, gid[12], gid[13], gid[14], gid[15]}, true
	case multicastGID(gid): // IPv4-mapped
		return [6]byte{0x01, 0x00, 0x5e, gid[13] & 0x7f, gid[14], gid[15]}, true
	}
	if m, ok := neighbour(gid); ok {
		return m, true
	}
	if gid[0] == 0xfe && gid[1]&0xc0 == 0x80 {
		return [6]byte{gid[8] ^ 2, gid[9], gid[10], gid[13], gid[14], gid[15]}, true
	}
	return mac, false
}
