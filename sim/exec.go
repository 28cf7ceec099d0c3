package sim

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// never is the deadline of a QP that waits forever (infinite ACK timeout).
const never = math.MaxInt64

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
	// still: a wait that changed nothing (a UD SEND waiting for room),
	// which is no progress of the round.
	still bool
}

func done(n uint64) outcome       { return outcome{res: resultDone, byteCnt: uint32(n)} }
func fail(s prm.Syndrome) outcome { return outcome{res: resultFail, synd: s} }
func waiting() outcome            { return outcome{res: resultWait} }
func stillWaiting() outcome       { return outcome{res: resultWait, still: true} }
func (o outcome) String() string  { return fmt.Sprintf("%d/%v", o.res, o.synd) }
func beUint32(b []byte) uint32    { return binary.BigEndian.Uint32(b) }
func beUint64(b []byte) uint64    { return binary.BigEndian.Uint64(b) }
func putBE32(b []byte, v uint32)  { binary.BigEndian.PutUint32(b, v) }
func boolBit(b bool, bit uint32) uint32 {
	if b {
		return bit
	}
	return 0
}

// runQP gives the QP its turn: a QP in error flushes, an RTS QP executes
// one WQE. It reports whether anything happened.
func (f *Fabric) runQP(q *qp) bool {
	if q.state == ctx.QPStateError {
		return f.flush(q)
	}
	if q.sqCnt == 0 || q.state != ctx.QPStateRTS || q.sqPending() == 0 {
		return false
	}
	if (q.typ == ctx.QPTypeRC || q.typ == ctx.QPTypeDCI) && (f.shm != nil || f.tcp != nil) {
		// A peer in another process (shared fabric or TCP link):
		// segments, several in flight.
		if slot := f.wireSlot(q); slot >= 0 {
			return f.wireRun(q, slot)
		}
	}
	now := f.roundNow()
	if q.blockedUntil > now {
		return false
	}
	var w sendWQE
	w.sg = f.sgScratch[:0]
	var o outcome
	if s := f.parseSend(q, &w); s != 0 {
		o = fail(s)
	} else {
		o = f.perform(q, &w, now)
	}
	f.sgScratch = w.sg[:0]
	if o.still {
		return false
	}
	f.stats.WQEs++
	if o.res != resultWait {
		f.finishSend(q, &w, o)
	}
	return true
}

// finishSend completes the WQE at the consumer index with outcome o (not
// resultWait).
func (f *Fabric) finishSend(q *qp, w *sendWQE, o outcome) {
	switch o.res {
	case resultFail:
		img := errCQE(prm.CQEReqErr, q.qpn, w.op, q.sqCI, o.synd, 0)
		q.sqCI += w.bbs
		q.rnrCount, q.retryCount, q.blockedUntil, q.udWaitSince = 0, 0, 0, 0
		f.qpErrorLocked(q, "error completion")
		f.emitCQE(q.sendCQ, &img, nil, q)
	default:
		f.sendDone(q, w.op, w.fm, w.idx, w.bbs, o.byteCnt)
	}
}

// sendDone completes the WQE of opcode op and flags fm at the consumer
// index, bbs WQEBBs long, its control segment's index idx, with success:
// byteCnt is the CQE's byte count.
func (f *Fabric) sendDone(q *qp, op prm.Opcode, fm uint8, idx, bbs uint16, byteCnt uint32) {
	q.sqCI += bbs
	q.rnrCount, q.retryCount, q.blockedUntil, q.udWaitSince = 0, 0, 0, 0
	if fm&prm.FlagCQUpdate != 0 {
		var img [prm.CQE64Size]byte
		reqCQE(&img, q.qpn, op, idx, byteCnt)
		f.emitCQE(q.sendCQ, &img, nil, q)
	}
}

// flush completes every outstanding WQE of a QP in error with
// WR_FLUSH_ERR, each exactly once: those of its send queue, the receive a
// SEND under way holds, then those of its receive queue.
func (f *Fabric) flush(q *qp) bool {
	progressed := false
	for q.sqCnt > 0 && q.sqPending() > 0 {
		r := q.sqWQE(q.sqCI)
		ctrl := r.seg(0)
		op := prm.Opcode(prm.Load32(ctrl) & prm.CtrlOpcodeMask)
		ds := int(prm.Load32(unsafe.Add(ctrl, prm.CtrlQPNDS)) & prm.CtrlDSMask)
		bbs := min(max(uint16(prm.WQEBBs(ds)), 1), q.sqPending())
		img := errCQE(prm.CQEReqErr, q.qpn, op, q.sqCI, prm.SyndromeWRFlush, 0)
		q.sqCI += bbs
		f.emitCQE(q.sendCQ, &img, nil, q)
		progressed = true
	}
	// The receive a SEND under way between processes took at its first
	// segment (wireTake) first: the oldest taken from the queue
	// (qpErrorLocked completes it already; a QP a device error moved to
	// error has it here).
	if f.wireFlushAllHeld(q) {
		progressed = true
	}
	for q.rqCnt > 0 && q.rqHead != q.rqCI {
		img := errCQE(prm.CQERespErr, q.qpn, 0, q.rqCI, prm.SyndromeWRFlush, 0)
		q.rqCI++
		f.emitCQE(q.recvCQ, &img, nil, q)
		progressed = true
	}
	return progressed
}

// qpErrorLocked moves a QP to the error state; its outstanding WQEs flush
// on its next turn. A QP on an SRQ raises QP_LAST_WQE_REACHED, once the
// receive a SEND under way between processes took (wireTake) has
// completed with WR_FLUSH_ERR: that receive is the last WQE it took from
// the SRQ, and a program that drains the CQ when the event comes gets it
// back (rdmavt's rvt_error_qp completes its active receive before its
// caller raises the event).
func (f *Fabric) qpErrorLocked(q *qp, why string) {
	_ = why
	if q.enterError() {
		f.wireFlushAllHeld(q)
		q.lastWQEReached()
	}
}

// enterError moves q to the error state and reports whether it was in
// another, without raising an event: what a fatal device error does to
// every QP of the HCA (FailDevice), where the firmware raises nothing
// more and mlx5_ib passes on DEVICE_FATAL alone (f.mu held).
func (q *qp) enterError() bool {
	if q.state == ctx.QPStateError {
		return false
	}
	q.state = ctx.QPStateError
	q.commEst = false
	q.blockedUntil, q.udWaitSince = 0, 0
	return true
}

// qpFatal moves a QP to error and raises a QP fatal async event.
func (f *Fabric) qpFatal(q *qp, why string) {
	if q.state == ctx.QPStateError {
		return
	}
	// The fatal event first, then (for a QP with an SRQ) the last WQE
	// reached that the move to error raises.
	q.raiseEvent(ctx.EventQPFatal, why)
	f.qpErrorLocked(q, why)
}

// ---- addressing ----

// reaches reports whether a path from an HCA of link layer link, with a
// destination LID or GID, ends at HCA to. Ethernet (RoCE) is routed by
// the destination GID alone. On InfiniBand every packet carries a local
// route header and the subnet's switches forward it by its DLID, with or
// without a GRH: the DLID must be the destination port's LID, and a GRH's
// destination GID must also be one of the port's GIDs, as a ConnectX
// drops a packet whose GRH names another GID.
func reaches(link ctx.LinkLayer, grh bool, dlid uint16, dgid ctx.GID, to *hca) bool {
	if link == ctx.LinkLayerEthernet {
		return to.hasGID(dgid)
	}
	if dlid != to.lid {
		return false
	}
	return !grh || to.hasGID(dgid)
}

// rcPeer returns the connected peer of an RC QP, or nil when packets to it
// or (RC) its answers would be lost (no such QP, not connected back, not
// ready, a path of either that does not reach the other).
func (f *Fabric) rcPeer(q *qp) *qp {
	t := f.qpByNum(q.attr.RemoteQPN)
	if t == nil || t.typ != ctx.QPTypeRC || t.attr.RemoteQPN != q.qpn || t.uc != q.uc {
		return nil
	}
	if t.state != ctx.QPStateRTR && t.state != ctx.QPStateRTS || qpOffline(q) || qpOffline(t) {
		return nil
	}
	p := q.attr.Path
	if !reaches(q.dev.h.link, p.GlobalRoute, p.DLID, p.DGID, t.dev.h) {
		return nil
	}
	if t.commEst {
		t.receivedInRTR()
	}
	if tp := t.attr.Path; !q.uc && !reaches(t.dev.h.link, tp.GlobalRoute, tp.DLID, tp.DGID, q.dev.h) {
		// An RC responder answers on its own path (its QP context's
		// address path), not to the request's source: answers on a
		// path that does not lead back to q are lost.
		return nil
	}
	return t
}

// receivedInRTR raises COMM_EST for an RC or UC QP in RTR (commEst) that
// has just received its first packet there, as the IBA's communication
// established event and mlx5's COMM_EST (which mlx5_ib passes on as
// IB_EVENT_COMM_EST) are; once until the QP enters RTR again.
func (q *qp) receivedInRTR() {
	q.commEst = false
	q.raiseEvent(ctx.EventCommEstablished, "first packet received in RTR")
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

// avDQPN returns the destination QPN (UD) or DCT number (DC) of an
// address vector.
func avDQPN(av *[prm.AVSize]byte) uint32 { return beUint32(av[prm.AVDQPDCT:]) & prm.CtrlQPNMask }

func decodeAV(link ctx.LinkLayer, av *[prm.AVSize]byte) avInfo {
	fl := beUint32(av[prm.AVGRHGIDFL:])
	a := avInfo{
		dqpn:     avDQPN(av),
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
		return f.sendUD(q, w, now)
	}
	// Local checks come first: the device reads (or prepares to write) the
	// local buffers before the first packet leaves.
	var payload []byte
	// direct: an RDMA_WRITE of one gather entry (an SGE or inline data)
	// copies it straight to the responder's memory, after the same
	// checks; with several entries the message is gathered first, so
	// that what lands is what the entries held before any of it is
	// written (they may overlap the destination).
	direct := false
	switch w.op {
	case prm.OpRdmaWrite, prm.OpRdmaWriteImm:
		if len(w.sg) == 1 {
			if s := f.checkLocalRead(q, w); s != 0 {
				return fail(s)
			}
			direct = true
			break
		}
		fallthrough
	case prm.OpSend, prm.OpSendImm, prm.OpSendInval:
		var s prm.Syndrome
		if payload, s = f.gather(q, w); s != 0 {
			return fail(s)
		}
	default:
		if s := f.checkLocalWrite(q, w); s != 0 {
			return fail(s)
		}
	}
	if q.retryCount > int(q.attr.RetryCount) {
		// The last ACK timer ran out: no transmission is left, whether
		// the peer is reachable now or not (the wire path judges the
		// same way before it sends, wireRun).
		return fail(prm.SyndromeTransportRetryExc)
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
			reaches(q.dev.h.link, a.grh, a.dlid, a.dgid, c.dev.h) && !qpOffline(q) && !qpOffline(c) {
			t = c
		}
		src = srcInfo{qpn: q.qpn, lid: q.dev.h.lid, sl: a.sl, grh: a.grh, l3: q.dev.h.roceL3(a.sgidIdx)}
		if t != nil && beUint64(w.av[prm.AVKey:]) != t.dcKey {
			f.stats.DCKeyViolations++
			return fail(prm.SyndromeRemoteAccess)
		}
	}
	if t == nil {
		if q.uc {
			return done(w.total) // sent, and lost: UC has no retry
		}
		return f.retry(q, now)
	}
	q.retryCount = 0
	switch w.op {
	case prm.OpSend, prm.OpSendImm, prm.OpSendInval:
		rw, ok := f.peekRecv(t)
		if !ok {
			if q.uc {
				return done(w.total) // dropped by the responder
			}
			return f.rnr(q, t, now)
		}
		if s := f.deliverSend(q, t, w, payload, rw, src); s != 0 {
			if q.uc {
				return done(w.total)
			}
			return fail(s)
		}
		return done(w.total)
	case prm.OpRdmaWrite, prm.OpRdmaWriteImm:
		var m *mr
		if w.total > 0 {
			if m = f.remoteMR(t, w.rkey, w.raddr, w.total, ctx.AccessRemoteWrite); m == nil {
				if q.uc {
					return done(w.total) // dropped by the responder
				}
				f.remoteAccessError(q.qpn, t)
				return fail(prm.SyndromeRemoteAccess)
			}
		}
		var rw *recvWQE
		if w.op == prm.OpRdmaWriteImm {
			var ok bool
			if rw, ok = f.peekRecv(t); !ok {
				if q.uc {
					return done(w.total)
				}
				return f.rnr(q, t, now)
			}
		}
		if m != nil {
			if dst := m.bytes(w.raddr, w.total); direct {
				f.gatherAt(w, 0, dst)
			} else {
				copy(dst, payload)
			}
		}
		if w.op == prm.OpRdmaWriteImm {
			f.consumeRecv(t, rw)
			var img [prm.CQE64Size]byte
			respCQE(&img, t, rw, prm.CQERespWrImm, uint32(w.total), w.imm, src, w.fm&prm.FlagSolicited != 0, prm.CQEFormatNone)
			f.emitCQE(t.recvCQ, &img, nil, t)
		}
		return done(w.total)
	case prm.OpRdmaRead:
		if w.total == 0 {
			return done(0)
		}
		m := f.remoteMR(t, w.rkey, w.raddr, w.total, ctx.AccessRemoteRead)
		if m == nil {
			f.remoteAccessError(q.qpn, t)
			return fail(prm.SyndromeRemoteAccess)
		}
		src := m.bytes(w.raddr, w.total)
		if len(w.sg) > 1 {
			// The response carries the bytes as they were read: an
			// SGE may overlap the remote range, and must not change
			// what a later SGE receives. (One SGE is one copy, which
			// moves overlapping bytes as read.)
			src = f.holdCopy(src)
		}
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
			f.remoteAccessError(q.qpn, t)
			return fail(prm.SyndromeRemoteAccess)
		}
		if w.raddr%size != 0 {
			return fail(f.misalignedAtomic(q.qpn, t))
		}
		target := m.bytes(w.raddr, size)
		e := w.sg[0]
		result := f.mrs[e.lkey].bytes(e.addr, size)
		atomicOp(w, target, result)
		return done(size)
	}
}

// atomicOp applies the atomic of w to target and writes the old value to
// result, in the byte order of the word: an 8-byte word (the standard
// atomics, the masked ones on 8 bytes) in host byte order, as mlx5_core
// sets a ConnectX to treat 8-byte atomics (the mode in which mlx5_ib
// reports IBV_ATOMIC_HCA), a 4-byte word of a masked atomic big-endian.
func atomicOp(w *sendWQE, target, result []byte) {
	var old uint64
	width := w.asize * 8
	if w.asize == 8 {
		old = binary.NativeEndian.Uint64(target)
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
	// The responder updates the word; the response with the old value
	// lands after it (so a result buffer that is the target itself ends
	// with the old value, as on a NIC).
	if w.asize == 8 {
		binary.NativeEndian.PutUint64(target, nv)
		binary.NativeEndian.PutUint64(result, old)
	} else {
		putBE32(target, uint32(nv))
		putBE32(result, uint32(old))
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
	m := f.mrByKey(rkey)
	if m == nil || m.pd != t.pd || m.access&need == 0 || t.remoteAccess()&need == 0 || !m.contains(addr, n) {
		return nil
	}
	return m
}

// remoteAccess is the remote access QP q grants as a responder: a DCT's
// access flags; an RC or UC QP's, of which only REMOTE_WRITE while its
// max_dest_rd_atomic is 0 (always, for UC). mlx5_ib clears the read and
// atomic enables of such a QP's context (set_qpc_atomic_flags, at every
// modify that carries the access flags or the depth), and QUERY_QP
// reports the context's enables.
func (q *qp) remoteAccess() ctx.Access {
	a := q.attr.Access & (ctx.AccessRemoteRead | ctx.AccessRemoteWrite | ctx.AccessRemoteAtomic)
	if q.typ == ctx.QPTypeRC && q.attr.MaxDestRdAtomic == 0 {
		a &= ctx.AccessRemoteWrite
	}
	return a
}

// remoteAccessError is the responder's side of a remote access violation
// by the requester QP srcQPN, of this process or another (see
// responderError).
func (f *Fabric) remoteAccessError(srcQPN uint32, t *qp) {
	f.responderError(srcQPN, t, ctx.EventQPAccessError, "remote access violation")
}

// responderError is the responder's side of a request it refuses with a
// NAK, the IBA's responder class C errors: an RC responder raises the
// affiliated event, ev (QP_ACCESS_ERR for a remote access violation,
// QP_REQ_ERR for an invalid request such as a misaligned atomic), and
// moves to error; a DCT stays, serving its other DCIs, and raises none
// (see raiseEvent).
func (f *Fabric) responderError(srcQPN uint32, t *qp, ev ctx.AsyncEventType, what string) {
	if t.typ == ctx.QPTypeRC {
		t.raiseEvent(ev, fmt.Sprintf("%s from QP %#x", what, srcQPN))
		f.qpErrorLocked(t, what)
	}
}

// raiseEvent posts the async event typ affiliated with QP q (f.mu held),
// unless q is a DCT: of the events a device raises on a DCT, mlx5_ib
// passes on none (qpc.c's rsc_event_notifier allows a DCT only
// DCT_DRAINED, which the driver consumes as it destroys the DCT), and the
// device's event mask leaves DCT_KEY_VIOLATION off (eq.c), so a verbs
// program never reads an event of a DCT.
func (q *qp) raiseEvent(typ ctx.AsyncEventType, detail string) {
	if q.typ == ctx.QPTypeDCT {
		return
	}
	q.dev.postEvent(ctx.AsyncEvent{Type: typ, QPN: q.qpn, Detail: detail})
}

// misalignedAtomic is the responder's side of an atomic whose remote
// address is not aligned to its size: an invalid request.
func (f *Fabric) misalignedAtomic(srcQPN uint32, t *qp) prm.Syndrome {
	f.responderError(srcQPN, t, ctx.EventQPRequestError, "misaligned atomic")
	return prm.SyndromeRemoteInvalReq
}

// rnr handles a receiver-not-ready NAK: wait min_rnr_timer of the responder
// and retry, up to rnr_retry times (7: forever).
func (f *Fabric) rnr(q, t *qp, now int64) outcome {
	if q.attr.RNRRetry != 7 && q.rnrCount >= int(q.attr.RNRRetry) {
		return fail(prm.SyndromeRNRRetryExc)
	}
	q.rnrCount++
	q.rnrRetries++
	f.stats.RNRNaks++
	q.blockedUntil = now + int64(ctx.RNRTimerDuration(t.attr.MinRNRTimer))
	return waiting()
}

// retry handles a request that got no answer: wait the local ACK timeout
// and send again, retry_cnt times, then fail (perform judges the spent
// budget when the last timer runs out). Only a wait after which the
// request is sent again counts as a retry.
func (f *Fabric) retry(q *qp, now int64) outcome {
	q.retryCount++
	if q.retryCount <= int(q.attr.RetryCount) {
		q.transportRetries++
		f.stats.Retries++
	}
	if d := ctx.AckTimeoutDuration(q.attr.Timeout); d == 0 {
		q.blockedUntil = never
	} else {
		q.blockedUntil = now + int64(d)
	}
	return waiting()
}
