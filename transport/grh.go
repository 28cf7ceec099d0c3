package transport

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
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
	sgid, dgid, ipv4, ok := addrvec.GRHAddresses(b)
	if !ok {
		return GRH{}, fmt.Errorf("parse GRH: IP version %d at byte 0, %d at byte %d: %w", b[0]>>4, b[addrvec.GRHIPv4At]>>4, addrvec.GRHIPv4At, ErrBadGRH)
	}
	g := GRH{SGID: sgid, DGID: dgid}
	if ipv4 {
		ip := b[addrvec.GRHIPv4At:]
		g.IPv4, g.RoCEv2 = true, true
		g.TrafficClass = ip[1]
		g.HopLimit = ip[8]
		return g, nil
	}
	w := binary.BigEndian.Uint32(b[0:4])
	g.TrafficClass = uint8(w >> 20)
	g.FlowLabel = w & prm.AVFlowLblMask
	g.HopLimit = b[7]
	g.RoCEv2 = b[6] == prm.IPProtoUDP
	return g, nil
}
