package sim

import (
	"encoding/binary"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// UDFaults sets the probabilities with which the model mistreats UD
// packets. Choices come from the Fabric's seeded generator, so a run
// repeats.
type UDFaults struct {
	// Drop, Duplicate and Reorder are probabilities in [0, 1] (their sum at
	// most 1). A reordered packet is held back and delivered after the next
	// packet to the same QP (or when the model is otherwise idle).
	Drop, Duplicate, Reorder float64
	// QPN limits the faults to packets towards one QP (0: every UD QP).
	QPN uint32
}

type udFaults struct {
	UDFaults
	dropNext int
}

type udPacket struct {
	src       srcInfo
	op        prm.Opcode
	imm       uint32
	solicited bool
	grh       []byte // nil: no GRH on the wire
	payload   []byte
}

type heldPacket struct {
	t   *qp
	pkt udPacket
}

// InjectUDFaults replaces the UD fault settings (the zero value turns them
// off). A probability outside [0, 1] (NaN included), or probabilities
// whose sum is more than 1, are refused with an error wrapping
// ctx.ErrInvalidArgument, and the settings stay as they were.
func (f *Fabric) InjectUDFaults(u UDFaults) error {
	p := [...]float64{u.Drop, u.Duplicate, u.Reorder}
	sum := 0.0
	for _, x := range p {
		if !(x >= 0 && x <= 1) {
			return provider.Errorf("sim: inject UD faults", "probabilities %v: each must be in [0, 1]: %w", p, ctx.ErrInvalidArgument)
		}
		sum += x
	}
	// A little room for the rounding of a sum meant to be 1.
	if sum > 1+1e-9 {
		return provider.Errorf("sim: inject UD faults", "probabilities %v sum to %v, more than 1: %w", p, sum, ctx.ErrInvalidArgument)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults.UDFaults = u
	return nil
}

// dropNextUD drops the next n UD packets, whatever their destination.
func (f *Fabric) dropNextUD(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults.dropNext = n
}

// FailQP moves a QP to error as a device does on a fatal error: a QP fatal
// async event is raised and every outstanding WQE is flushed.
func (f *Fabric) FailQP(qpn uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.qps[qpn]
	if q == nil {
		return provider.Errorf("sim: fail QP", "QPN %#x: %w", qpn, ctx.ErrNotFound)
	}
	f.qpFatal(q, "injected fault")
	return nil
}

// DelayCompletions holds every CQE for the CQ back by d from the moment it
// is produced (0 turns the delay off; CQEs already held keep their time).
// Order within the CQ is kept. A negative d is an error wrapping
// ctx.ErrInvalidArgument.
func (f *Fabric) DelayCompletions(cqn uint32, d time.Duration) error {
	if d < 0 {
		return provider.Errorf("sim: delay completions", "CQN %#x: delay %v: %w", cqn, d, ctx.ErrInvalidArgument)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.cqs[cqn]
	if c == nil {
		return provider.Errorf("sim: delay completions", "CQN %#x: %w", cqn, ctx.ErrNotFound)
	}
	c.delay = int64(d)
	return nil
}

// QPState returns the model's state of a QP by number.
func (f *Fabric) QPState(qpn uint32) (ctx.QPState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.qps[qpn]
	if q == nil {
		return 0, provider.Errorf("sim: QP state", "QPN %#x: %w", qpn, ctx.ErrNotFound)
	}
	return q.state, nil
}

// sendUD executes a UD SEND: it resolves the destination from the address
// vector, applies faults and delivers. The sender completes successfully
// whatever happens to the packet, as on the wire (to another process, once
// its ring takes it: wireSendUD). now is the round's time.
func (f *Fabric) sendUD(q *qp, w *sendWQE, now int64) outcome {
	payload, s := f.gather(q, w)
	if s != 0 {
		return fail(s)
	}
	a := decodeAV(q.dev.h.link, &w.av)
	qkey := beUint32(w.av[prm.AVKey:])
	if qkey&0x80000000 != 0 {
		qkey = q.attr.QKey // a controlled qkey: the QP's own
	}
	var imm uint32
	if w.op == prm.OpSendImm {
		imm = w.imm
	}
	pkt := udPacket{
		src:       srcInfo{qpn: q.qpn, lid: q.dev.h.lid, sl: a.sl, grh: a.grh, l3: q.dev.h.roceL3(a.sgidIdx)},
		op:        w.op,
		imm:       imm,
		solicited: w.fm&prm.FlagSolicited != 0,
		payload:   payload,
	}
	t := f.qps[a.dqpn]
	if slot := f.remoteSlot(a.dqpn); t == nil && slot >= 0 {
		return f.wireSendUD(q, w, &a, qkey, &pkt, slot, now)
	}
	if t == nil || t.typ != ctx.QPTypeUD || (t.state != ctx.QPStateRTR && t.state != ctx.QPStateRTS) ||
		!reaches(q.dev.h.link, a.grh, a.dlid, a.dgid, t.dev.h) || t.attr.QKey != qkey || qpOffline(q) || qpOffline(t) {
		f.stats.UDDropped++
		return done(w.total)
	}
	if a.grh {
		pkt.grh = buildGRH(q.dev.h, a, pkt.src.l3, udPayLen(len(payload), w.op == prm.OpSendImm))
	}
	if f.faults.dropNext > 0 {
		f.faults.dropNext--
		f.stats.UDDropped++
		return done(w.total)
	}
	copies := 1
	if fl := f.faults.UDFaults; (fl.Drop > 0 || fl.Duplicate > 0 || fl.Reorder > 0) && (fl.QPN == 0 || fl.QPN == t.qpn) {
		r := f.rng.Float64()
		switch {
		case r < fl.Drop:
			f.stats.UDDropped++
			return done(w.total)
		case r < fl.Drop+fl.Duplicate:
			copies = 2
			f.stats.UDDuplicated++
		case r < fl.Drop+fl.Duplicate+fl.Reorder:
			pkt.payload = append([]byte(nil), payload...)
			f.held = append(f.held, heldPacket{t: t, pkt: pkt})
			f.stats.UDReordered++
			return done(w.total)
		}
	}
	for i := 0; i < copies; i++ {
		f.deliverUD(t, &pkt)
	}
	// Packets held back for this QP now arrive after the one that passed.
	out := f.held[:0]
	var release []heldPacket
	for _, h := range f.held {
		if h.t == t {
			release = append(release, h)
		} else {
			out = append(out, h)
		}
	}
	f.held = out
	for i := range release {
		f.deliverHeld(&release[i])
	}
	return done(w.total)
}

// deliverHeld delivers a UD packet the fault injector held back, unless
// its destination went offline (port down, HCA failed) meanwhile: no
// packet reaches it then.
func (f *Fabric) deliverHeld(h *heldPacket) {
	if qpOffline(h.t) {
		f.stats.UDDropped++
		return
	}
	f.deliverUD(h.t, &h.pkt)
}

// Sizes of the parts of a UD SEND packet behind the GRH.
const (
	bthSize  = 12 // base transport header
	dethSize = 8  // datagram extended transport header
	immSize  = 4  // immediate data
	icrcSize = 4  // invariant CRC
)

// udPayLen is the GRH payload length of a UD SEND of n payload bytes: as
// IBA defines PayLen, every byte after the GRH up to and including the
// ICRC, that is BTH, DETH, the immediate data when there is one, the
// payload padded to a multiple of 4 (the BTH pad count) and the ICRC.
func udPayLen(n int, imm bool) int {
	l := bthSize + dethSize + (n+3)&^3 + icrcSize
	if imm {
		l += immSize
	}
	return l
}

// buildGRH writes the 40 bytes a UD receive finds in front of the payload,
// the network header of the packet as it left from HCA from with address
// vector a; l3 is its kind (hca.roceL3) and payLen the IBA PayLen
// (udPayLen).
//
//   - InfiniBand and RoCE v1 (prm.CQERoCEL3GRH): the IB GRH: IP version 6,
//     traffic class, flow label, PayLen, next header 0x1b (IBA transport),
//     hop limit, source and destination GIDs.
//   - RoCE v2 over IPv6: the IPv6 header, laid out as the GRH but with the
//     UDP header counted in the payload length and next header 17 (UDP).
//   - RoCE v2 over IPv4: 20 bytes the device leaves undefined (zero here),
//     then the IPv4 header: version 4, IHL 5, TOS from the traffic class,
//     total length, identification 0, DF set (as the Linux RoCE stack
//     sends), TTL from the hop limit, protocol 17, the header checksum and
//     the addresses from the IPv4-mapped GIDs.
func buildGRH(from *hca, a avInfo, l3 uint8, payLen int) []byte {
	g := make([]byte, prm.GRHSize)
	var sgid ctx.GID
	if int(a.sgidIdx) < len(from.gids) {
		sgid = from.gids[a.sgidIdx].GID
	}
	if l3 == prm.CQERoCEL3IPv4 {
		ip := g[prm.GRHSize-prm.IPv4HeaderSize:]
		ip[0] = prm.IPv4VersionIHL
		ip[1] = a.tclass
		binary.BigEndian.PutUint16(ip[2:], uint16(prm.IPv4HeaderSize+prm.UDPHeaderSize+payLen))
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF, fragment offset 0
		ip[8] = a.hopLimit
		ip[9] = prm.IPProtoUDP
		copy(ip[12:16], sgid[12:])
		copy(ip[16:20], a.dgid[12:])
		binary.BigEndian.PutUint16(ip[10:], prm.IPv4HeaderChecksum(ip))
		return g
	}
	next := byte(prm.GRHNextHeaderIBA)
	if l3 == prm.CQERoCEL3IPv6 {
		payLen += prm.UDPHeaderSize
		next = prm.IPProtoUDP
	}
	putBE32(g[0:], 6<<28|uint32(a.tclass)<<20|a.flow&prm.AVFlowLblMask)
	binary.BigEndian.PutUint16(g[4:], uint16(payLen))
	g[6] = next
	g[7] = a.hopLimit
	copy(g[8:24], sgid[:])
	copy(g[24:40], a.dgid[:])
	return g
}

// deliverUD puts one UD packet into the next receive WQE of t (silently
// dropped when there is none).
func (f *Fabric) deliverUD(t *qp, p *udPacket) {
	if t.closed || (t.state != ctx.QPStateRTR && t.state != ctx.QPStateRTS) {
		f.stats.UDDropped++
		return
	}
	r, ok := f.peekRecv(t)
	if !ok {
		f.stats.UDDropped++
		return
	}
	f.consumeRecv(t, r)
	if s := f.scatterRecv(r, p.grh, prm.GRHSize, p.payload); s != 0 {
		img := errCQE(prm.CQERespErr, t.qpn, 0, r.idx, s, srqnOf(r))
		f.qpErrorLocked(t, "receive error")
		f.emitCQE(t.recvCQ, &img, nil, t)
		return
	}
	op := prm.CQERespSend
	if p.op == prm.OpSendImm {
		op = prm.CQERespSendImm
	}
	var img [prm.CQE64Size]byte
	respCQE(&img, t, r, op, uint32(prm.GRHSize+len(p.payload)), p.imm, p.src, p.solicited, prm.CQEFormatNone)
	f.emitCQE(t.recvCQ, &img, nil, t)
}

// releaseHeldLocked delivers every held-back UD packet; it reports whether
// there was one.
func (f *Fabric) releaseHeldLocked() bool {
	if f.releaseWireHeldLocked() {
		return true
	}
	if len(f.held) == 0 {
		return false
	}
	held := f.held
	f.held = nil
	for i := range held {
		f.deliverHeld(&held[i])
	}
	return true
}

// dropHeldFor drops the UD packets held back for q (counted in
// UDDropped): q takes no more.
func (f *Fabric) dropHeldFor(q *qp) {
	out := f.held[:0]
	for _, h := range f.held {
		if h.t != q {
			out = append(out, h)
		} else {
			f.stats.UDDropped++
		}
	}
	clear(f.held[len(out):])
	f.held = out
}
