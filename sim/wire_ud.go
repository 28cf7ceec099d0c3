package sim

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// UD between processes of a shared fabric: the sender builds the packet
// (the GRH its receive buffer will find included) and drops it in the
// destination's ring; the destination checks type, state, path and qkey
// and delivers it, or drops it silently. Nothing answers.

// wireUD is the kind of a UD datagram message.
const wireUD = 3

// wireSendUD sends UD packet p to QP dst of the process in slot, with the
// drop and duplicate faults of InjectUDFaults (reordering applies only
// within a process). The sender completes whatever happens to the packet.
func (f *Fabric) wireSendUD(q *qp, w *sendWQE, a *avInfo, qkey uint32, p *udPacket, slot int) outcome {
	if a.grh {
		p.grh = buildGRH(q.dev.h, *a, p.src.l3, udPayLen(len(p.payload), w.op == prm.OpSendImm))
	}
	if f.faults.dropNext > 0 {
		f.faults.dropNext--
		f.stats.UDDropped++
		return done(w.total)
	}
	copies := 1
	if fl := f.faults.UDFaults; (fl.Drop > 0 || fl.Duplicate > 0) && (fl.QPN == 0 || fl.QPN == a.dqpn) {
		r := f.rng.Float64()
		switch {
		case r < fl.Drop:
			f.stats.UDDropped++
			return done(w.total)
		case r < fl.Drop+fl.Duplicate:
			copies = 2
			f.stats.UDDuplicated++
		}
	}
	for i := 0; i < copies; i++ {
		sent := f.shm.send(slot, len(p.grh)+len(p.payload), func(h *wireHdr, b []byte) {
			h.Kind, h.Op = wireUD, uint8(w.op)
			h.FM = uint8(boolBit(p.solicited, uint32(prm.FlagSolicited)))
			h.DstQPN, h.SrcQPN, h.Imm, h.RKey = a.dqpn, q.qpn, p.imm, qkey
			h.DLID, h.DGID, h.SL, h.GRH, h.L3 = a.dlid, a.dgid, p.src.sl, uint8(boolBit(a.grh, 1)), p.src.l3
			h.SrcLID = q.dev.h.lid
			h.Total = uint32(len(p.payload))
			n := copy(b, p.grh)
			copy(b[n:], p.payload)
		})
		if !sent {
			f.stats.UDDropped++
		}
	}
	return done(w.total)
}

// wireDeliverUD delivers a datagram from another process.
func (f *Fabric) wireDeliverUD(h *wireHdr, body []byte) {
	t := f.qps[h.DstQPN]
	grh := h.GRH != 0
	g := 0
	if grh {
		g = prm.GRHSize
	}
	if t == nil || t.typ != ctx.QPTypeUD || (t.state != ctx.QPStateRTR && t.state != ctx.QPStateRTS) ||
		!reaches(t.dev.h.link, grh, h.DLID, h.DGID, t.dev.h) || t.attr.QKey != h.RKey ||
		len(body) < g+int(h.Total) {
		f.stats.UDDropped++
		return
	}
	p := udPacket{
		src:       srcInfo{qpn: h.SrcQPN, lid: h.SrcLID, sl: h.SL, grh: grh, l3: h.L3},
		op:        prm.Opcode(h.Op),
		imm:       h.Imm,
		solicited: h.FM&prm.FlagSolicited != 0,
		payload:   body[g : g+int(h.Total)],
	}
	if grh {
		p.grh = body[:g]
	}
	f.deliverUD(t, &p)
}
