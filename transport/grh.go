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
}

// ParseGRH reads the prm.GRHSize bytes a UD receive finds in front of its
// payload. They hold either a 40-byte InfiniBand GRH or RoCE v2 IPv6
// header (IP version 6 in the first nibble), or, for RoCE v2 over IPv4, 20
// bytes the device leaves undefined followed by the 20-byte IPv4 header.
// Since the undefined bytes may look like an IPv6 header, the IPv4 form is
// recognised first, by version 4, a 20-byte header length and a correct
// header checksum at byte 20, as rdma-core's ibv_init_ah_from_wc does.
func ParseGRH(b []byte) (GRH, error) {
	if len(b) < prm.GRHSize {
		return GRH{}, fmt.Errorf("parse GRH: %d bytes, want %d: %w", len(b), prm.GRHSize, ErrBadGRH)
	}
	var g GRH
	switch {
	case isIPv4Header(b[20:40]):
		ip := b[20:40]
		g.IPv4 = true
		g.TrafficClass = ip[1]
		g.HopLimit = ip[8]
		g.SGID = v4Mapped(ip[12:16])
		g.DGID = v4Mapped(ip[16:20])
	case b[0]>>4 == 6:
		w := binary.BigEndian.Uint32(b[0:4])
		g.TrafficClass = uint8(w >> 20)
		g.FlowLabel = w & prm.AVFlowLblMask
		g.HopLimit = b[7]
		copy(g.SGID[:], b[8:24])
		copy(g.DGID[:], b[24:40])
	default:
		return GRH{}, fmt.Errorf("parse GRH: IP version %d at byte 0, %d at byte 20: %w", b[0]>>4, b[20]>>4, ErrBadGRH)
	}
	return g, nil
}

func v4Mapped(v4 []byte) ctx.GID {
	var g ctx.GID
	g[10], g[11] = 0xff, 0xff
	copy(g[12:], v4)
	return g
}

// isIPv4Header reports whether h (20 bytes) is an IPv4 header without
// options whose header checksum is right: the ones' complement sum of its
// ten 16-bit words, checksum included, is 0xffff.
func isIPv4Header(h []byte) bool {
	if h[0] != 0x45 {
		return false
	}
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum == 0xffff
}
