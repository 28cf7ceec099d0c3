package sim

import (
	"fmt"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// This file is the transport between processes of a shared fabric: a
// requester whose peer QP lives in another process sends the request (with
// the payload it read from its own memory) through the peer's inbound ring;
// the peer's engine executes it against its own memory and answers through
// the requester's ring. RC keeps one request in flight per QP, numbered by
// PSN from the QP's SQ PSN; the responder executes each PSN once and
// answers a repeated one from what it remembers.

// wireHdr is the header of every message, read and written in place in a
// ring (native byte order: both ends run on one machine).
type wireHdr struct {
	Len    uint32 // record bytes, header included, a multiple of wireAlign
	Kind   uint8  // wireRequest, wireResponse or wirePad
	Op     uint8  // prm.Opcode of the request
	Status uint8  // response: wireAck, wireRNR or wireNAK
	FM     uint8  // fence/solicited flags of the WQE

	SrcGen uint64 // generation of the sending process
	DstGen uint64 // generation of the process the message is for

	DstQPN uint32
	SrcQPN uint32
	PSN    uint32
	Imm    uint32

	RAddr uint64
	RKey  uint32
	Total uint32 // bytes of the operation (payload, or READ length)

	DLID  uint16
	SL    uint8
	GRH   uint8
	L3    uint8
	ASize uint8
	Synd  uint8 // NAK: the requester's syndrome
	RNR   uint8 // RNR NAK: the responder's min_rnr_timer code

	DGID [16]byte

	Swap, Compare, SwapMask, CmpMask uint64

	SrcLID uint16
	_      uint16
	Epoch  uint32 // the requester QP's connection epoch (DC streams)
	DCKey  uint64
}

const wireHdrSize = int(unsafe.Sizeof(wireHdr{}))

// Message kinds and response statuses.
const (
	wirePad      = 0
	wireRequest  = 1
	wireResponse = 2

	wireAck = 0
	wireRNR = 1
	wireNAK = 2
)

// wireShortRetry is how long a requester waits before trying again to place
// a request in a full ring (the try still ends at the ACK timeout).
const wireShortRetry = 20_000 // ns

// wireQP is the cross-process state of a QP.
type wireQP struct {
	// Requester.
	active    bool   // a request is in flight for the WQE at idx
	unsent    bool   // ... but could not be placed in the ring yet
	rnrResend bool   // ... and is to be sent again after an RNR NAK
	idx       uint16 // sq consumer index of the WQE in flight
	psn       uint32 // its PSN
	next      uint32 // the next PSN to send
	deadline  int64  // when the current try counts as lost
	// Responder (RC).
	expect    uint32 // the next PSN to execute
	last      uint32 // the PSN executed last
	lastValid bool
	lastOld   uint64 // the original value returned by that PSN's atomic
	// epoch numbers the requester's stream from its last RTR→RTS, unique
	// within the Fabric: a DCT tells a DCI that was reset (or a new QP
	// with the same number) from a retry.
	epoch uint32
	// DCT: the last request executed for each DCI, by its QPN.
	streams map[uint32]*dcStream
}

// dcStream is what a DCT remembers of a DCI's last request.
type dcStream struct {
	epoch, psn uint32
	old        uint64
}

// wireTransition updates the PSNs when a QP changes state.
func (q *qp) wireTransition(from, to ctx.QPState) {
	switch {
	case to == ctx.QPStateReset:
		q.wire = wireQP{}
	case to == ctx.QPStateRTR && from == ctx.QPStateInit:
		q.wire.expect, q.wire.lastValid = q.attr.RQPSN, false
	case to == ctx.QPStateRTS && from == ctx.QPStateRTR:
		q.wire.next = q.attr.SQPSN
		q.f.wireEpoch++
		q.wire.epoch = q.f.wireEpoch
	}
}

// wireSend sends the request of WQE w of q to the QP dst in another
// process (slot). av is the address vector of a DCI, nil for RC.
func (f *Fabric) wireSend(q *qp, w *sendWQE, payload []byte, slot int, dst uint32, av *avInfo, now int64) outcome {
	if len(payload) > wireMaxPayload || (w.op == prm.OpRdmaRead && w.total > uint64(wireMaxPayload)) {
		return fail(prm.SyndromeLocalLength)
	}
	ws := &q.wire
	timeout := int64(ctx.AckTimeoutDuration(q.attr.Timeout))
	switch {
	case !ws.active || ws.idx != q.sqCI:
		ws.active, ws.idx, ws.psn = true, q.sqCI, ws.next
		ws.next = (ws.next + 1) & ctx.MaxPSN
		ws.rnrResend, ws.unsent = false, false
		q.retryCount = 0
		ws.deadline = now + timeout
	case ws.rnrResend:
		ws.rnrResend = false
		ws.deadline = now + timeout
	case ws.unsent && (timeout == 0 || now < ws.deadline) && f.wirePeerAlive(slot):
		// Still within the try: place the request now.
	default:
		// The try ended without an answer: a transport retry.
		if q.retryCount > int(q.attr.RetryCount) {
			ws.active = false
			return fail(prm.SyndromeTransportRetryExc)
		}
		q.retryCount++
		f.stats.Retries++
		ws.deadline = now + timeout
	}
	send := len(payload)
	sent := f.wireOut(slot, send, func(h *wireHdr, b []byte) {
		h.Kind, h.Op, h.FM = wireRequest, uint8(w.op), w.fm
		h.DstQPN, h.SrcQPN, h.PSN, h.Imm, h.Epoch = dst, q.qpn, ws.psn, w.imm, ws.epoch
		h.RAddr, h.RKey, h.Total = w.raddr, w.rkey, uint32(w.total)
		h.ASize, h.Swap, h.Compare, h.SwapMask, h.CmpMask = uint8(w.asize), w.swap, w.compare, w.swapMask, w.cmpMask
		h.SrcLID = q.dev.h.lid
		if av == nil {
			p := q.attr.Path
			h.DLID, h.DGID, h.SL = p.DLID, p.DGID, p.SL
			h.GRH = uint8(boolBit(p.GlobalRoute || q.dev.h.link == ctx.LinkLayerEthernet, 1))
			h.L3 = q.dev.h.roceL3(p.SGIDIndex)
		} else {
			h.DLID, h.DGID, h.SL, h.GRH = av.dlid, av.dgid, av.sl, uint8(boolBit(av.grh, 1))
			h.L3 = q.dev.h.roceL3(av.sgidIdx)
			h.DCKey = beUint64(w.av[prm.AVKey:])
		}
		copy(b, payload)
	})
	ws.unsent = !sent && f.wirePeerAlive(slot)
	switch {
	case ws.unsent:
		q.blockedUntil = min(now+wireShortRetry, ws.deadline)
		if timeout == 0 {
			q.blockedUntil = now + wireShortRetry
		}
	case timeout == 0:
		q.blockedUntil = never
	default:
		q.blockedUntil = ws.deadline
	}
	return waiting()
}

// wireIn handles one message from the process in slot from.
func (f *Fabric) wireIn(from int, h *wireHdr, payload []byte, now int64) {
	switch h.Kind {
	case wireRequest:
		f.wireServe(from, h, payload)
	case wireResponse:
		f.wireAnswer(h, payload, now)
	case wireUD:
		f.wireDeliverUD(h, payload)
	}
}

// wireAnswer completes the WQE in flight that a response answers.
func (f *Fabric) wireAnswer(h *wireHdr, payload []byte, now int64) {
	q := f.qps[h.DstQPN]
	if q == nil || q.closed || q.state != ctx.QPStateRTS || !q.wire.active || q.wire.psn != h.PSN ||
		q.wire.idx != q.sqCI || q.sqPending() == 0 {
		return // late, repeated or for a QP that moved on
	}
	var w sendWQE
	w.sg = f.sgScratch[:0]
	var o outcome
	if s := f.parseSend(q, &w); s != 0 {
		o = fail(s)
	} else {
		switch h.Status {
		case wireAck:
			o = f.wireResult(q, &w, payload)
		case wireRNR:
			if q.attr.RNRRetry != 7 && q.rnrCount >= int(q.attr.RNRRetry) {
				o = fail(prm.SyndromeRNRRetryExc)
			} else {
				q.rnrCount++
				f.stats.RNRNaks++
				q.blockedUntil = now + int64(ctx.RNRTimerDuration(h.RNR))
				q.wire.rnrResend = true
				o = waiting()
			}
		default:
			o = fail(prm.Syndrome(h.Synd))
		}
	}
	f.sgScratch = w.sg[:0]
	if o.res != resultWait {
		q.wire.active = false
		f.finishSend(q, &w, o)
	}
}

// wireResult places what an ACK carries (READ data, an atomic's original
// value) in the requester's memory.
func (f *Fabric) wireResult(q *qp, w *sendWQE, payload []byte) outcome {
	switch {
	case w.op == prm.OpRdmaRead:
		if uint64(len(payload)) < w.total {
			return fail(prm.SyndromeRemoteOp)
		}
		if s := f.checkLocalWrite(q, w); s != 0 {
			return fail(s)
		}
		src := payload[:w.total]
		for _, e := range w.sg {
			n := copy(f.mrs[e.lkey].bytes(e.addr, e.n), src)
			src = src[n:]
		}
		return done(w.total)
	case w.op.IsAtomic():
		size := uint64(w.asize)
		if uint64(len(payload)) < size {
			return fail(prm.SyndromeRemoteOp)
		}
		if s := f.checkLocalWrite(q, w); s != 0 {
			return fail(s)
		}
		e := w.sg[0]
		copy(f.mrs[e.lkey].bytes(e.addr, size), payload[:size])
		return done(size)
	}
	return done(w.total)
}

// wireReply answers request h of the process in slot from.
func (f *Fabric) wireReply(from int, h *wireHdr, t *qp, status, synd, rnr uint8, data []byte) {
	f.wireOut(from, len(data), func(r *wireHdr, b []byte) {
		r.Kind, r.Op, r.Status, r.Synd, r.RNR = wireResponse, h.Op, status, synd, rnr
		r.DstQPN, r.SrcQPN, r.PSN = h.SrcQPN, t.qpn, h.PSN
		r.Total = uint32(len(data))
		copy(b, data)
	})
}

// wireServe executes a request against this process's memory and answers.
// A request for a QP that is absent, not connected to the sender or not
// ready gets no answer: the requester retries and gives up, as over a
// network.
func (f *Fabric) wireServe(from int, h *wireHdr, payload []byte) {
	t := f.qps[h.DstQPN]
	if t == nil || t.closed {
		return
	}
	grh := h.GRH != 0
	op := prm.Opcode(h.Op)
	if !opAllowed(ctx.QPTypeRC, op) || op == prm.OpNop {
		return
	}
	switch t.typ {
	case ctx.QPTypeRC:
		if t.attr.RemoteQPN != h.SrcQPN || (t.state != ctx.QPStateRTR && t.state != ctx.QPStateRTS) ||
			!reaches(t.dev.h.link, grh, h.DLID, h.DGID, t.dev.h) {
			return
		}
		if h.PSN != t.wire.expect {
			if t.wire.lastValid && h.PSN == t.wire.last {
				f.wireRepeat(from, h, t)
			}
			return
		}
	case ctx.QPTypeDCT:
		if t.state != ctx.QPStateRTR || !reaches(t.dev.h.link, grh, h.DLID, h.DGID, t.dev.h) {
			return
		}
		if h.DCKey != t.dcKey {
			t.dev.postEvent(ctx.AsyncEvent{Type: ctx.EventQPAccessError, QPN: t.qpn, Detail: fmt.Sprintf("DC access key violation from DCI %#x", h.SrcQPN)})
			f.wireReply(from, h, t, wireNAK, uint8(prm.SyndromeRemoteAccess), 0, nil)
			return
		}
		if st := t.wire.streams[h.SrcQPN]; st != nil && st.epoch == h.Epoch && st.psn == h.PSN {
			t.wire.lastOld = st.old
			f.wireRepeat(from, h, t)
			return
		}
	default:
		return
	}
	w := sendWQE{op: op, fm: h.FM, imm: h.Imm, raddr: h.RAddr, rkey: h.RKey, total: uint64(h.Total),
		asize: int(h.ASize), swap: h.Swap, compare: h.Compare, swapMask: h.SwapMask, cmpMask: h.CmpMask}
	if uint64(len(payload)) < w.total && (op != prm.OpRdmaRead && !op.IsAtomic()) {
		return
	}
	src := srcInfo{qpn: h.SrcQPN, lid: h.SrcLID, sl: h.SL, grh: grh, l3: h.L3}
	nak := func(s prm.Syndrome) { f.wireReply(from, h, t, wireNAK, uint8(s), 0, nil) }
	var data []byte
	var old [8]byte
	switch op {
	case prm.OpSend, prm.OpSendImm, prm.OpSendInval:
		rw, ok := f.peekRecv(t)
		if !ok {
			f.wireReply(from, h, t, wireRNR, 0, t.attr.MinRNRTimer, nil)
			return
		}
		if s := f.deliverSend(nil, t, &w, payload[:w.total], &rw, src); s != 0 {
			nak(s)
			return
		}
	case prm.OpRdmaWrite, prm.OpRdmaWriteImm:
		var m *mr
		if w.total > 0 {
			if m = f.remoteMR(t, w.rkey, w.raddr, w.total, ctx.AccessRemoteWrite); m == nil {
				f.wireAccessError(h.SrcQPN, t)
				nak(prm.SyndromeRemoteAccess)
				return
			}
		}
		var rw recvWQE
		if op == prm.OpRdmaWriteImm {
			var ok bool
			if rw, ok = f.peekRecv(t); !ok {
				f.wireReply(from, h, t, wireRNR, 0, t.attr.MinRNRTimer, nil)
				return
			}
		}
		if m != nil {
			copy(m.bytes(w.raddr, w.total), payload[:w.total])
		}
		if op == prm.OpRdmaWriteImm {
			f.consumeRecv(t, &rw)
			img := respCQE(t, &rw, prm.CQERespWrImm, uint32(w.total), w.imm, src, w.fm&prm.FlagSolicited != 0, prm.CQEFormatNone)
			f.emitCQE(t.recvCQ, &img, nil, t)
		}
	case prm.OpRdmaRead:
		if w.total > 0 {
			m := f.remoteMR(t, w.rkey, w.raddr, w.total, ctx.AccessRemoteRead)
			if m == nil {
				f.wireAccessError(h.SrcQPN, t)
				nak(prm.SyndromeRemoteAccess)
				return
			}
			data = m.bytes(w.raddr, w.total)
		}
	default: // atomics
		size := uint64(w.asize)
		if size != 4 && size != 8 {
			nak(prm.SyndromeRemoteInvalReq)
			return
		}
		m := f.remoteMR(t, w.rkey, w.raddr, size, ctx.AccessRemoteAtomic)
		if m == nil {
			f.wireAccessError(h.SrcQPN, t)
			nak(prm.SyndromeRemoteAccess)
			return
		}
		if w.raddr%size != 0 {
			nak(prm.SyndromeRemoteInvalReq)
			return
		}
		atomicOp(&w, m.bytes(w.raddr, size), old[:size])
		data = old[:size]
	}
	switch t.typ {
	case ctx.QPTypeRC:
		t.wire.expect = (t.wire.expect + 1) & ctx.MaxPSN
		t.wire.last, t.wire.lastValid = h.PSN, true
		t.wire.lastOld = beUint64(old[:])
	case ctx.QPTypeDCT:
		st := t.wire.streams[h.SrcQPN]
		if st == nil {
			if t.wire.streams == nil {
				t.wire.streams = map[uint32]*dcStream{}
			}
			st = &dcStream{}
			t.wire.streams[h.SrcQPN] = st
		}
		st.epoch, st.psn, st.old = h.Epoch, h.PSN, beUint64(old[:])
	}
	f.wireReply(from, h, t, wireAck, 0, 0, data)
}

// wireRepeat answers a request executed before (its answer was lost or
// late) without executing it again: READ data is read anew, an atomic
// returns the original value it returned the first time.
func (f *Fabric) wireRepeat(from int, h *wireHdr, t *qp) {
	op := prm.Opcode(h.Op)
	var data []byte
	switch {
	case op == prm.OpRdmaRead && h.Total > 0:
		m := f.remoteMR(t, h.RKey, h.RAddr, uint64(h.Total), ctx.AccessRemoteRead)
		if m == nil {
			return
		}
		data = m.bytes(h.RAddr, uint64(h.Total))
	case op.IsAtomic():
		var old [8]byte
		putBE64(old[:], t.wire.lastOld)
		data = old[:h.ASize]
	}
	f.wireReply(from, h, t, wireAck, 0, 0, data)
}

// wireAccessError is the responder's side of a remote access violation
// from another process (see remoteAccessError).
func (f *Fabric) wireAccessError(srcQPN uint32, t *qp) {
	t.dev.postEvent(ctx.AsyncEvent{Type: ctx.EventQPAccessError, QPN: t.qpn, Detail: fmt.Sprintf("remote access violation from QP %#x", srcQPN)})
	if t.typ == ctx.QPTypeRC {
		f.qpErrorLocked(t, "remote access violation")
	}
}
