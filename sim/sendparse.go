package sim

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// This file reads what software wrote: doorbell records and send WQEs.

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

// producerFits reports whether checkProducer accepts v without a
// violation. It is inlined where a doorbell record is read, so that the
// common case builds no Violation and makes no call.
func producerFits(v uint32, last, consumed uint16, cnt uint32) bool {
	n := uint16(v)
	return v <= 0xffff && (n == last || last-n >= 0x8000 && uint32(n-consumed) <= cnt)
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
			old := q.sqPI
			if v := bits.ReverseBytes32(raw); producerFits(v, q.sqPI, q.sqCI, q.sqCnt) {
				q.sqPI = uint16(v)
			} else if pi, ok := f.checkProducer(Violation{QPN: q.qpn, WQEIndex: q.sqCI}, "send", v, q.sqPI, q.sqCI, q.sqCnt); ok {
				q.sqPI = pi
			}
			// Strict mode looks at the doorbell register only when
			// the record moved, or moved before with no register
			// write seen since: a round without a post pays nothing.
			if f.opts.Strict && q.reg != nil && (q.sqPI != old || q.unrung) {
				f.checkRung(q, raw, old)
			}
		}
	}
	f.scanRQ(q)
}

// scanRQ reads the QP's receive doorbell record (its 16-bit WQE counter).
func (f *Fabric) scanRQ(q *qp) {
	if q.rqCnt == 0 {
		return
	}
	raw := atomic.LoadUint32((*uint32)(q.db))
	if raw != q.lastRQRaw {
		q.lastRQRaw = raw
		if v := bits.ReverseBytes32(raw); producerFits(v, q.rqHead, q.rqCI, q.rqCnt) {
			q.rqHead = uint16(v)
		} else if h, ok := f.checkProducer(Violation{QPN: q.qpn, WQEIndex: q.rqCI}, "receive", v, q.rqHead, q.rqCI, q.rqCnt); ok {
			q.rqHead = h
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

// sqWQE returns the view of the WQE at index at of q's send queue.
func (q *qp) sqWQE(at uint16) ringView {
	return ringView{base: q.sq, mask: q.sqCnt*prm.WQEBBSize - 1, start: (uint32(at) & (q.sqCnt - 1)) * prm.WQEBBSize}
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
	return f.parseSendAt(q, w, q.sqCI)
}

// parseSendSmall decodes the WQE at index at of the send queue of an RC QP
// when it has the shape of most small messages: a SEND, SEND_IMM,
// RDMA_WRITE or RDMA_WRITE_IMM whose data is one inline segment and
// nothing else, its fields as parseSendAt checks them (decodeSmall). It
// then reports true, with w as parseSendAt would leave it
// (TestParseSendSmallAgrees). For any other WQE it reports false and
// parseSendAt decodes it, and says what is wrong with it; a WQE it takes
// has nothing wrong.
func (f *Fabric) parseSendSmall(q *qp, w *sendWQE, at uint16) bool {
	var m smallWQE
	if !q.decodeSmall(at, &m) {
		return false
	}
	*w = sendWQE{idx: at, op: m.op, qpn: q.qpn, ds: m.ds, bbs: m.bbs, ring: m.ring, fm: m.fm, imm: m.imm,
		raddr: m.raddr, rkey: m.rkey,
		sg:    append(w.sg[:0], gatherEntry{inline: true, off: m.dataOff, n: uint64(m.n)}),
		total: uint64(m.n)}
	return true
}

// smallWQE is a WQE decodeSmall takes: its opcode, flags, immediate and
// remote address, and where its inline data lies in the ring.
type smallWQE struct {
	op      prm.Opcode
	fm      uint8
	bbs     uint16
	ds      int
	imm     uint32
	raddr   uint64 // RDMA_WRITE and RDMA_WRITE_IMM
	rkey    uint32
	n       uint32 // bytes of inline data, at least 1
	dataOff uint32 // the data's offset in the WQE
	ring    ringView
}

// decodeSmall decodes into m the WQE at index at of the send queue of an
// RC QP when parseSendSmall takes it (the shape of most small messages);
// it reports false for any other WQE, and for a WQE whose basic blocks are
// not all posted.
func (q *qp) decodeSmall(at uint16, m *smallWQE) bool {
	if q.typ != ctx.QPTypeRC {
		return false
	}
	r := q.sqWQE(at)
	ctrl := r.seg(0)
	w0 := prm.Load32(ctrl)
	w1 := prm.Load32(unsafe.Add(ctrl, prm.CtrlQPNDS))
	op := prm.Opcode(w0 & prm.CtrlOpcodeMask)
	cur := 1 // the data segment's index
	switch op {
	case prm.OpSend, prm.OpSendImm:
	case prm.OpRdmaWrite, prm.OpRdmaWriteImm:
		cur = 2 // after the remote address segment
	default:
		return false
	}
	ds := int(w1 & prm.CtrlDSMask)
	if uint16(w0>>prm.CtrlWQEIndexShift) != at || uint8(w0>>prm.CtrlOpmodShift) != 0 ||
		w1>>prm.CtrlQPNShift != q.qpn || cur >= ds {
		return false
	}
	bbs := uint16(prm.WQEBBs(ds))
	if bbs > q.sqPI-at || uint32(bbs) > q.maxWQEBBs {
		return false
	}
	hdr := prm.Load32(r.seg(cur))
	n := hdr &^ prm.InlineSeg
	if hdr&prm.InlineSeg == 0 || n == 0 || cur+prm.InlineDS(int(n)) != ds {
		return false
	}
	*m = smallWQE{op: op, bbs: bbs, ds: ds, ring: r, n: n,
		fm:      *(*uint8)(unsafe.Add(ctrl, prm.CtrlFmCeSe)),
		imm:     prm.Load32(unsafe.Add(ctrl, prm.CtrlImm)),
		dataOff: uint32(cur*prm.SegmentSize + prm.InlineHeaderSize)}
	if cur == 2 {
		p := r.seg(1)
		m.raddr = prm.Load64(unsafe.Add(p, prm.RaddrAddr))
		m.rkey = prm.Load32(unsafe.Add(p, prm.RaddrRkey))
	}
	return true
}

// parseSendAt decodes the WQE at index at of the send queue, at or after
// the consumer index (a requester with several requests in flight reads
// ahead of it).
func (f *Fabric) parseSendAt(q *qp, w *sendWQE, at uint16) prm.Syndrome {
	*w = sendWQE{sg: w.sg[:0], bbs: 1}
	w.ring = q.sqWQE(at)
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
	v := Violation{QPN: q.qpn, WQEIndex: at}
	fatal := false
	bad := func(k ViolationKind, format string, args ...any) bool {
		v.Kind, v.Detail = k, fmt.Sprintf(format, args...)
		return f.violate(v)
	}
	if w.idx != at {
		fatal = bad(ViolationWQEIndex, "control segment says WQE index %d, the producer index is %d", w.idx, at) || fatal
	}
	if w.qpn != q.qpn {
		fatal = bad(ViolationQPN, "control segment names QPN %#x", w.qpn) || fatal
	}
	if w.ds == 0 {
		bad(ViolationDS, "ds is 0")
		return prm.SyndromeLocalQPOp
	}
	w.bbs = uint16(prm.WQEBBs(w.ds))
	if pend := q.sqPI - at; w.bbs > pend {
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
	if q.uc && (w.op == prm.OpRdmaRead || w.op.IsAtomic()) {
		// UC has no responses: a READ or an atomic is a local QP
		// operation error.
		bad(ViolationOpcode, "opcode %v on a UC QP", w.op)
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
	if s := f.checkLocalRead(q, w); s != 0 {
		return nil, s
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
	f.keepScratch(buf)
	return buf, 0
}

// keepScratch keeps buf's array as the fabric's scratch buffer for the
// next message, unless it is large and buf small: a large buffer is not
// kept for small messages.
func (f *Fabric) keepScratch(buf []byte) {
	if cap(f.scratch) > 1<<20 && len(buf) <= 1<<20 {
		f.scratch = nil
	} else {
		f.scratch = buf[:0]
	}
}

// holdCopy returns a copy of b in the fabric's scratch buffer, valid until
// the next use of it (keepScratch).
func (f *Fabric) holdCopy(b []byte) []byte {
	if cap(f.scratch) < len(b) {
		f.scratch = make([]byte, 0, len(b))
	}
	buf := append(f.scratch[:0], b...)
	f.keepScratch(buf)
	return buf
}

// checkLocalRead checks the SGEs a SEND or RDMA_WRITE reads: each in a
// region of the QP's PD.
func (f *Fabric) checkLocalRead(q *qp, w *sendWQE) prm.Syndrome {
	for _, e := range w.sg {
		if e.inline {
			continue
		}
		m := f.mrs[e.lkey]
		if m == nil || m.pd != q.pd || !m.contains(e.addr, e.n) {
			return prm.SyndromeLocalProt
		}
	}
	return 0
}

// checkLocalWrite checks the SGEs an RDMA_READ or atomic writes into.
func (f *Fabric) checkLocalWrite(q *qp, w *sendWQE) prm.Syndrome {
	for _, e := range w.sg {
		m := f.mrs[e.lkey]
		if !m.localWritable(q.pd, e.addr, e.n) {
			return prm.SyndromeLocalProt
		}
	}
	return 0
}
