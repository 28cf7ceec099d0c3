package sim

import (
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// UD between processes of a shared fabric: the sender builds the packet
// (the GRH its receive buffer will find included) and drops it in the
// destination's ring; the destination checks type, state, path and qkey
// and delivers it, or drops it silently. Nothing answers. A full ring
// holds the sender back, as the credits of an InfiniBand link do: the
// SEND waits at the head of its queue and is tried again (wireShortRetry)
// rather than lost, for up to udWaitLimit, after which it is dropped as a
// switch drops a packet past its head-of-queue lifetime; a datagram to a
// process that is gone is dropped at once.

// udWaitLimit is how long a UD SEND waits for room in its destination's
// ring before it is dropped: about the head-of-queue lifetime InfiniBand
// subnet managers give switch ports (4.096 us x 2^18), far longer than a
// live consumer takes to drain (its engine sleeps at most 4 ms at a time,
// and a message wakes it), so that only a consumer that stopped (a
// process stopped by a signal, or one that closed its devices and kept
// its Fabric) costs a sender the wait.
const udWaitLimit = time.Second

// wireUD is the kind of a UD datagram message.
const wireUD = 3

// wireSmall is the kind of a one-line record (wireSmallHdr): a small RC
// request on a shared fabric.
const wireSmall = 4

// wireSendUD sends UD packet p to QP dst of the process in slot, with the
// faults of InjectUDFaults: a reordered datagram is held back and sent
// after the next one to the same QP (or when the engine is otherwise
// idle). The sender completes whatever happens to the packet once it has
// left. While the destination's ring is full the SEND waits (now is the
// round's time), up to udWaitLimit, changing nothing: the faults are
// drawn once, when the datagram leaves.
func (f *Fabric) wireSendUD(q *qp, w *sendWQE, a *avInfo, qkey uint32, p *udPacket, slot int, now int64) outcome {
	if a.grh {
		p.grh = buildGRH(q.dev.h, *a, p.src.l3, udPayLen(len(p.payload), w.op == prm.OpSendImm))
	}
	n := len(p.grh) + len(p.payload)
	// The answers held go first (wireAcksFirst), before the room is
	// judged: the datagram follows them into the ring. One they leave
	// held waits with them, as for a full ring.
	if acked := len(f.wireAcks) == 0 || f.wireAcksFirst(slot); !acked || !f.wireRoom(slot, n) {
		if f.wirePeerAlive(slot) {
			switch {
			case q.udWaitSince == 0:
				q.udWaitSince = now
			case now-q.udWaitSince >= int64(udWaitLimit):
				f.stats.UDDropped++ // waited too long
				return done(w.total)
			}
			q.blockedUntil = now + wireShortRetry
			return stillWaiting()
		}
		f.stats.UDDropped++ // a process that is gone
		return done(w.total)
	}
	if f.faults.dropNext > 0 {
		f.faults.dropNext--
		f.stats.UDDropped++
		return done(w.total)
	}
	var h wireHdr
	h.Kind, h.Op = wireUD, uint8(w.op)
	h.FM = uint8(boolBit(p.solicited, uint32(prm.FlagSolicited)))
	h.DstQPN, h.SrcQPN, h.Imm, h.RKey = a.dqpn, q.qpn, p.imm, qkey
	h.DLID, h.DGID, h.SL, h.GRH, h.L3 = a.dlid, a.dgid, p.src.sl, uint8(boolBit(a.grh, 1)), p.src.l3
	h.SrcLID = q.dev.h.lid
	h.Total = uint32(len(p.payload))
	copies := 1
	if fl := f.faults.UDFaults; (fl.Drop > 0 || fl.Duplicate > 0 || fl.Reorder > 0) && (fl.QPN == 0 || fl.QPN == a.dqpn) {
		r := f.rng.Float64()
		switch {
		case r < fl.Drop:
			f.stats.UDDropped++
			return done(w.total)
		case r < fl.Drop+fl.Duplicate:
			copies = 2
		case r < fl.Drop+fl.Duplicate+fl.Reorder:
			body := append(append([]byte(nil), p.grh...), p.payload...)
			f.wireHeld = append(f.wireHeld, wireHeldUD{slot: slot, h: h, body: body})
			f.stats.UDReordered++
			return done(w.total)
		}
	}
	if !f.wireUDOut(slot, &h, p.grh, p.payload) {
		f.stats.UDDropped++ // not after wireRoom, short of a failure to seal
		return done(w.total)
	}
	if copies == 2 && f.wireRoom(slot, n) && f.wireUDOut(slot, &h, p.grh, p.payload) {
		// The injected copy, where the ring has room for it.
		f.stats.UDDuplicated++
	}
	// Datagrams held back for this QP now leave after the one that passed.
	out := f.wireHeld[:0]
	var release []wireHeldUD
	for _, x := range f.wireHeld {
		if x.slot == slot && x.h.DstQPN == a.dqpn {
			release = append(release, x)
		} else {
			out = append(out, x)
		}
	}
	clear(f.wireHeld[len(out):])
	f.wireHeld = out
	f.wireSendHeld(release)
	return done(w.total)
}

// wireHeldUD is a datagram to another process held back by the fault
// injector.
type wireHeldUD struct {
	slot int
	h    wireHdr
	body []byte // GRH and payload
}

// wireUDOut places one datagram (header h, then a and b) in the ring of
// the process in slot; it reports false when the process is gone or its
// ring is full.
func (f *Fabric) wireUDOut(slot int, h *wireHdr, a, b []byte) bool {
	// Behind the answers held (wireSendUD sends them before it judges
	// the room; datagrams the fault injector held back come here alone).
	if len(f.wireAcks) > 0 && !f.wireAcksFirst(slot) {
		return false
	}
	return f.wireOut(slot, len(a)+len(b), func(x *wireHdr, buf []byte) {
		*x = *h
		n := copy(buf, a)
		copy(buf[n:], b)
	})
}

// wireSendHeld sends datagrams the fault injector held back. One that
// finds its destination's ring full is held again, for a later round;
// one to a process that is gone is dropped.
func (f *Fabric) wireSendHeld(held []wireHeldUD) {
	for i := range held {
		x := &held[i]
		switch {
		case f.wireUDOut(x.slot, &x.h, nil, x.body):
		case f.wirePeerAlive(x.slot):
			f.wireHeld = append(f.wireHeld, *x)
		default:
			f.stats.UDDropped++
		}
	}
}

// releaseWireHeldLocked sends every held-back datagram; it reports whether
// one left.
func (f *Fabric) releaseWireHeldLocked() bool {
	if len(f.wireHeld) == 0 {
		return false
	}
	held := f.wireHeld
	f.wireHeld = nil
	f.wireSendHeld(held)
	return len(f.wireHeld) < len(held)
}

// wireDeliverUD delivers a datagram from another process. One longer
// than the port's MTU, which no sender of this version makes (a UD send is
// at most the MTU, parseSendAt), is dropped as a NIC's port drops an
// oversized packet: it would otherwise fail a receive sized for the MTU
// and move the QP to error.
func (f *Fabric) wireDeliverUD(h *wireHdr, body []byte) {
	t := f.qpByNum(h.DstQPN)
	grh := h.GRH != 0
	g := 0
	if grh {
		g = prm.GRHSize
	}
	if t == nil || t.typ != ctx.QPTypeUD || (t.state != ctx.QPStateRTR && t.state != ctx.QPStateRTS) ||
		!reaches(t.dev.h.link, grh, h.DLID, h.DGID, t.dev.h) || t.attr.QKey != h.RKey ||
		uint64(h.Total) > uint64(portMTU.Bytes()) || len(body) < g+int(h.Total) {
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
