package transport

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// ErrBadGRH means that the bytes in front of a UD payload are shorter than a
// GRH or hold neither an IPv6-form GRH nor an IPv4 header.
var ErrBadGRH = errors.New("bad global route header")

// GRH is what a received global route header says about its packet.
type GRH struct {
	// SGID and DGID are the sender's and the receiver's GIDs (for an IPv4
	// packet: the IPv4-mapped GIDs ::ffff:a.b.c.d).
	SGID, DGID ctx.GID
	// TrafficClass is the GRH traffic class or the IPv4 TOS byte.
	TrafficClass uint8
	// FlowLabel is the GRH flow label (0 for IPv4).
	FlowLabel uint32
	// HopLimit is the hop limit or the IPv4 TTL.
	HopLimit uint8
	// IPv4 reports that the packet was RoCE v2 over IPv4.
	IPv4 bool
	// RoCEv2 reports a RoCE v2 packet: an IPv4 header, or an IPv6 header
	// whose next header is UDP (17). An InfiniBand or RoCE v1 GRH has next
	// header 0x1b.
	RoCEv2 bool
}

// ParseGRH reads the prm.GRHSize bytes a UD receive finds in front of its
// payload. They hold either a 40-byte InfiniBand GRH or RoCE v2 IPv6
// header (IP version 6 in the first nibble), or, for RoCE v2 over IPv4, 20
// bytes the device leaves undefined followed by the 20-byte IPv4 header,
// whose addresses become IPv4-mapped GIDs. The forms are told apart as
// rdma-core's ibv_init_ah_from_wc and the kernel's
// ib_get_rdma_header_version do: a first nibble other than 6 with version 4
// at byte 20 is the IPv4 form, whatever its checksum (the device checked
// the packet; the checksum is not looked at); a first nibble of 6 is the
// IPv6 form unless byte 20 starts a 20-byte IPv4 header whose checksum is
// right, since the undefined bytes may start with a 6. Anything else is
// refused with ErrBadGRH.
func ParseGRH(b []byte) (GRH, error) {
	if len(b) < prm.GRHSize {
		return GRH{}, fmt.Errorf("parse GRH: %d bytes, want %d: %w", len(b), prm.GRHSize, ErrBadGRH)
	}
	var g GRH
	ip := b[ipv4At:prm.GRHSize]
	v6 := b[0]>>4 == 6
	switch {
	case !v6 && ip[0]>>4 == 4, v6 && checkedIPv4(ip):
		g.IPv4, g.RoCEv2 = true, true
		g.TrafficClass = ip[1]
		g.HopLimit = ip[8]
		g.SGID = v4Mapped(ip[12:16])
		g.DGID = v4Mapped(ip[16:20])
	case v6:
		w := binary.BigEndian.Uint32(b[0:4])
		g.TrafficClass = uint8(w >> 20)
		g.FlowLabel = w & prm.AVFlowLblMask
		g.HopLimit = b[7]
		copy(g.SGID[:], b[8:24])
		copy(g.DGID[:], b[24:40])
		g.RoCEv2 = b[6] == prm.IPProtoUDP
	default:
		return GRH{}, fmt.Errorf("parse GRH: IP version %d at byte 0, %d at byte %d: %w", b[0]>>4, ip[0]>>4, ipv4At, ErrBadGRH)
	}
	return g, nil
}

// ipv4At is where the IPv4 header of a RoCE v2 packet over IPv4 starts in
// the GRH area.
const ipv4At = prm.GRHSize - prm.IPv4HeaderSize

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
