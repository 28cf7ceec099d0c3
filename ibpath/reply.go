package ibpath

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// ErrNotReceive is returned by FromCompletion and Reply for a CQE that is
// not a receive completion.
var ErrNotReceive = errors.New("not a receive completion")

// ErrBadGRH is returned when the CQE says a GRH arrived but the bytes given
// are shorter than one or hold neither an IPv6-form GRH nor an IPv4 header.
var ErrBadGRH = errors.New("bad global route header")

// GRH is the part of a received global route header that a reply needs.
type GRH struct {
	SGID, DGID   ctx.GID
	TrafficClass uint8
	FlowLabel    uint32
	HopLimit     uint8
}

// ParseGRH reads the 40 bytes a UD receive finds in front of its payload:
// an InfiniBand GRH or RoCE v2 IPv6 header (version 6 in the first nibble),
// or a RoCE v2 IPv4 header in the last 20 of the 40 bytes, whose addresses
// become IPv4-mapped GIDs (::ffff:a.b.c.d).
func ParseGRH(b []byte) (GRH, error) {
	if len(b) < prm.GRHSize {
		return GRH{}, fmt.Errorf("path: parse GRH: %d bytes, want %d: %w", len(b), prm.GRHSize, ErrBadGRH)
	}
	var g GRH
	switch {
	case b[0]>>4 == 6:
		w := binary.BigEndian.Uint32(b[0:4])
		g.TrafficClass = uint8(w >> 20)
		g.FlowLabel = w & maxFlow
		g.HopLimit = b[7]
		copy(g.SGID[:], b[8:24])
		copy(g.DGID[:], b[24:40])
	case b[20]>>4 == 4:
		ip := b[20:40]
		g.TrafficClass = ip[1]
		g.HopLimit = ip[8]
		g.SGID = mapped(ip[12:16])
		g.DGID = mapped(ip[16:20])
	default:
		return GRH{}, fmt.Errorf("path: parse GRH: IP version %d / %d: %w", b[0]>>4, b[20]>>4, ErrBadGRH)
	}
	return g, nil
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
	const op = "path: from completion"
	if err := completion.Check(c); err != nil {
		return Path{}, fmt.Errorf("%s: %w", op, err)
	}
	if !isReceive(c.Opcode()) {
		return Path{}, fmt.Errorf("%s: CQE opcode %v: %w", op, c.Opcode(), ErrNotReceive)
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
	if c.HasGRH() {
		g, err := ParseGRH(grh)
		if err != nil {
			return Path{}, fmt.Errorf("%s: %w", op, err)
		}
		p.Global = true
		p.SGID, p.DGID = g.SGID, g.DGID
		p.TrafficClass, p.FlowLabel, p.HopLimit = g.TrafficClass, g.FlowLabel, g.HopLimit
	}
	return p, nil
}

// Reply returns the path to answer a received UD datagram: FromCompletion
// reversed, so that the sender becomes the destination. The reply leaves
// from the GID the datagram was sent to: its index is looked up in gids (the
// port's GID table, ctx.Context.QueryGIDs); with a nil table local.SGIDIndex
// is kept. The hop limit is 255 and the reply uses the packet's path bits,
// as rdma-core's ibv_init_ah_from_wc does.
func Reply(c *monocq.CQE, grh []byte, local Path, gids []ctx.GIDEntry) (Path, error) {
	req, err := FromCompletion(c, grh, local)
	if err != nil {
		return Path{}, err
	}
	p := req.Reverse()
	p.SrcPathBits = c.PathBits()
	if p.Global {
		p.HopLimit = 0xff
		if gids != nil {
			found := false
			for _, g := range gids {
				if g.GID == p.SGID {
					p.SGIDIndex, found = uint8(g.Index), true
					break
				}
			}
			if !found {
				return Path{}, fmt.Errorf("path: reply: datagram sent to %v, not a GID of this port: %w", p.SGID, ctx.ErrNotFound)
			}
		}
	}
	return p, nil
}
