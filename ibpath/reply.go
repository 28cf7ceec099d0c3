package ibpath

import (
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/transport"
)

// ErrNotReceive is returned by FromCompletion and Reply for a completion
// that is not a receive completion.
var ErrNotReceive = errors.New("not a receive completion")

// Received is a receive completion FromCompletion and Reply read: a raw
// *monocq.CQE, or the *Completion a transport's Poller hands out (rc, dc
// and ud share the type).
type Received interface {
	*monocq.CQE | *transport.Completion
}

// receipt is what the paths need of a receive completion.
type receipt struct {
	err       error
	op        prm.CQEOpcode
	sourceQPN uint32
	slid      uint16
	pathBits  uint8
	sl        uint8
	grh       bool
}

func receiptOf[R Received](r R) receipt {
	switch c := any(r).(type) {
	case *monocq.CQE:
		if c == nil {
			break
		}
		return receipt{err: c.Err(), op: c.Opcode(), sourceQPN: c.SourceQP(), slid: c.SLID(),
			pathBits: c.PathBits(), sl: c.SL(), grh: c.HasGRH()}
	case *transport.Completion:
		if c == nil {
			break
		}
		return receipt{err: c.Err(), op: c.Opcode, sourceQPN: c.SourceQPN, slid: c.SLID,
			pathBits: c.PathBits, sl: c.SL, grh: c.GRH}
	}
	return receipt{err: fmt.Errorf("nil completion: %w", ctx.ErrInvalidArgument)}
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
// come from local, the path of the receiving QP. c is the receive
// completion, a raw CQE or a transport Poller's Completion; grh is the
// start of the receive buffer (its first 40 bytes hold the GRH when the
// completion says one arrived, read by transport.ParseGRH); it may be nil
// when none did.
func FromCompletion[R Received](c R, grh []byte, local Path) (Path, error) {
	p, _, err := fromCompletion(receiptOf(c), grh, local)
	return p, err
}

func fromCompletion(c receipt, grh []byte, local Path) (Path, transport.GRH, error) {
	const op = "ibpath: from completion"
	if c.err != nil {
		return Path{}, transport.GRH{}, fmt.Errorf("%s: %w", op, c.err)
	}
	if !isReceive(c.op) {
		return Path{}, transport.GRH{}, fmt.Errorf("%s: CQE opcode %v: %w", op, c.op, ErrNotReceive)
	}
	p := Path{
		Port:      local.port(),
		PKeyIndex: local.PKeyIndex,
		QKey:      local.QKey,
		MTU:       local.MTU,
		SQPN:      c.sourceQPN,
		DQPN:      local.SQPN,
		SLID:      c.slid,
		DLID:      local.SLID | uint16(c.pathBits),
		SL:        c.sl,
		SGIDIndex: local.SGIDIndex,
	}
	var g transport.GRH
	if c.grh {
		var err error
		if g, err = transport.ParseGRH(grh); err != nil {
			return Path{}, transport.GRH{}, fmt.Errorf("%s: %w", op, err)
		}
		p.GlobalRoute = true
		p.SGID, p.DGID = g.SGID, g.DGID
		p.TrafficClass, p.FlowLabel, p.HopLimit = g.TrafficClass, g.FlowLabel, g.HopLimit
	}
	return p, g, nil
}

// Reply returns the path to answer a received UD datagram (a raw CQE or a
// transport Poller's Completion, as FromCompletion): FromCompletion
// reversed, so that the sender becomes the destination. The reply leaves
// from the GID the datagram was sent to, in the entry of the kind the
// datagram came as: its index is looked up in gids (the port's GID table,
// ctx.Context.QueryGIDs), a RoCE v2 entry for a RoCE v2 header (IPv4, or
// IPv6 with next header UDP), a RoCE v1 or InfiniBand entry for a GRH, as
// rdma-core's ibv_init_ah_from_wc does (an entry of unknown type matches
// either); with a nil table local.SGIDIndex is kept. The reply uses the
// packet's path bits, as ibv_init_ah_from_wc does. Its hop limit is 255,
// where ibv_init_ah_from_wc copies the hop limit (or IPv4 TTL) the
// datagram arrived with: a reply routed back over more hops than were left
// to the request still arrives.
func Reply[R Received](c R, grh []byte, local Path, gids []ctx.GIDEntry) (Path, error) {
	r := receiptOf(c)
	req, g, err := fromCompletion(r, grh, local)
	if err != nil {
		return Path{}, err
	}
	p := req.Reverse()
	p.SrcPathBits = r.pathBits
	if p.GlobalRoute {
		p.HopLimit = 0xff
		if gids != nil {
			i, ok := addrvec.AddressedGID(gids, p.SGID, g.RoCEv2)
			if !ok {
				kind := "GRH"
				if g.RoCEv2 {
					kind = "RoCE v2"
				}
				return Path{}, fmt.Errorf("ibpath: reply: datagram sent to %v (%s), not a GID of this port of that type: %w", p.SGID, kind, ctx.ErrNotFound)
			}
			p.SGIDIndex = i
		}
	}
	return p, nil
}
