package addrvec

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// GRHIPv4At is where the IPv4 header of a RoCE v2 packet over IPv4 starts
// in the prm.GRHSize bytes in front of a UD payload.
const GRHIPv4At = prm.GRHSize - prm.IPv4HeaderSize

// GRHAddresses reads the source and destination GIDs of the prm.GRHSize
// bytes b a UD receive finds in front of its payload, telling the forms
// apart as rdma-core's ibv_init_ah_from_wc and the kernel's
// ib_get_rdma_header_version do: a first nibble other than 6 with version
// 4 at byte GRHIPv4At is RoCE v2 over IPv4 (ipv4; its addresses become
// IPv4-mapped GIDs), whatever its checksum; a first nibble of 6 is an
// InfiniBand GRH or IPv6 header unless byte GRHIPv4At starts a 20-byte
// IPv4 header whose checksum is right. ok is false for anything else, or
// fewer than prm.GRHSize bytes. transport.ParseGRH reads the rest of the
// header; the software HCA's TCP link checks the source.
func GRHAddresses(b []byte) (sgid, dgid ctx.GID, ipv4, ok bool) {
	if len(b) < prm.GRHSize {
		return sgid, dgid, false, false
	}
	ip := b[GRHIPv4At:prm.GRHSize]
	v6 := b[0]>>4 == 6
	switch {
	case !v6 && ip[0]>>4 == 4, v6 && checkedIPv4(ip):
		return v4Mapped(ip[12:16]), v4Mapped(ip[16:20]), true, true
	case v6:
		copy(sgid[:], b[8:24])
		copy(dgid[:], b[24:40])
		return sgid, dgid, false, true
	}
	return sgid, dgid, false, false
}

func v4Mapped(v4 []byte) ctx.GID {
	var g ctx.GID
	g[10], g[11] = 0xff, 0xff
	copy(g[12:], v4)
	return g
}

// checkedIPv4 reports whether h (20 bytes) is an IPv4 header without
// options whose header checksum is right.
func checkedIPv4(h []byte) bool {
	return h[0] == prm.IPv4VersionIHL && prm.IPv4HeaderChecksum(h[:prm.IPv4HeaderSize]) == 0
}
