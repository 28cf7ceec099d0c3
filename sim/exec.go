package sim

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// never is the deadline of a QP that waits forever (infinite ACK timeout).
const never = math.MaxInt64

// ---- doorbell records ----

// checkProducer validates a producer index read from a doorbell record: v is
// the big-endian value, last the previous accepted index, consumed what the
// model has taken, cnt the ring size in entries. It returns the new index
// and whether to accept it.
func (f *Fabric) checkProducer(base Violation, what string, v uint32, last, consumed uint16, cnt uint32) (uint16, bool) {
	if v > 0xffff {
		base.Kind = ViolationDoorbellEndian
		base.Detail = fmt.Sprintf("%s doorbell record %#08x has bits above 16 set (little-endian store?)", what, v)
		f.violate(base)
		return 0, false
	}
	n := uint16(v)
	if n == last {
		return n, true
	}
	if back := last - n; back < 0x8000 {
		base.Kind = ViolationDoorbellBackwards
		base.Detail = fmt.Sprintf("%s producer index went from %d back to %d", what, last, n)
		f.violate(base)
		return 0, false
	}
	if uint32(n-consumed) > cnt {
		base.Kind = ViolationDoorbellPastRing
		base.Detail = fmt.Sprintf("%s producer index %d is %d entries past the %d consumed; the ring holds %d", what, n, n-consumed, consumed, cnt)
		f.violate(base)
		return 0, false
	}
	return n, true
}

// scanQP reads the QP's doorbell records.
func (f *Fabric) scanQP(q *qp) {
	if q.state == ctx.QPStateReset {
		return
	}
	if q.sqCnt > 0 {
		f.checkBlueFlame(q)
		raw := atomic.LoadUint32((*uint32)(unsafe.Add(q.db, prm.DoorbellRecordSendB)))
		if raw != q.lastSQRaw {
			q.lastSQRaw = raw
			if pi, ok := f.checkProducer(Violation{QPN: q.qpn, WQEIndex: q.sqCI}, "send", bits.ReverseBytes32(raw), q.sqPI, q.sqCI, q.sqCnt); ok {
				q.sqPI = pi
			}
		}
	}
	if q.rqCnt > 0 {
		raw := atomic.LoadUint32((*uint32)(q.db))
		if raw != q.lastRQRaw {
			q.lastRQRaw = raw
			if h, ok := f.checkProducer(Violation{QPN: q.qpn, WQEIndex: q.rqCI}, "receive", bits.ReverseBytes32(raw), q.rqHead, q.rqCI, q.rqCnt); ok {
				q.rqHead = h
			}
		}
	}
}

// scanSRQ reads the SRQ's doorbell record (the 16-bit WQE counter).
func (f *Fabric) scanSRQ(s *srq) {
	raw := atomic.LoadUint32((*uint32)(s.db))
	if raw == s.lastRaw {
		return
	}
	s.lastRaw = raw
	if n, ok := f.checkProducer(Violation{SRQN: s.srqn}, "SRQ", bits.ReverseBytes32(raw), s.counter, s.consumed, s.cnt-1); ok {
		s.counter = n
	}
}

// ---- the send queue ----

// ringView addresses a WQE in a ring, wrapping at the ring end.
type ringView struct {
	base  unsafe.Pointer
	mask  uint32 // ring bytes - 1
	start uint32
}

func (r ringView) seg(i int) unsafe.Pointer {
	return unsafe.Add(r.base, (r.start+uint32(i)*prm.SegmentSize)&r.mask)
}

// copyOut copies len(dst) bytes starting off bytes into the WQE.
func (r ringView) copyOut(dst []byte, off uint32) {
	for len(dst) > 0 {
		pos := (r.start + off) & r.mask
		n := min(len(dst), int(r.mask+1-pos))
		copy(dst[:n], unsafe.Slice((*byte)(unsafe.Add(r.base, pos)), n))
		dst = dst[n:]
		off += uint32(n)
	}
}

type gatherEntry struct {
	inline bool
	off    uint32 // inline: byte offset of the data in the WQE
	lkey   uint32
	addr   uint64
	n      uint64
}

// sendWQE is a parsed send WQE.
type sendWQE struct {
	idx   uint16
	op    prm.Opcode
	opmod uint8
	qpn   uint32
	ds    int
	fm    uint8
	imm   uint32
	bbs   uint16
	ring  ringView

	av    [prm.AVSize]byte
	raddr uint64
	rkey  uint32

	asize                            int
	swap, compare, swapMask, cmpMask uint64
	sg                               []gatherEntry
	total                            uint64
}

func opAllowed(t ctx.QPType, op prm.Opcode) bool {
	switch op {
	case prm.OpNop, prm.OpSend, prm.OpSendImm:
		return t != ctx.QPTypeDCT
	case prm.OpSendInval, prm.OpRdmaWrite, prm.OpRdmaWriteImm, prm.OpRdmaRead,
		prm.OpAtomicCS, prm.OpAtomicFA, prm.OpAtomicMaskedCS, prm.OpAtomicMaskedFA:
		return t == ctx.QPTypeRC || t == ctx.QPTypeDCI
	}
	return false
}

// parseSend decodes the WQE at the QP's consumer index. A non-zero syndrome
// is the local error the WQE completes with.
func (f *Fabric) parseSend(q *qp, w *sendWQE) prm.Syndrome {
	*w = sendWQE{sg: w.sg[:0], bbs: 1}
	w.ring = ringView{base: q.sq, mask: q.sqCnt*prm.WQEBBSize - 1, start: (uint32(q.sqCI) & (q.sqCnt - 1)) * prm.WQEBBSize}
	ctrl := w.ring.seg(0)
	w0 := prm.Load32(ctrl)
	w1 := prm.Load32(unsafe.Add(ctrl, prm.CtrlQPNDS))
	w.op = prm.Opcode(w0 & prm.CtrlOpcodeMask)
	w.idx = uint16(w0 >> prm.CtrlWQEIndexShift)
	w.opmod = uint8(w0 >> prm.CtrlOpmodShift)
	w.qpn = w1 >> prm.CtrlQPNShift
	w.ds = int(w1 & prm.CtrlDSMask)
	w.fm = *(*uint8)(unsafe.Add(ctrl, prm.CtrlFmCeSe))
	w.imm = prm.Load32(unsafe.Add(ctrl, prm.CtrlImm))
	v := Violation{QPN: q.qpn, WQEIndex: q.sqCI}
	fatal := false
	bad := func(k ViolationKind, format string, args ...any) bool {
		v.Kind, v.Detail = k, fmt.Sprintf(format, args...)
		return f.violate(v)
	}
	if w.idx != q.sqCI {
		fatal = bad(ViolationWQEIndex, "control segment says WQE index %d, the producer index is %d", w.idx, q.sqCI) || fatal
	}
	if w.qpn != q.qpn {
		fatal = bad(ViolationQPN, "control segment names QPN %#x", w.qpn) || fatal
	}
	if w.ds == 0 {
		bad(ViolationDS, "ds is 0")
		return prm.SyndromeLocalQPOp
	}
	w.bbs = uint16(prm.WQEBBs(w.ds))
	if pend := q.sqPending(); w.bbs > pend {
		bad(ViolationWQEBeyondProducer, "ds %d spans %d WQEBBs; the doorbell record announced %d", w.ds, w.bbs, pend)
		w.bbs = pend
		return prm.SyndromeLocalQPOp
	}
	if uint32(w.bbs) > q.maxWQEBBs {
		fatal = bad(ViolationDS, "ds %d spans %d WQEBBs; the QP was created for %d", w.ds, w.bbs, q.maxWQEBBs) || fatal
	}
	if !opAllowed(q.typ, w.op) {
		bad(ViolationOpcode, "opcode %v on a %v QP", w.op, q.typ)
		return prm.SyndromeLocalQPOp
	}
	cur := 1
	need := func(n int, what string) bool {
		if cur+n > w.ds {
			bad(ViolationDS, "ds %d leaves no room for the %s of %v", w.ds, what, w.op)
			return false
		}
		return true
	}
	if q.typ == ctx.QPTypeUD || q.typ == ctx.QPTypeDCI {
		if !need(prm.AVSegments, "address vector") {
			return prm.SyndromeLocalQPOp
		}
		w.ring.copyOut(w.av[:], uint32(cur*prm.SegmentSize))
		cur += prm.AVSegments
	}
	if w.op.HasRaddr() {
		if !need(1, "remote address segment") {
			return prm.SyndromeLocalQPOp
		}
		p := w.ring.seg(cur)
		w.raddr = prm.Load64(unsafe.Add(p, prm.RaddrAddr))
		w.rkey = prm.Load32(unsafe.Add(p, prm.RaddrRkey))
		cur++
	}
	switch w.op {
	case prm.OpAtomicCS, prm.OpAtomicFA:
		if w.opmod != 0 {
			fatal = bad(ViolationOpcode, "opmod %#x on a standard atomic", w.opmod) || fatal
		}
		if !need(1, "atomic segment") {
			return prm.SyndromeLocalQPOp
		}
		p := w.ring.seg(cur)
		w.asize = 8
		w.swap = prm.Load64(unsafe.Add(p, prm.AtomicSwapAdd))
		w.compare = prm.Load64(unsafe.Add(p, prm.AtomicCompare))
		cur++
	case prm.OpAtomicMaskedCS, prm.OpAtomicMaskedFA:
		w.asize = prm.MaskedAtomicSize(w.opmod)
		if w.asize != 4 && w.asize != 8 {
			bad(ViolationOpcode, "masked atomic opmod %#x (operand size %d)", w.opmod, w.asize)
			return prm.SyndromeLocalQPOp
		}
		n := 1
		if w.op == prm.OpAtomicMaskedCS && w.asize == 8 {
			n = 2
		}
		if !need(n, "masked atomic segment") {
			return prm.SyndromeLocalQPOp
		}
		p := w.ring.seg(cur)
		switch {
		case w.op == prm.OpAtomicMaskedCS && w.asize == 8:
			p2 := w.ring.seg(cur + 1)
			w.swap, w.compare = prm.Load64(p), prm.Load64(unsafe.Add(p, 8))
			w.swapMask, w.cmpMask = prm.Load64(p2), prm.Load64(unsafe.Add(p2, 8))
		case w.op == prm.OpAtomicMaskedFA && w.asize == 8:
			w.swap, w.swapMask = prm.Load64(unsafe.Add(p, prm.MaskedFA64Add)), prm.Load64(unsafe.Add(p, prm.MaskedFA64FieldBoundary))
		case w.op == prm.OpAtomicMaskedCS:
			w.swap = uint64(prm.Load32(unsafe.Add(p, prm.MaskedCS32Swap)))
			w.compare = uint64(prm.Load32(unsafe.Add(p, prm.MaskedCS32Compare)))
			w.swapMask = uint64(prm.Load32(unsafe.Add(p, prm.MaskedCS32SwapMask)))
			w.cmpMask = uint64(prm.Load32(unsafe.Add(p, prm.MaskedCS32CompareMask)))
		default:
			w.swap = uint64(prm.Load32(unsafe.Add(p, prm.MaskedFA32Add)))
			w.swapMask = uint64(prm.Load32(unsafe.Add(p, prm.MaskedFA32FieldBoundary)))
		}
		cur += n
	default:
		if w.opmod != 0 {
			fatal = bad(ViolationOpcode, "opmod %#x on %v", w.opmod, w.op) || fatal
		}
	}
	if w.op == prm.OpNop {
		if fatal {
			return prm.SyndromeLocalQPOp
		}
		return 0
	}
	for cur < w.ds {
		p := w.ring.seg(cur)
		hdr := prm.Load32(p)
		if hdr&prm.InlineSeg != 0 {
			n := hdr &^ prm.InlineSeg
			segs := max(prm.InlineDS(int(n)), 1)
			if cur+segs > w.ds {
				bad(ViolationDS, "inline segment of %d bytes needs %d segments; ds leaves %d", n, segs, w.ds-cur)
				return prm.SyndromeLocalQPOp
			}
			if n == 0 {
				fatal = bad(ViolationDS, "empty inline segment") || fatal
			}
			w.sg = append(w.sg, gatherEntry{inline: true, off: uint32(cur*prm.SegmentSize + prm.InlineHeaderSize), n: uint64(n)})
			w.total += uint64(n)
			cur += segs
			continue
		}
		lkey := prm.Load32(unsafe.Add(p, prm.DataLKey))
		addr := prm.Load64(unsafe.Add(p, prm.DataAddr))
		n := uint64(hdr)
		if n == 0 {
			if lkey == 0 && addr == 0 {
				fatal = bad(ViolationDS, "all-zero data segment %d (ds larger than the segments written?)", cur) || fatal
			}
			n = 1 << 31 // a zero byte count means 2 GiB
		}
		w.sg = append(w.sg, gatherEntry{lkey: lkey, addr: addr, n: n})
		w.total += n
		cur++
	}
	if fatal {
		return prm.SyndromeLocalQPOp
	}
	switch {
	case w.op.IsAtomic():
		if len(w.sg) != 1 || w.sg[0].inline {
			bad(ViolationDS, "%v needs exactly one data segment for the result, found %d", w.op, len(w.sg))
			return prm.SyndromeLocalQPOp
		}
		if w.sg[0].n != uint64(w.asize) {
			return prm.SyndromeLocalLength
		}
	case w.op == prm.OpRdmaRead:
		for _, e := range w.sg {
			if e.inline {
				bad(ViolationDS, "inline data in an RDMA_READ")
				return prm.SyndromeLocalQPOp
			}
		}
	}
	if w.total > maxMessageSize {
		return prm.SyndromeLocalLength
	}
	if q.typ == ctx.QPTypeUD && w.total > uint64(portMTU.Bytes()) {
		return prm.SyndromeLocalLength
	}
	return 0
}

// gather reads the WQE's payload (inline bytes and local SGEs) into the
// scratch buffer, checking every SGE against the QP's PD.
func (f *Fabric) gather(q *qp, w *sendWQE) ([]byte, prm.Syndrome) {
	// Check every SGE before allocating: a WQE may claim any length, but
	// only bytes inside registered regions are ever read.
	for _, e := range w.sg {
		if e.inline {
			continue
		}
		m := f.mrs[e.lkey]
		if m == nil || m.pd != q.pd || !m.contains(e.addr, e.n) {
			return nil, prm.SyndromeLocalProt
		}
	}
	if uint64(cap(f.scratch)) < w.total {
		f.scratch = make([]byte, 0, w.total)
	}
	buf := f.scratch[:0]
	for _, e := range w.sg {
		if e.inline {
			n := len(buf)
			buf = buf[:n+int(e.n)]
			w.ring.copyOut(buf[n:], e.off)
			continue
		}
		buf = append(buf, f.mrs[e.lkey].bytes(e.addr, e.n)...)
	}
	if cap(f.scratch) > 1<<20 && len(buf) <= 1<<20 {
		f.scratch = nil // do not keep a large buffer for small messages
	} else {
		f.scratch = buf[:0]
	}
	return buf, 0
}

// checkLocalWrite checks the SGEs an RDMA_READ or atomic writes into.
func (f *Fabric) checkLocalWrite(q *qp, w *sendWQE) prm.Syndrome {
	for _, e := range w.sg {
		m := f.mrs[e.lkey]
		if m == nil || m.pd != q.pd || m.access&ctx.AccessLocalWrite == 0 || !m.contains(e.addr, e.n) {
			return prm.SyndromeLocalProt
		}
	}
	return 0
}

type result uint8

const (
	resultDone result = iota
	resultWait
	resultFail
)

type outcome struct {
	res     result
	synd    prm.Syndrome
	byteCnt uint32
}

func done(n uint64) outcome       { return outcome{res: resultDone, byteCnt: uint32(n)} }
func fail(s prm.Syndrome) outcome { return outcome{res: resultFail, synd: s} }
func waiting() outcome            { return outcome{res: resultWait} }
func (o outcome) String() string  { return fmt.Sprintf("%d/%v", o.res, o.synd) }
func beUint32(b []byte) uint32    { return binary.BigEndian.Uint32(b) }
func beUint64(b []byte) uint64    { return binary.BigEndian.Uint64(b) }
func putBE64(b []byte, v uint64)  { binary.BigEndian.PutUint64(b, v) }
func putBE32(b []byte, v uint32)  { binary.BigEndian.PutUint32(b, v) }
func boolBit(b bool, bit uint32) uint32 {
	if b {
		return bit
	}
	return 0
}

// runQP gives the QP its turn: a QP in error flushes, an RTS QP executes
// one WQE. It reports whether anything happened.
func (f *Fabric) runQP(q *qp, now int64) bool {
	if q.state == ctx.QPStateError {
		return f.flush(q)
	}
	if q.sqCnt == 0 || q.state != ctx.QPStateRTS || q.sqPending() == 0 || q.blockedUntil > now {
		return false
	}
	f.stats.WQEs++
	var w sendWQE
	w.sg = f.sgScratch[:0]
	var o outcome
	if s := f.parseSend(q, &w); s != 0 {
		o = fail(s)
	} else {
		o = f.perform(q, &w, now)
	}
	f.sgScratch = w.sg[:0]
	switch o.res {
	case resultWait:
		return true
	case resultFail:
		img := errCQE(prm.CQEReqErr, q.qpn, w.op, q.sqCI, o.synd, 0, 0)
		q.sqCI += w.bbs
		q.rnrCount, q.retryCount, q.blockedUntil = 0, 0, 0
		f.qpErrorLocked(q, "error completion")
		f.emitCQE(q.sendCQ, &img, nil, q)
	default:
		q.sqCI += w.bbs
		q.rnrCount, q.retryCount, q.blockedUntil = 0, 0, 0
		if w.fm&prm.FlagCQUpdate != 0 {
			img := reqCQE(q, &w, o.byteCnt)
			f.emitCQE(q.sendCQ, &img, nil, q)
		}
	}
	return true
}

// flush completes every outstanding WQE of a QP in error with
// WR_FLUSH_ERR, each exactly once.
func (f *Fabric) flush(q *qp) bool {
	progressed := false
	for q.sqCnt > 0 && q.sqPending() > 0 {
		r := ringView{base: q.sq, mask: q.sqCnt*prm.WQEBBSize - 1, start: (uint32(q.sqCI) & (q.sqCnt - 1)) * prm.WQEBBSize}
		ctrl := r.seg(0)
		op := prm.Opcode(prm.Load32(ctrl) & prm.CtrlOpcodeMask)
		ds := int(prm.Load32(unsafe.Add(ctrl, prm.CtrlQPNDS)) & prm.CtrlDSMask)
		bbs := min(max(uint16(prm.WQEBBs(ds)), 1), q.sqPending())
		img := errCQE(prm.CQEReqErr, q.qpn, op, q.sqCI, prm.SyndromeWRFlush, 0, 0)
		q.sqCI += bbs
		f.emitCQE(q.sendCQ, &img, nil, q)
		progressed = true
	}
	for q.rqCnt > 0 && q.rqHead != q.rqCI {
		img := errCQE(prm.CQERespErr, q.qpn, 0, q.rqCI, prm.SyndromeWRFlush, 0, 0)
		q.rqCI++
		f.emitCQE(q.recvCQ, &img, nil, q)
		progressed = true
	}
	return progressed
}

// qpErrorLocked moves a QP to the error state; its outstanding WQEs flush
// on its next turn.
func (f *Fabric) qpErrorLocked(q *qp, why string) {
	_ = why
	if q.state == ctx.QPStateError {
		return
	}
	q.state = ctx.QPStateError
	q.blockedUntil = 0
}

// qpFatal moves a QP to error and raises a QP fatal async event.
func (f *Fabric) qpFatal(q *qp, why string) {
	if q.state == ctx.QPStateError {
		return
	}
	f.qpErrorLocked(q, why)
	q.dev.postEvent(ctx.AsyncEvent{Type: ctx.EventQPFatal, QPN: q.qpn, Detail: why})
}

// ---- addressing ----

// reaches reports whether a path from an HCA of link layer link, with a
// destination LID or GID, ends at HCA to.
func reaches(link ctx.LinkLayer, grh bool, dlid uint16, dgid ctx.GID, to *hca) bool {
	if link == ctx.LinkLayerEthernet || grh {
		return to.hasGID(dgid)
	}
	return dlid == to.lid
}

// rcPeer returns the connected peer of an RC QP, or nil when packets to it
// would be lost (no such QP, not connected back, not ready, wrong path).
func (f *Fabric) rcPeer(q *qp) *qp {
	t := f.qps[q.attr.RemoteQPN]
	if t == nil || t.typ != ctx.QPTypeRC || t.attr.RemoteQPN != q.qpn {
		return nil
	}
	if t.state != ctx.QPStateRTR && t.state != ctx.QPStateRTS {
		return nil
	}
	p := q.attr.Path
	if !reaches(q.dev.h.link, p.GlobalRoute, p.DLID, p.DGID, t.dev.h) {
		return nil
	}
	return t
}

// avInfo is what the model reads from an address vector.
type avInfo struct {
	dqpn     uint32
	grh      bool
	dlid     uint16
	dgid     ctx.GID
	sgidIdx  uint8
	tclass   uint8
	hopLimit uint8
	flow     uint32
	sl       uint8
}

func decodeAV(link ctx.LinkLayer, av *[prm.AVSize]byte) avInfo {
	fl := beUint32(av[prm.AVGRHGIDFL:])
	a := avInfo{
		dqpn:     beUint32(av[prm.AVDQPDCT:]) & prm.CtrlQPNMask,
		grh:      link == ctx.LinkLayerEthernet || fl&prm.AVGRHBit != 0,
		dlid:     binary.BigEndian.Uint16(av[prm.AVRLID:]),
		sgidIdx:  uint8(fl >> prm.AVSGIDShift),
		flow:     fl & prm.AVFlowLblMask,
		tclass:   av[prm.AVTClass],
		hopLimit: av[prm.AVHopLimit],
	}
	copy(a.dgid[:], av[prm.AVRGID:])
	if link == ctx.LinkLayerEthernet {
		a.sl = av[prm.AVStatRateSL] >> 1 & 0x7
	} else {
		a.sl = av[prm.AVStatRateSL] & 0xf
	}
	return a
}

// ---- execution ----

// perform executes a parsed WQE.
func (f *Fabric) perform(q *qp, w *sendWQE, now int64) outcome {
	if w.op == prm.OpNop {
		return done(0)
	}
	if q.typ == ctx.QPTypeUD {
		return f.sendUD(q, w)
	}
	// Local checks come first: the device reads (or prepares to write) the
	// local buffers before the first packet leaves.
	var payload []byte
	switch w.op {
	case prm.OpSend, prm.OpSendImm, prm.OpSendInval, prm.OpRdmaWrite, prm.OpRdmaWriteImm:
		var s prm.Syndrome
		if payload, s = f.gather(q, w); s != 0 {
			return fail(s)
		}
	default:
		if s := f.checkLocalWrite(q, w); s != 0 {
			return fail(s)
		}
	}
	var t *qp
	var src srcInfo
	if q.typ == ctx.QPTypeRC {
		t = f.rcPeer(q)
		src = srcInfo{qpn: q.qpn, lid: q.dev.h.lid, sl: q.attr.Path.SL, grh: q.attr.Path.GlobalRoute || q.dev.h.link == ctx.LinkLayerEthernet,
			l3: q.dev.h.roceL3(q.attr.Path.SGIDIndex)}
	} else {
		a := decodeAV(q.dev.h.link, &w.av)
		if c := f.qps[a.dqpn]; c != nil && c.typ == ctx.QPTypeDCT && c.state == ctx.QPStateRTR &&
			reaches(q.dev.h.link, a.grh, a.dlid, a.dgid, c.dev.h) {
			t = c
		}
		src = srcInfo{qpn: q.qpn, lid: q.dev.h.lid, sl: a.sl, grh: a.grh, l3: q.dev.h.roceL3(a.sgidIdx)}
		if t != nil && beUint64(w.av[prm.AVKey:]) != t.dcKey {
			t.dev.postEvent(ctx.AsyncEvent{Type: ctx.EventQPAccessError, QPN: t.qpn, Detail: fmt.Sprintf("DC access key violation from DCI %#x", q.qpn)})
			return fail(prm.SyndromeRemoteAccess)
		}
	}
	if t == nil {
		return f.retry(q, now)
	}
	q.retryCount = 0
	switch w.op {
	case prm.OpSend, prm.OpSendImm, prm.OpSendInval:
		rw, ok := f.peekRecv(t)
		if !ok {
			return f.rnr(q, t, now)
		}
		if s := f.deliverSend(q, t, w, payload, &rw, src); s != 0 {
			return fail(s)
		}
		return done(w.total)
	case prm.OpRdmaWrite, prm.OpRdmaWriteImm:
		var m *mr
		if w.total > 0 {
			if m = f.remoteMR(t, w.rkey, w.raddr, w.total, ctx.AccessRemoteWrite); m == nil {
				f.remoteAccessError(q, t)
				return fail(prm.SyndromeRemoteAccess)
			}
		}
		var rw recvWQE
		if w.op == prm.OpRdmaWriteImm {
			var ok bool
			if rw, ok = f.peekRecv(t); !ok {
				return f.rnr(q, t, now)
			}
		}
		if m != nil {
			copy(m.bytes(w.raddr, w.total), payload)
		}
		if w.op == prm.OpRdmaWriteImm {
			f.consumeRecv(t, &rw)
			img := respCQE(t, &rw, prm.CQERespWrImm, uint32(w.total), w.imm, src, w.fm&prm.FlagSolicited != 0, prm.CQEFormatNone)
			f.emitCQE(t.recvCQ, &img, nil, t)
		}
		return done(w.total)
	case prm.OpRdmaRead:
		if w.total == 0 {
			return done(0)
		}
		m := f.remoteMR(t, w.rkey, w.raddr, w.total, ctx.AccessRemoteRead)
		if m == nil {
			f.remoteAccessError(q, t)
			return fail(prm.SyndromeRemoteAccess)
		}
		src := m.bytes(w.raddr, w.total)
		for _, e := range w.sg {
			lm := f.mrs[e.lkey]
			n := copy(lm.bytes(e.addr, e.n), src)
			src = src[n:]
		}
		return done(w.total)
	default: // atomics
		size := uint64(w.asize)
		m := f.remoteMR(t, w.rkey, w.raddr, size, ctx.AccessRemoteAtomic)
		if m == nil {
			f.remoteAccessError(q, t)
			return fail(prm.SyndromeRemoteAccess)
		}
		if w.raddr%size != 0 {
			return fail(prm.SyndromeRemoteInvalReq)
		}
		target := m.bytes(w.raddr, size)
		e := w.sg[0]
		result := f.mrs[e.lkey].bytes(e.addr, size)
		atomicOp(w, target, result)
		return done(size)
	}
}

// atomicOp applies the atomic of w to target (big-endian) and writes the old
// value, big-endian, to result.
func atomicOp(w *sendWQE, target, result []byte) {
	var old uint64
	width := w.asize * 8
	if w.asize == 8 {
		old = beUint64(target)
	} else {
		old = uint64(beUint32(target))
	}
	mask := uint64(math.MaxUint64) >> (64 - width)
	nv := old
	switch w.op {
	case prm.OpAtomicCS:
		if old == w.compare {
			nv = w.swap
		}
	case prm.OpAtomicFA:
		nv = old + w.swap
	case prm.OpAtomicMaskedCS:
		if (old^w.compare)&w.cmpMask&mask == 0 {
			nv = old&^w.swapMask | w.swap&w.swapMask
		}
	case prm.OpAtomicMaskedFA:
		nv = fieldAdd(old, w.swap, w.swapMask, width)
	}
	nv &= mask
	if w.asize == 8 {
		putBE64(result, old)
		putBE64(target, nv)
	} else {
		putBE32(result, uint32(old))
		putBE32(target, uint32(nv))
	}
}

// fieldAdd adds a and b bit by bit, dropping the carry out of every bit set
// in boundary (the last bit of each field of a masked fetch-and-add).
func fieldAdd(a, b, boundary uint64, width int) uint64 {
	var r, carry uint64
	for i := 0; i < width; i++ {
		s := a>>i&1 + b>>i&1 + carry
		r |= (s & 1) << i
		carry = s >> 1
		if boundary>>i&1 != 0 {
			carry = 0
		}
	}
	return r
}

// remoteMR finds the region an rkey names on the responder, checking the
// PD, the region's and the QP's access flags and the bounds.
func (f *Fabric) remoteMR(t *qp, rkey uint32, addr, n uint64, need ctx.Access) *mr {
	m := f.mrs[rkey]
	if m == nil || m.pd != t.pd || m.access&need == 0 || t.attr.Access&need == 0 || !m.contains(addr, n) {
		return nil
	}
	return m
}

// remoteAccessError is the responder's side of a remote access violation:
// an RC responder moves to error with an access-error event; a DCT stays.
func (f *Fabric) remoteAccessError(q, t *qp) {
	t.dev.postEvent(ctx.AsyncEvent{Type: ctx.EventQPAccessError, QPN: t.qpn, Detail: fmt.Sprintf("remote access violation from QP %#x", q.qpn)})
	if t.typ == ctx.QPTypeRC {
		f.qpErrorLocked(t, "remote access violation")
	}
}

// rnr handles a receiver-not-ready NAK: wait min_rnr_timer of the responder
// and retry, up to rnr_retry times (7: forever).
func (f *Fabric) rnr(q, t *qp, now int64) outcome {
	if q.attr.RNRRetry != 7 && q.rnrCount >= int(q.attr.RNRRetry) {
		return fail(prm.SyndromeRNRRetryExc)
	}
	q.rnrCount++
	f.stats.RNRNaks++
	q.blockedUntil = now + int64(ctx.RNRTimerDuration(t.attr.MinRNRTimer))
	return waiting()
}

// retry handles a request that got no answer: wait the local ACK timeout
// and send again, retry_cnt times, then fail.
func (f *Fabric) retry(q *qp, now int64) outcome {
	if q.retryCount > int(q.attr.RetryCount) {
		return fail(prm.SyndromeTransportRetryExc)
	}
	q.retryCount++
	f.stats.Retries++
	if d := ctx.AckTimeoutDuration(q.attr.Timeout); d == 0 {
		q.blockedUntil = never
	} else {
		q.blockedUntil = now + int64(d)
	}
	return waiting()
}

// ---- the responder ----

type recvEntry struct {
	lkey uint32
	addr uint64
	n    uint64
}

// recvWQE is a receive WQE taken from an RQ or SRQ.
type recvWQE struct {
	idx  uint16
	srq  *srq
	pd   *pd
	next uint16
	n    int
	sg   [32]recvEntry
}

func (r *recvWQE) capacity() uint64 {
	var c uint64
	for _, e := range r.sg[:r.n] {
		c += e.n
	}
	return c
}

// parseRecv reads the scatter list of a receive WQE. The byte count of an
// entry has 31 bits, as in a send WQE's data segment, and 0 means 2 GiB;
// bad says what posting code should not have written: a zero count that is
// not the InvalidLKey terminator, or bit 31 set (the inline flag of a send
// data segment, which has no meaning in a scatter list: the model reads
// the low 31 bits).
func parseRecv(base unsafe.Pointer, max int, r *recvWQE) (bad string) {
	r.n = 0
	for i := 0; i < max && i < len(r.sg); i++ {
		p := unsafe.Add(base, i*prm.DataSize)
		lkey := prm.Load32(unsafe.Add(p, prm.DataLKey))
		if lkey == prm.InvalidLKey {
			break
		}
		raw := prm.Load32(p)
		if raw&prm.InlineSeg != 0 && bad == "" {
			bad = fmt.Sprintf("entry %d has byte count %#x: bit 31 set", i, raw)
		}
		n := uint64(raw &^ prm.InlineSeg)
		if n == 0 {
			n = 1 << 31
			if bad == "" {
				bad = fmt.Sprintf("entry %d has a zero byte count", i)
			}
		}
		r.sg[r.n] = recvEntry{lkey: lkey, addr: prm.Load64(unsafe.Add(p, prm.DataAddr)), n: n}
		r.n++
	}
	return bad
}

// peekRecv returns the next receive WQE of t without consuming it.
func (f *Fabric) peekRecv(t *qp) (recvWQE, bool) {
	var r recvWQE
	if s := t.srq; s != nil {
		if s.closed || s.counter == s.consumed {
			return r, false
		}
		idx := s.hwHead & uint16(s.cnt-1)
		base := unsafe.Add(s.ring, uint32(idx)*s.stride)
		r.idx, r.srq, r.pd = idx, s, s.pd
		r.next = prm.Load16(unsafe.Add(base, prm.SRQNextWQEIndex)) & uint16(s.cnt-1)
		if bad := parseRecv(unsafe.Add(base, prm.SRQNextSize), int(s.maxSGE), &r); bad != "" {
			f.violate(Violation{Kind: ViolationReceive, SRQN: s.srqn, Detail: fmt.Sprintf("SRQ WQE %d: %s", idx, bad)})
		}
		return r, true
	}
	if t.rqCnt == 0 || t.rqHead == t.rqCI {
		return r, false
	}
	r.idx, r.pd = t.rqCI, t.pd
	if bad := parseRecv(unsafe.Add(t.rq, (uint32(t.rqCI)&(t.rqCnt-1))*t.rqStride), int(t.rqMaxSGE), &r); bad != "" {
		f.violate(Violation{Kind: ViolationReceive, QPN: t.qpn, WQEIndex: t.rqCI, Detail: "receive WQE: " + bad})
	}
	return r, true
}

func (f *Fabric) consumeRecv(t *qp, r *recvWQE) {
	if r.srq != nil {
		r.srq.consumed++
		r.srq.hwHead = r.next
		return
	}
	t.rqCI++
}

// scatterRecv places skip bytes (the GRH slot: written from grh when it is
// not nil) followed by data into the receive WQE's buffers, checking every
// buffer it touches first. It writes nothing unless all checks pass.
func (f *Fabric) scatterRecv(r *recvWQE, grh []byte, skip int, data []byte) prm.Syndrome {
	total := uint64(skip) + uint64(len(data))
	if total > r.capacity() {
		return prm.SyndromeLocalLength
	}
	left := total
	for _, e := range r.sg[:r.n] {
		if left == 0 {
			break
		}
		n := min(left, e.n)
		m := f.mrs[e.lkey]
		if m == nil || m.pd != r.pd || m.access&ctx.AccessLocalWrite == 0 || !m.contains(e.addr, n) {
			return prm.SyndromeLocalProt
		}
		left -= n
	}
	pos := 0 // position in the logical message
	for _, e := range r.sg[:r.n] {
		if pos >= int(total) {
			break
		}
		n := int(min(uint64(int(total)-pos), e.n))
		dst := f.mrs[e.lkey].bytes(e.addr, uint64(n))
		for i := 0; i < n; {
			at := pos + i
			if at < skip {
				k := min(skip-at, n-i)
				if grh != nil {
					copy(dst[i:i+k], grh[at:at+k])
				}
				i += k
				continue
			}
			i += copy(dst[i:], data[at-skip:])
		}
		pos += n
	}
	return 0
}

// srcInfo describes the sender for the receive CQE.
type srcInfo struct {
	qpn uint32
	lid uint16
	sl  uint8
	grh bool
	// l3 is the network header of the packet on an Ethernet port
	// (prm.CQERoCEL3GRH, IPv6 or IPv4; hca.roceL3).
	l3 uint8
}

// respCQE builds a responder completion. On an Ethernet port bits 25..24
// of flags_rqpn carry the network header type where InfiniBand has SL (the
// SL of a RoCE packet travels in its VLAN tag, which the model does not
// have).
func respCQE(t *qp, r *recvWQE, op prm.CQEOpcode, byteCnt, imm uint32, src srcInfo, solicited bool, format uint8) [prm.CQE64Size]byte {
	var b [prm.CQE64Size]byte
	p := unsafe.Pointer(&b)
	prm.Store16(unsafe.Add(p, prm.CQESLID), src.lid)
	fr := boolBit(src.grh, 1<<prm.CQEGRHShift) | src.qpn&prm.CQEQPNMask
	if t.dev.h.link == ctx.LinkLayerEthernet {
		fr |= uint32(src.l3&prm.CQERoCEL3Mask) << prm.CQERoCEL3Shift
	} else {
		fr |= uint32(src.sl&prm.CQESLMask) << prm.CQESLShift
	}
	prm.Store32(unsafe.Add(p, prm.CQEFlagsRQPN), fr)
	if r.srq != nil {
		prm.Store32(unsafe.Add(p, prm.CQESRQNUIdx), r.srq.srqn)
	}
	prm.Store32(unsafe.Add(p, prm.CQEImmInvalPkey), imm)
	prm.Store32(unsafe.Add(p, prm.CQEByteCnt), byteCnt)
	prm.Store32(unsafe.Add(p, prm.CQESopDropQPN), t.qpn)
	prm.Store16(unsafe.Add(p, prm.CQEWQECounter), r.idx)
	b[prm.CQEOpOwn] = prm.OpOwn(op, format, solicited, 0)
	return b
}

// deliverSend places a SEND payload in the receive WQE r of t and writes
// the receive CQE. It returns the requester's syndrome (0 on success).
func (f *Fabric) deliverSend(q, t *qp, w *sendWQE, payload []byte, r *recvWQE, src srcInfo) prm.Syndrome {
	op := prm.CQERespSend
	switch w.op {
	case prm.OpSendImm:
		op = prm.CQERespSendImm
	case prm.OpSendInval:
		op = prm.CQERespSendInv
	}
	var imm uint32
	if w.op != prm.OpSend {
		imm = w.imm
	}
	solicited := w.fm&prm.FlagSolicited != 0
	limit := 32
	format := uint8(prm.CQEFormatScatter32)
	if t.recvCQ.size == prm.CQE128Size {
		limit, format = 64, prm.CQEFormatScatter64
	}
	if t.scatterToCQE && len(payload) <= limit && len(payload) > 0 {
		f.consumeRecv(t, r)
		img := respCQE(t, r, op, uint32(len(payload)), imm, src, solicited, format)
		f.emitCQE(t.recvCQ, &img, payload, t)
		return 0
	}
	if s := f.scatterRecv(r, nil, 0, payload); s != 0 {
		f.consumeRecv(t, r)
		img := errCQE(prm.CQERespErr, t.qpn, 0, r.idx, s, 0, srqnOf(r))
		if t.typ == ctx.QPTypeRC {
			f.qpErrorLocked(t, "receive error")
		}
		f.emitCQE(t.recvCQ, &img, nil, t)
		if s == prm.SyndromeLocalLength {
			return prm.SyndromeRemoteInvalReq
		}
		return prm.SyndromeRemoteOp
	}
	f.consumeRecv(t, r)
	img := respCQE(t, r, op, uint32(len(payload)), imm, src, solicited, prm.CQEFormatNone)
	f.emitCQE(t.recvCQ, &img, nil, t)
	return 0
}

func srqnOf(r *recvWQE) uint32 {
	if r.srq != nil {
		return r.srq.srqn
	}
	return 0
}
