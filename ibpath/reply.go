package ibpath

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/transport"
)

// ErrNotReceive is returned by FromCompletion and Reply for a CQE that is
// not a receive completion.
var ErrNotReceive = errors.New("not a receive completion")

// GRH is the part of a received global route header that a reply needs.
type GRH struct {
	SGID, DGID   ctx.GID
	TrafficClass uint8
	FlowLabel    uint32
	HopLimit     uint8
	// RoCEv2 reports a RoCE v2 packet: an IPv4 header, or an IPv6 header
	// whose next header is UDP (17). An InfiniBand or RoCE v1 GRH has next
	// header 0x1b.
	RoCEv2 bool
}

// ParseGRH reads the 40 bytes a UD receive finds in front of its payload:
// an InfiniBand GRH or RoCE v2 IPv6 header (version 6 in the first nibble),
// or, for RoCE v2 over IPv4, 20 bytes the device leaves undefined followed
// by the IPv4 header, whose addresses become IPv4-mapped GIDs
// (::ffff:a.b.c.d). As the undefined bytes may start with a 6, the IPv4
// form is told apart as rdma-core's ibv_init_ah_from_wc does: a version
// other than 6 with version 4 at byte 20, or version 6 with a 20-byte IPv4
// header at byte 20 whose checksum is right.
func ParseGRH(b []byte) (GRH, error) {
	if len(b) < prm.GRHSize {
		return GRH{}, fmt.Errorf("ibpath: parse GRH: %d bytes, want %d: %w", len(b), prm.GRHSize, transport.ErrBadGRH)
	}
	var g GRH
	v6 := b[0]>>4 == 6
	switch {
	case !v6 && b[ipv4At]>>4 == 4, v6 && checkedIPv4(b[ipv4At:prm.GRHSize]):
		ip := b[ipv4At:prm.GRHSize]
		g.TrafficClass = ip[1]
		g.HopLimit = ip[8]
		g.SGID = mapped(ip[12:16])
		g.DGID = mapped(ip[16:20])
		g.RoCEv2 = true
	case v6:
		w := binary.BigEndian.Uint32(b[0:4])
		g.TrafficClass = uint8(w >> 20)
		g.FlowLabel = w & maxFlow
		g.HopLimit = b[7]
		copy(g.SGID[:], b[8:24])
		copy(g.DGID[:], b[24:40])
		g.RoCEv2 = b[6] == prm.IPProtoUDP
	default:
		return GRH{}, fmt.Errorf("ibpath: parse GRH: IP version %d / %d: %w", b[0]>>4, b[20]>>4, transport.ErrBadGRH)
	}
	return g, nil
}

// ipv4At is where the IPv4 header of a RoCE v2 packet over IPv4 starts in
// the GRH area.
const ipv4At = prm.GRHSize - prm.IPv4HeaderSize

// checkedIPv4 reports whether h (20 bytes) is an IPv4 header of 20 bytes
// whose header checksum is right.
func checkedIPv4(h []byte) bool {
	return h[0] == prm.IPv4VersionIHL && prm.IPv4HeaderChecksum(h[:prm.IPv4HeaderSize]) == 0
}

func mapped(v4 []byte) ctx.GID {
	var g ctx.GID
	g[10], g[11] = 0xff, 0xff
	copy(g[12:], v4)
	return g
}

func isReceive(op prm.CQEOpcode) bool {
	switch op {
	case prm.CQERespSend, prm.CQERespSendImm, prm.CQERespSendInv, prm.CQERespWrImm:
		return true
	}
	return false
}

// FromCompletion returns the path a received UD datagram took, seen from its
// sender: S fields are the sender's (source QPN, SLID, and the GRH's source
// GID), D fields are the receiving QP's (local.SQPN, local.SLID with the
// packet's path bits, the GRH's destination GID). Port, pkey index and qkey
// come from local, the path of the receiving QP. grh is the start of the
// receive buffer (its first 40 bytes hold the GRH when the CQE says one
// arrived); it may be nil when none did.
func FromCompletion(c *monocq.CQE, grh []byte, local Path) (Path, error) {
	p, _, err := fromCompletion(c, grh, local)
	return p, err
}

func fromCompletion(c *monocq.CQE, grh []byte, local Path) (Path, GRH, error) {
	const op = "ibpath: from completion"
	if err := c.Err(); err != nil {
		return Path{}, GRH{}, fmt.Errorf("%s: %w", op, err)
	}
	if !isReceive(c.Opcode()) {
		return Path{}, GRH{}, fmt.Errorf("%s: CQE opcode %v: %w", op, c.Opcode(), ErrNotReceive)
	}
	p := Path{
		Port:      local.port(),
		PKeyIndex: local.PKeyIndex,
		QKey:      local.QKey,
		MTU:       local.MTU,
		SQPN:      c.SourceQP(),
		DQPN:      local.SQPN,
		SLID:      c.SLID(),
		DLID:      local.SLID | uint16(c.PathBits()),
		SL:        c.SL(),
		SGIDIndex: local.SGIDIndex,
	}
	var g GRH
	if c.HasGRH() {
		var err error
		if g, err = ParseGRH(grh); err != nil {
			return Path{}, GRH{}, fmt.Errorf("%s: %w", op, err)
		}
		p.Global = true
		p.SGID, p.DGID = g.SGID, g.DGID
		p.TrafficClass, p.FlowLabel, p.HopLimit = g.TrafficClass, g.FlowLabel, g.HopLimit
	}
	return p, g, nil
}

// Reply returns the path to answer a received UD datagram: FromCompletion
// reversed, so that the sender becomes the destination. The reply leaves
// from the GID the datagram was sent to, in the entry of the kind the
// datagram came as: its index is looked up in gids (the port's GID table,
// ctx.Context.QueryGIDs), a RoCE v2 entry for a RoCE v2 header (IPv4, or
// IPv6 with next header UDP), a RoCE v1 or InfiniBand entry for a GRH, as
// rdma-core's ibv_init_ah_from_wc does (an entry of unknown type matches
// either); with a nil table local.SGIDIndex is kept. The hop limit is 255
// and the reply uses the packet's path bits, as ibv_init_ah_from_wc does.
func Reply(c *monocq.CQE, grh []byte, local Path, gids []ctx.GIDEntry) (Path, error) {
	req, g, err := fromCompletion(c, grh, local)
	if err != nil {
		return Path{}, err
	}
	p := req.Reverse()
	p.SrcPathBits = c.PathBits()
	if p.Global {
		p.HopLimit = 0xff
		if gids != nil {
			found := false
			for _, e := range gids {
				if e.GID == p.SGID && gidTypeFits(e.Type, g.RoCEv2) {
					p.SGIDIndex, found = uint8(e.Index), true
					break
				}
			}
			if !found {
				kind := "GRH"
				if g.RoCEv2 {
					kind = "RoCE v2"
				}
				return Path{}, fmt.Errorf("ibpath: reply: datagram sent to %v (%s), not a GID of this port of that type: %w", p.SGID, kind, ctx.ErrNotFound)
			}
		}
	}
	return p, nil
}

// gidTypeFits reports whether a GID table entry of type t can answer a
// packet that came as RoCE v2 (or, if not, with an InfiniBand/RoCE v1 GRH).
func gidTypeFits(t ctx.GIDType, roceV2 bool) bool {
	switch t {
	case ctx.GIDTypeRoCEv2:
		return roceV2
	case ctx.GIDTypeRoCEv1, ctx.GIDTypeIB:
		return !roceV2
	}
	return true
}
