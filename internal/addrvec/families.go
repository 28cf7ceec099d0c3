package addrvec

import (
	"net/netip"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// FamiliesDiffer reports whether ib_resolve_eth_dmac refuses a RoCE path
// from the GID table entry src to the destination GID dgid: a unicast
// destination is resolved by IP (rdma_resolve_ip), which refuses a source
// and destination of different families (one GID IPv4-mapped, the other
// not), unless it is link-local and the source GID RoCE v1 (its MAC is in
// the GID); a multicast destination is mapped, not resolved. The software
// HCA and the emulated kernel refuse such a path with EINVAL.
func FamiliesDiffer(src ctx.GIDEntry, dgid ctx.GID) bool {
	d := netip.AddrFrom16(dgid)
	if dgid[0] == 0xff || d.IsLinkLocalUnicast() && src.Type == ctx.GIDTypeRoCEv1 {
		return false
	}
	return netip.AddrFrom16(src.GID).Is4In6() != d.Is4In6()
}
