package sim

import (
	"encoding/binary"
	"math"
	"slices"
	"time"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// This file is the transport between processes of a shared fabric: a
// requester whose peer QP lives in another process sends the request (with
// the payload it read from its own memory) through the peer's inbound ring;
// the peer's engine executes it against its own memory and answers through
// the requester's ring.
//
// RC cuts every message into segments of at most wireSegMax bytes, each a
// request with its own PSN (as a NIC's packets): a READ asks for its
// message a segment at a time. Up to wireWindow segments are in flight per
// QP, of as many WQEs as the send queue holds, READ and atomic segments no
// more than the QP's max_rd_atomic. The responder executes each PSN once,
// in order; it answers a repeated one again without executing it (READ
// data read anew, an atomic's original value from what it remembers) and
// ignores one ahead of the PSN it expects. The requester takes the answers
// in order; a timeout or an RNR NAK sends again from the oldest segment not
// answered (go-back-N).
//
// A DCI to a DCT in another process takes the same path: its messages are
// cut into segments, sent with the same window and answered by the same
// responder. The segments in flight of a DCI all go to one destination (the
// address vector of their WQEs); a WQE to another waits until every answer
// has come, as a DCI holds one connection at a time. A connection lasts
// while the DCI has segments in flight, a message part-way or segments a
// go-back-N is to send again (wireSegDone ends it); each is a stream of its
// own (a new epoch), whose first segment carries wireFirst, and the DCT
// keeps for every DCI the responder state an RC QP keeps for its peer,
// checking the DC key on every segment.
//
// A message's record in a ring: a wireHdr, then the payload, padded to
// wireAlign.

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

	SrcLID uint16
	Flags  uint16 // wireFirst
	Epoch  uint32 // the requester QP's connection epoch (DC streams)
	DCKey  uint64

	// Off and Seg place an RC segment in its message: the message's
	// bytes [Off, Off+Seg) of Total (a request of SEND or WRITE carries
	// them; a READ request asks for them and its response carries them).
	Off, Seg uint32
}

const wireHdrSize = int(unsafe.Sizeof(wireHdr{}))

// wireSmallHdr is a whole record but its mark, in the rest of one line: a
// small request of an RC QP on a shared fabric (wireSendSmall), whose
// wireHdr would reach into a second line. The consumer finds all of it in
// the line it polls, so that one transfer carries the request. It is taken
// for a SEND, SEND_IMM, RDMA_WRITE or RDMA_WRITE_IMM of at most
// wireSmallMax bytes of inline data, on an InfiniBand path without a GRH
// (oneLine), and expands to the wireHdr the general record would carry
// (expand): Len and Kind keep their places, so that a consumer reads a
// record's length and kind the same way for every kind.
type wireSmallHdr struct {
	Len  uint32 // wireAlign
	Kind uint8  // wireSmall
	Op   uint8
	FM   uint8
	// NSL holds the payload's length (bits 0..2, wireSmallLen), whether
	// the request carries an ACK (bit 3, wireSmallAck) and the path's
	// SL (bits 4..7).
	NSL uint8
	// The low 32 bits of the sender's and the consumer's generations
	// (wireHdr's SrcGen and DstGen): a record a process of an earlier
	// generation left in a ring is refused as drainRing refuses a
	// wireHdr's.
	SrcGen, DstGen uint32
	DstQPN, SrcQPN uint32
	PSN, Imm       uint32
	RAddr          uint64
	RKey           uint32
	DLID, SrcLID   uint16
	Epoch          uint32
	Data           [wireSmallMax]byte
}

// wireSmallMax is the most payload a one-line record carries.
const wireSmallMax = 4

// A one-line record's NSL: the payload's length in its bits
// wireSmallLen, and wireSmallAck set when the request carries the ACK of
// a request its destination QP sent (wireCarryAck), whose PSN is then in
// Epoch (RC's requests have no epoch: that is a DCI's).
const (
	wireSmallLen = 7
	wireSmallAck = 8
)

var _ [wireSmallLen - wireSmallMax]struct{}

// A one-line record fills the line after its mark exactly, and its Len
// and Kind lie where a wireHdr's do (drainRing reads them through a
// wireHdr before it knows the kind).
var (
	_ [unsafe.Sizeof(wireSmallHdr{}) - (wireAlign - ringMarkSize)]struct{}
	_ [(wireAlign - ringMarkSize) - unsafe.Sizeof(wireSmallHdr{})]struct{}
	_ [unsafe.Offsetof(wireSmallHdr{}.Kind) - unsafe.Offsetof(wireHdr{}.Kind)]struct{}
	_ [unsafe.Offsetof(wireHdr{}.Kind) - unsafe.Offsetof(wireSmallHdr{}.Kind)]struct{}
	_ [unsafe.Offsetof(wireSmallHdr{}.Len) - unsafe.Offsetof(wireHdr{}.Len)]struct{}
	_ [unsafe.Offsetof(wireHdr{}.Len) - unsafe.Offsetof(wireSmallHdr{}.Len)]struct{}
)

// oneLine reports whether q's small requests go as one-line records: an
// InfiniBand path without a GRH (wirePathHdr then sets no GID, a GRH flag
// of 0 and the L3 of a GRH), and an SL of four bits.
func (q *qp) oneLine() bool {
	p := &q.attr.Path
	return q.dev.h.link != ctx.LinkLayerEthernet && !p.GlobalRoute && p.DGID == (ctx.GID{}) && p.SL < 16
}

// expand sets h to the wireHdr the general path sends for the request c
// carries: srcGen and dstGen are the generations whose low bits c's match.
func (c *wireSmallHdr) expand(h *wireHdr, srcGen, dstGen uint64) {
	n := uint32(c.NSL & wireSmallLen)
	*h = wireHdr{Len: wireAlign, Kind: wireRequest, Op: c.Op, FM: c.FM,
		SrcGen: srcGen, DstGen: dstGen,
		DstQPN: c.DstQPN, SrcQPN: c.SrcQPN, PSN: c.PSN, Imm: c.Imm,
		RAddr: c.RAddr, RKey: c.RKey, Total: n, Seg: n,
		DLID: c.DLID, SL: c.NSL >> 4, L3: prm.CQERoCEL3GRH,
		SrcLID: c.SrcLID, Epoch: c.Epoch}
	if c.NSL&wireSmallAck != 0 {
		h.Epoch = 0 // the ACK's PSN (carriedAck), not an epoch
	}
}

// carriedAck sets a to the ACK the one-line request c carries
// (wireSmallAck): of PSN c.Epoch, from the QP that sends c to the QP c is
// for. h is c expanded.
func (c *wireSmallHdr) carriedAck(a, h *wireHdr) {
	*a = wireHdr{Kind: wireResponse, Status: wireAck, SrcGen: h.SrcGen, DstGen: h.DstGen,
		DstQPN: h.DstQPN, SrcQPN: h.SrcQPN, PSN: c.Epoch & ctx.MaxPSN}
}

// An atomic request carries its operands as its payload, not in the
// header: four words, swap (or add), compare, and their masks
// (little-endian). The header stays short enough that a small request or
// an answer fits two cache lines.
const wireAtomicSize = 32

// putAtomic writes w's atomic operands into b (wireAtomicSize bytes).
func putAtomic(b []byte, w *sendWQE) {
	binary.LittleEndian.PutUint64(b[0:], w.swap)
	binary.LittleEndian.PutUint64(b[8:], w.compare)
	binary.LittleEndian.PutUint64(b[16:], w.swapMask)
	binary.LittleEndian.PutUint64(b[24:], w.cmpMask)
}

// getAtomic reads the operands putAtomic wrote into w; false when b is
// too short.
func getAtomic(b []byte, w *sendWQE) bool {
	if len(b) < wireAtomicSize {
		return false
	}
	w.swap = binary.LittleEndian.Uint64(b[0:])
	w.compare = binary.LittleEndian.Uint64(b[8:])
	w.swapMask = binary.LittleEndian.Uint64(b[16:])
	w.cmpMask = binary.LittleEndian.Uint64(b[24:])
	return true
}

// Message kinds and response statuses.
const (
	wirePad      = 0
	wireRequest  = 1
	wireResponse = 2

	wireAck = 0
	wireRNR = 1
	wireNAK = 2
)

// wireFirst flags the first segment of a DCI's stream (a new epoch): the
// DCT starts the stream's responder state at its PSN.
const wireFirst = 1

// wireShortRetry is how long a requester waits before trying again to place
// a request in a full ring (the try still ends at the ACK timeout).
const wireShortRetry = 20_000 // ns

// wireQP is the cross-process state of a QP.
type wireQP struct {
	// Requester (RC, DCI): the segments in flight, oldest first (a ring
	// of segN from segHead), and where the next segment starts: the WQE
	// at sendIdx, byte sendOff of its message.
	segs          [wireWindow]wireSeg
	segHead, segN int
	sendIdx       uint16
	sendOff       uint64
	rdN           int    // READ and atomic segments in flight
	rdBytes       uint64 // READ bytes in flight
	holdUntil     int64  // no segment leaves before (RNR wait, full ring)
	fullUntil     int64  // with nothing in flight, the try of a full ring ends
	next          uint32 // the next PSN to send
	deadline      int64  // when the oldest segment in flight counts as lost (wireUnarmed: not yet given a time)
	// epoch numbers the requester's stream (RC: from its last RTR→RTS;
	// DCI: from the start of its connection, dcOpen), unique within the
	// Fabric: a DCT tells a new stream from a retry.
	epoch uint32
	// DCI: the destination of the stream (the address vector of its
	// WQEs and the slot of the DCT's process), whether the stream is
	// open (from its first segment until every segment sent is answered
	// at a message's end: wireSegDone), the stream's first PSN, and the
	// PSN after the newest segment it sent (next is behind it after a
	// go-back-N, until the segments sent again reach it).
	dcAV   [prm.AVSize]byte
	dcSlot int
	dcOpen bool
	first  uint32
	top    uint32
	// RC responder; a DCT keeps one for each DCI, by its QPN, in streams,
	// and drops those of processes gone once it holds sweepAt of them
	// (dcStream).
	resp    wireResp
	streams map[uint32]*wireResp
	sweepAt int
	// heldN counts the streams (resp, or those in streams) that hold a
	// receive for a SEND under way (wireTake).
	heldN int
}

// wireDropGone drops the streams of DCT t whose process is gone
// (wireStreamGone), except the stream of keep; the receive such a stream
// holds completes with WR_FLUSH_ERR (wireFlushHeld).
func (f *Fabric) wireDropGone(t *qp, keep uint32) {
	for qpn, st := range t.wire.streams {
		if qpn != keep && f.wireStreamGone(qpn, st.gen) {
			f.wireFlushHeld(t, st, prm.SyndromeWRFlush)
			delete(t.wire.streams, qpn)
		}
	}
}

// wireHolder is a DCT stream that holds a receive (wireHeldDC): stream rs
// of DCT t.
type wireHolder struct {
	t  *qp
	rs *wireResp
}

// wireSweepHeld completes with WR_FLUSH_ERR each receive a DCT stream
// whose process is gone holds (wireStreamGone), and drops the stream: the
// receive a DCI took at the first segment of a SEND it never finished
// goes back to the program (libmlx5 frees an SRQ WQE when it polls its
// CQE, error or not). It runs every shmGoneRounds rounds and before the
// engine sleeps, and looks only at the streams that hold a receive. It
// reports whether a receive completed.
func (f *Fabric) wireSweepHeld() bool {
	flushed := false
	for i := len(f.wireHeldDC) - 1; i >= 0; i-- {
		if i >= len(f.wireHeldDC) {
			continue
		}
		h := f.wireHeldDC[i]
		if !f.wireStreamGone(h.rs.qpn, h.rs.gen) {
			continue
		}
		f.wireFlushHeld(h.t, h.rs, prm.SyndromeWRFlush)
		if h.t.wire.streams[h.rs.qpn] == h.rs {
			delete(h.t.wire.streams, h.rs.qpn)
		}
		flushed = true
	}
	return flushed
}

// wireTake takes receive r of t (peekRecv's) for the SEND of total bytes
// that stream rs of t begins: the receive leaves its queue now, as a
// NIC's first packet of a message takes it, and rs holds a copy of it,
// into which each segment is written at its offset, until the message's
// last segment completes it.
func (f *Fabric) wireTake(t *qp, rs *wireResp, r *recvWQE, total uint64) {
	held := new(recvWQE)
	*held = *r
	f.consumeRecv(t, r)
	rs.recv, rs.recvLen = held, total
	t.wire.heldN++
	if t.typ == ctx.QPTypeDCT {
		f.wireHeldDC = append(f.wireHeldDC, wireHolder{t, rs})
	}
}

// wireRelease ends the hold of stream rs of t on its receive and returns
// the receive (nil: none held), writing no CQE.
func (f *Fabric) wireRelease(t *qp, rs *wireResp) *recvWQE {
	r := rs.recv
	if r == nil {
		return nil
	}
	rs.recv, rs.recvLen = nil, 0
	t.wire.heldN--
	if t.typ == ctx.QPTypeDCT {
		f.wireHeldDC = slices.DeleteFunc(f.wireHeldDC, func(h wireHolder) bool { return h.rs == rs })
	}
	return r
}

// wireFlushHeld completes the receive stream rs of t holds, if any, with
// syndrome s, leaving t in its state, and reports whether there was one.
func (f *Fabric) wireFlushHeld(t *qp, rs *wireResp, s prm.Syndrome) bool {
	r := f.wireRelease(t, rs)
	if r == nil {
		return false
	}
	img := errCQE(prm.CQERespErr, t.qpn, 0, r.idx, s, srqnOf(r))
	f.emitCQE(t.recvCQ, &img, nil, t)
	return true
}

// wireFlushAllHeld completes every receive t's streams hold with
// WR_FLUSH_ERR: t is in error (flush), and a NIC flushes the receive a
// message under way took with the rest. It reports whether there was
// one.
func (f *Fabric) wireFlushAllHeld(t *qp) bool {
	if t.wire.heldN == 0 {
		return false
	}
	flushed := f.wireFlushHeld(t, &t.wire.resp, prm.SyndromeWRFlush)
	for _, st := range t.wire.streams {
		if f.wireFlushHeld(t, st, prm.SyndromeWRFlush) {
			flushed = true
		}
	}
	return flushed
}

// wireForget drops the receives t's streams hold without a CQE: t goes
// to RESET or is destroyed. A NIC's QP leaves such a receive behind (an
// SRQ's WQE is not given back to its free list), and libmlx5 removes the
// QP's CQEs from its CQs then anyway (mlx5_modify_qp to RESET and
// mlx5_destroy_qp call __mlx5_cq_clean).
func (f *Fabric) wireForget(t *qp) {
	if t.wire.heldN > 0 && t.typ == ctx.QPTypeDCT {
		f.wireHeldDC = slices.DeleteFunc(f.wireHeldDC, func(h wireHolder) bool { return h.t == t })
	}
	t.wire.heldN = 0
	t.wire.resp.recv = nil
	for _, st := range t.wire.streams {
		st.recv = nil
	}
}

// dcStreamsSweepMin is the fewest DCI streams a DCT holds before it drops
// those of processes that are gone (dcStream).
const dcStreamsSweepMin = 1024

// wireResp is the responder's state of one requester's stream: the next
// PSN to execute, the receive a SEND of several segments took at its
// first segment, and the original values of the last atomics executed, by
// PSN.
type wireResp struct {
	gen    uint64 // DCT: the generation of the DCI's process
	epoch  uint32 // DCT: the DCI's stream
	qpn    uint32 // DCT: the DCI's QPN
	expect uint32
	// recv is the receive the SEND under way took at its first segment
	// (wireTake), a copy of its WQE, held until the last; recvLen is
	// that message's length. nil: no SEND under way.
	recv    *recvWQE
	recvLen uint64
	atomics [maxRdAtomic]wireAtomic
	atomicN int
}

// wireSeg is a segment in flight (RC or DCI).
type wireSeg struct {
	idx  uint16 // sq index of its WQE
	psn  uint32
	off  uint64 // its bytes of the message: [off, off+n)
	n    uint64
	last bool // the message's last segment
	rd   bool // a READ or atomic
	// What the completion of a WQE that is neither (a SEND or a WRITE)
	// takes from it, as parsed when the segment left: the answer needs
	// no second parse (wireAnswerSeg), as a NIC reads a WQE once.
	op    prm.Opcode
	fm    uint8
	wqe   uint16 // the WQE index its control segment carries
	bbs   uint16
	total uint64
}

// wireAtomic is the answer an atomic of PSN psn returned: the bytes of
// the word it found (the first 4 of a 4-byte masked atomic), as atomicOp
// left them.
type wireAtomic struct {
	psn   uint32
	old   [8]byte
	valid bool
}

// Limits of the RC and DC transport between processes.
const (
	// wireSegMax is the largest segment of a message.
	wireSegMax = 1 << 20
	// wireWindow is the most segments in flight per RC QP or DCI.
	wireWindow = 64
	// wireReadBytes bounds the READ bytes in flight per QP, so that the
	// responses fit in the requester's ring beside other traffic.
	wireReadBytes = ringDataSize / 4
	// wireDupWindow is how far behind the expected PSN a request counts
	// as a repeat (answered again) rather than as one from the future
	// (ignored).
	wireDupWindow = 1 << 22
	// wireUnarmed is the deadline of an ACK timer that started in a round
	// that read no clock (ackTimerStart): it never runs out, and the
	// first round that looks at the timer afterwards gives it a time.
	wireUnarmed = math.MaxInt64
)

// ackTimerStart returns the deadline of an ACK timer of d that starts now.
// In Engine mode with the time-stamp counter, in a round that has not read
// the clock, it is wireUnarmed: the next round that looks at timers gives
// it its time once that round's answers are taken (wireRun), so that a
// request answered by then, as one between two polling loops is, costs no
// read of the counter (about 17 ns on Zen 5 in a virtual machine, four of
// them a round trip).
// The timer then starts up to a round late (wireJudgeRounds rounds while
// a stream of completions defers the judgement), never early. Manual mode
// sets it at once: its tests move the clock between rounds.
func (f *Fabric) ackTimerStart(d int64) int64 {
	if f.useTicks && !f.roundTimed {
		return wireUnarmed
	}
	return f.deadlineAfter(d)
}

// wireTransition updates the PSNs when a QP changes state.
func (q *qp) wireTransition(from, to ctx.QPState) {
	switch {
	case to == ctx.QPStateReset:
		q.f.wireForget(q)
		q.wire = wireQP{}
	case to == ctx.QPStateRTR && from == ctx.QPStateInit:
		q.wire.resp.expect = q.attr.RQPSN
	case to == ctx.QPStateRTS && from == ctx.QPStateRTR:
		q.wire.next = q.attr.SQPSN
		q.f.wireEpoch++
		q.wire.epoch = q.f.wireEpoch
	}
}

// wireIn handles one message from the process in slot from. A request is
// served without the time; an answer that sets a timer takes it from
// deadlineAfter.
func (f *Fabric) wireIn(from int, h *wireHdr, payload []byte) {
	switch h.Kind {
	case wireRequest:
		f.wireServe(from, h, payload)
	case wireResponse:
		f.wireAnswer(h, payload)
	case wireUD:
		f.wireDeliverUD(h, payload)
	}
}

// wireAnswer takes the answer to a segment of an RC QP or a DCI.
func (f *Fabric) wireAnswer(h *wireHdr, payload []byte) {
	if q := f.qpByNum(h.DstQPN); q != nil && (q.typ == ctx.QPTypeRC || q.typ == ctx.QPTypeDCI) {
		f.wireAnswerSeg(q, h, payload)
	}
}

// wireAtomicResult places the original value an atomic's ACK carries in
// the requester's memory (a READ's data goes through scatterAt).
func (f *Fabric) wireAtomicResult(q *qp, w *sendWQE, payload []byte) outcome {
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

// wireReply answers request h of the process in slot from. An answer that
// finds the requester's ring full is held (wireHoldReply) and goes with
// the ACKs held, in order, in a later round: a requester with several
// READs in flight has asked for all their responses, and a ring that has
// just gone back to its front (ringRecycle) holds fewer bytes until its
// consumer passes the pad, though the consumer is about to take them.
func (f *Fabric) wireReply(from int, h *wireHdr, t *qp, status, synd, rnr uint8, data []byte) {
	if len(f.wireAcks) > 0 {
		// The answers held go first: a requester takes the answers to
		// its segments in their order, and would drop this one
		// otherwise. If a full ring keeps some to this requester, this
		// one waits behind them; one that keeps answers to another
		// process does not hold it (its own ring has room).
		if f.wireFlushAcks(); f.wireHeldFor(from) {
			f.wireHoldReply(from, h, t, status, synd, rnr, data)
			return
		}
	}
	sent := f.wireOut(from, len(data), func(r *wireHdr, b []byte) {
		r.Kind, r.Op, r.Status, r.Synd, r.RNR = wireResponse, h.Op, status, synd, rnr
		r.DstQPN, r.SrcQPN, r.PSN = h.SrcQPN, t.qpn, h.PSN
		r.Total, r.Off, r.Seg = uint32(len(data)), h.Off, h.Seg
		copy(b, data)
	})
	if !sent && f.wirePeerAlive(from) {
		f.wireHoldReply(from, h, t, status, synd, rnr, data)
		f.wireAcksBlocked = true
	}
}

// wireHoldReply holds the answer to request h for wireFlushAcks: a READ's
// data is read again when it goes (as wireRepeatSeg reads it), an atomic's
// original value is kept. Past wireMaxHeldAnswers the answer is lost, as a
// packet would be: the requester's retry brings the request again.
func (f *Fabric) wireHoldReply(from int, h *wireHdr, t *qp, status, synd, rnr uint8, data []byte) {
	if len(f.wireAcks) >= wireMaxHeldAnswers || len(data) > len(wireHeldAck{}.old) && prm.Opcode(h.Op) != prm.OpRdmaRead {
		return
	}
	a := wireHeldAck{slot: from, gen: h.SrcGen, op: h.Op, status: status, synd: synd, rnr: rnr,
		dst: h.SrcQPN, src: t.qpn, psn: h.PSN, off: h.Off, seg: h.Seg}
	if prm.Opcode(h.Op) == prm.OpRdmaRead {
		a.rkey, a.raddr, a.total = h.RKey, h.RAddr, h.Total
		a.readN = uint32(len(data))
	} else {
		a.oldN = uint8(copy(a.old[:], data))
	}
	f.wireAcks = append(f.wireAcks, a)
}

// wireServe executes a request (a segment of a message) against this
// process's memory and answers, for an RC QP or a DCT (wireServeSeg). A
// request for a QP that is absent, not connected to the sender or not
// ready gets no answer: the requester retries and gives up, as over a
// network.
func (f *Fabric) wireServe(from int, h *wireHdr, payload []byte) {
	t := f.qpByNum(h.DstQPN)
	if t == nil || t.closed {
		return
	}
	grh := h.GRH != 0
	op := prm.Opcode(h.Op)
	if !opAllowed(ctx.QPTypeRC, op) || op == prm.OpNop {
		return
	}
	var rs *wireResp
	switch t.typ {
	case ctx.QPTypeRC:
		if t.attr.RemoteQPN != h.SrcQPN || (t.state != ctx.QPStateRTR && t.state != ctx.QPStateRTS) ||
			!reaches(t.dev.h.link, grh, h.DLID, h.DGID, t.dev.h) {
			return
		}
		if t.uc && (op == prm.OpRdmaRead || op.IsAtomic()) {
			// UC has no READ or atomic: such a request (from an RC QP
			// connected to t, which a segment does not tell apart, or
			// from no requester of this version) is dropped unanswered,
			// as a UC responder drops an opcode it does not know, and
			// as in one process, where the two QPs do not reach each
			// other. It is not a remote access error, which would move
			// t to error.
			return
		}
		if t.commEst {
			t.receivedInRTR()
		}
		rs = &t.wire.resp
	case ctx.QPTypeDCT:
		if t.state != ctx.QPStateRTR || !reaches(t.dev.h.link, grh, h.DLID, h.DGID, t.dev.h) {
			return
		}
		if h.DCKey != t.dcKey {
			// Every segment is refused; the violation is counted once
			// a message, at its first.
			if h.Off == 0 {
				f.stats.DCKeyViolations++
			}
			f.wireReply(from, h, t, wireNAK, uint8(prm.SyndromeRemoteAccess), 0, nil)
			return
		}
		if rs = f.dcStream(t, h); rs == nil {
			return
		}
	default:
		return
	}
	f.wireServeSeg(from, h, payload, t, rs)
}

// dcStream returns the responder state of the DCI stream request h
// belongs to: a request of a new stream (another epoch, or another
// process in the DCI's slot) starts it when it is the stream's first
// segment, and is ignored otherwise (nil: its stream began before this
// DCT saw it, and the requester times out).
//
// A DCT learns of a DCI only from its requests, and keeps its stream
// until a new one with that QPN replaces it. So that the DCIs of
// processes that come and go do not pile up, a new stream that finds
// sweepAt streams first drops those whose process is gone (wireStreamGone);
// the next sweep waits until the streams left have doubled, so that each
// request pays a constant share of the sweeps.
//
// A stream that a new one replaces may hold the receive of a SEND it
// never finished (its DCI moved to error and back, or its process is
// gone and another took its slot): that receive completes with
// WR_FLUSH_ERR, as one of a stream that is gone does (wireDropGone).
func (f *Fabric) dcStream(t *qp, h *wireHdr) *wireResp {
	ws := &t.wire
	st := ws.streams[h.SrcQPN]
	if st != nil && st.gen == h.SrcGen && st.epoch == h.Epoch {
		return st
	}
	if h.Flags&wireFirst == 0 {
		return nil
	}
	if st == nil {
		if ws.streams == nil {
			ws.streams = map[uint32]*wireResp{}
		}
		if len(ws.streams) >= max(ws.sweepAt, dcStreamsSweepMin) {
			f.wireDropGone(t, h.SrcQPN) // (h's stream is not there yet)
			ws.sweepAt = 2 * len(ws.streams)
		}
		st = &wireResp{}
		ws.streams[h.SrcQPN] = st
	}
	f.wireFlushHeld(t, st, prm.SyndromeWRFlush)
	*st = wireResp{gen: h.SrcGen, epoch: h.Epoch, qpn: h.SrcQPN, expect: h.PSN}
	return st
}

// wireStreamGone reports whether the process whose DCI qpn began a stream
// in generation gen is gone: no other process owns qpn now, the TCP link
// has no live peer in its slot (on the listener: not of that generation),
// or another generation holds the slot of the shared fabric.
func (f *Fabric) wireStreamGone(qpn uint32, gen uint64) bool {
	slot := f.remoteSlot(qpn)
	switch {
	case slot < 0:
		return true
	case f.tcp != nil:
		return f.tcp.streamGone(slot, gen)
	default:
		return f.shm.reg.gen(slot) != gen
	}
}

// ---- UC: no acknowledgement ----

// wireUCLoss is how long a UC QP waits for the model's answer to a segment
// before it takes the segment as lost on the way (a responder that is
// gone, not connected back or not ready: it answers nothing).
const wireUCLoss = int64(100 * time.Millisecond)

// ucDrop drops request h at UC QP t, silently as a UC responder does (no
// NAK, no event, t stays in its state), and answers it as taken: between
// processes a UC requester still waits for the model's answer to a
// segment, so that its window and ring stay bounded, but completes its
// WQE with success whatever the answer. The PSN expected is left as it
// was: the rest of the message is dropped too, and the next message
// starts again from its first segment (wireServeSeg).
func (f *Fabric) ucDrop(from int, h *wireHdr, t *qp) {
	f.wireReply(from, h, t, wireAck, 0, 0, nil)
}

// ucAbandon ends, at UC QP t, the SEND under way in stream rs whose
// last segment will not come (a PSN gap): the receive it took at its
// first segment, if any, goes back to the head of t's receive queue and
// the next message starts again in it, as the IBA's UC class D1 has it
// (rxe_resp.c's do_class_d1e_error resets the receive). A receive of an
// SRQ, which cannot go back, completes with REMOTE_INVAL_REQ (class E,
// as rxe completes it).
func (f *Fabric) ucAbandon(t *qp, rs *wireResp) {
	r := f.wireRelease(t, rs)
	if r == nil {
		return
	}
	if r.srq == nil && t.rqCI == r.idx+1 {
		t.rqCI--
		return
	}
	img := errCQE(prm.CQERespErr, t.qpn, 0, r.idx, prm.SyndromeRemoteInvalReq, srqnOf(r))
	f.emitCQE(t.recvCQ, &img, nil, t)
}

// wireUCLost ends the wait of UC QP q for the answers to its segments in
// flight, of which the oldest timed out: they are taken as lost, and each
// WQE whose last segment was sent completes with success, as it would
// have when sent.
func (f *Fabric) wireUCLost(q *qp) {
	ws := &q.wire
	for ; ws.segN > 0; ws.segN-- {
		e := ws.segs[ws.segHead]
		ws.segHead = (ws.segHead + 1) % wireWindow
		if e.last && e.idx == q.sqCI && q.sqPending() > 0 {
			w := sendWQE{op: e.op, fm: e.fm, idx: e.wqe, bbs: e.bbs, total: e.total}
			f.finishSend(q, &w, done(e.total))
		}
	}
	ws.rdN, ws.rdBytes = 0, 0
	q.retryCount, q.blockedUntil = 0, 0
}

// ---- RC and DC: segments, several in flight ----

// wireSlot returns the slot of the process that RC QP or DCI q sends its
// next segment to, or -1 when that is this process (a DCI's WQE to a DCT
// of this process, or whose address vector cannot be read: the WQE
// executes here).
func (f *Fabric) wireSlot(q *qp) int {
	if q.typ == ctx.QPTypeRC {
		return f.remoteSlot(q.attr.RemoteQPN)
	}
	ws := &q.wire
	if ws.segN > 0 || ws.sendOff != 0 {
		return ws.dcSlot
	}
	// Nothing in flight: the WQE at the consumer index says.
	r := q.sqWQE(q.sqCI)
	ds := int(prm.Load32(unsafe.Add(r.seg(0), prm.CtrlQPNDS)) & prm.CtrlDSMask)
	if ds < 1+prm.AVSegments {
		return -1
	}
	var b [4]byte
	r.copyOut(b[:], uint32(prm.SegmentSize+prm.AVDQPDCT))
	return f.remoteSlot(beUint32(b[:]) & prm.CtrlQPNMask)
}

// wireTimeout returns how long RC QP or DCI q waits for the answer to its
// oldest segment in flight: its ACK timeout (0: forever), or for a UC QP
// wireUCLoss.
func (q *qp) wireTimeout() int64 {
	if q.uc {
		return wireUCLoss
	}
	return int64(ctx.AckTimeoutDuration(q.attr.Timeout))
}

// wireRun gives an RC QP or a DCI whose peer is in the process in slot its turn:
// it ends a try that timed out and sends what the window allows. It
// reports whether anything happened. It compares timers with timerNow and
// sets them with deadlineAfter, which read the clock at most every
// timerSlack (a segment leaves before either is asked).
func (f *Fabric) wireRun(q *qp, slot int) bool {
	ws := &q.wire
	timeout := q.wireTimeout()
	if ws.segN == 0 && ws.sendOff == 0 {
		// Nothing in flight and no message begun: the next WQE to send
		// is the oldest not completed. (After goBack or a full ring a
		// message may be begun: it goes on from its segment.)
		ws.sendIdx = q.sqCI
	}
	progressed := false
	// The ACK timer of the oldest segment in flight, if one runs: the
	// round's first pass (wireSendOnly) sends first and looks at the
	// timer after, so that a new request leaves without waiting for a
	// clock read; a segment it sends while the timer has run out is sent
	// again by the go-back-N that follows (unless its ACK came in time),
	// as a NIC's would be.
	judge := ws.segN > 0 && timeout != 0
	// On its last try (the next timeout fails the QP: retry_cnt
	// retransmissions done) a QP looks at the timer before it sends: a
	// WQE posted after that timer ran out is flushed, and must not reach
	// the responder.
	first := judge && (!f.wireSendOnly || !q.uc && q.retryCount >= int(q.attr.RetryCount))
	unarmed := judge && ws.deadline == wireUnarmed
	if unarmed {
		// A timer started in a round that read no clock
		// (ackTimerStart): its time is set in the round's second pass,
		// after the answers are taken, and only if the ACK is not
		// among them.
		if !f.wireSendOnly {
			ws.deadline = f.deadlineAfter(timeout)
		} else if f.lookAtTimers() {
			f.wireLate = true
		}
		first = false
	}
	if first && f.timerNow() >= ws.deadline {
		if f.wireSendOnly {
			f.wireLate = true
			return false
		}
		// The oldest segment was not answered in time: a transport retry.
		if q.uc {
			f.wireUCLost(q)
			return true
		}
		if q.retryCount >= int(q.attr.RetryCount) {
			// retry_cnt retransmissions, 1 + retry_cnt transmissions
			// in all, as in one process (retry).
			f.wireFail(q, prm.SyndromeTransportRetryExc)
			return true
		}
		q.retryCount++
		q.transportRetries++
		f.stats.Retries++
		ws.goBack()
		progressed = true
	}
	ringFull := false
	if ws.holdUntil == 0 || f.timerNow() >= ws.holdUntil {
		ws.holdUntil = 0
		small := f.shm != nil && q.typ == ctx.QPTypeRC
		for ws.segN < wireWindow && ws.sendIdx != q.sqPI {
			sent, stop := false, wireNotSmall
			if small && ws.sendOff == 0 {
				sent, stop = f.wireSendSmall(q, slot, timeout)
			}
			if stop == wireNotSmall {
				sent, stop = f.wireSendNext(q, slot, timeout)
			}
			if sent {
				progressed = true
			}
			if stop == wireStopFailed {
				return true
			}
			if stop == wireStopRing {
				ringFull = true
			}
			if stop != wireGo {
				break
			}
		}
	}
	if judge && !first && !unarmed && f.wireSendOnly && f.lookAtTimers() && f.timerNow() >= ws.deadline {
		// Judged after this round's inbound answers are taken
		// (stepLocked): the ACK may be among them.
		f.wireLate = true
	}
	if ringFull && ws.segN == 0 {
		// Nothing in flight to time out, and the peer takes nothing:
		// each ACK timeout of this counts as a try.
		now := f.roundNow()
		switch {
		case ws.fullUntil == 0:
			ws.fullUntil = now + timeout
		case timeout != 0 && now >= ws.fullUntil && !q.uc:
			if q.retryCount >= int(q.attr.RetryCount) {
				f.wireFail(q, prm.SyndromeTransportRetryExc)
				return true
			}
			q.retryCount++
			q.transportRetries++
			f.stats.Retries++
			ws.fullUntil = now + timeout
		}
	}
	switch {
	case ringFull:
		ws.holdUntil = f.deadlineAfter(wireShortRetry)
		q.blockedUntil = ws.holdUntil
	case ws.holdUntil != 0 && ws.holdUntil > f.timerNow():
		q.blockedUntil = ws.holdUntil
	case ws.segN > 0 && timeout != 0:
		q.blockedUntil = ws.deadline
	default:
		q.blockedUntil = 0
	}
	if ws.segN > 0 && timeout != 0 && ws.deadline < q.blockedUntil {
		q.blockedUntil = ws.deadline
	}
	return progressed
}

// What stopped wireSendSeg from going on with the next segment.
const (
	wireGo         = iota // nothing: send the next
	wireStopWait          // wait for the segments in flight to be answered
	wireStopRing          // the peer's ring is full
	wireStopFailed        // the WQE at the consumer index failed locally
	wireNotSmall          // wireSendSmall: not a small message (wireSendSeg sends it)
)

// wireSendNext sends the next segment of RC QP or DCI q with wireSendSeg.
func (f *Fabric) wireSendNext(q *qp, slot int, timeout int64) (bool, int) {
	var w sendWQE
	w.sg = f.sgScratch[:0]
	sent, stop := f.wireSendSeg(q, &w, slot, timeout)
	f.sgScratch = w.sg[:0]
	return sent, stop
}

// wireSendSeg sends the next segment of the WQE at ws.sendIdx (parsed
// into w). It reports whether it sent one, and what stops the next.
func (f *Fabric) wireSendSeg(q *qp, w *sendWQE, slot int, timeout int64) (bool, int) {
	ws := &q.wire
	atHead := ws.segN == 0 && ws.sendIdx == q.sqCI
	var s prm.Syndrome
	if !f.parseSendSmall(q, w, ws.sendIdx) {
		s = f.parseSendAt(q, w, ws.sendIdx)
	}
	if s == 0 && w.op == prm.OpNop {
		// Completes here, in order: after every WQE before it.
		if !atHead {
			return false, wireStopWait
		}
		f.finishSend(q, w, done(0))
		ws.sendIdx = q.sqCI
		return true, wireGo
	}
	if s == 0 {
		s = f.wireLocalCheck(q, w)
	}
	if s != 0 {
		if !atHead {
			return false, wireStopWait
		}
		f.wireFailParsed(q, w, s)
		return true, wireStopFailed
	}
	rd := w.op == prm.OpRdmaRead || w.op.IsAtomic()
	if ws.sendOff == 0 && ws.segN > 0 && w.fm&prm.FlagFenceMask != 0 {
		return false, wireStopWait
	}
	dci := q.typ == ctx.QPTypeDCI
	if dci && (!ws.dcOpen || ws.dcAV != w.av) {
		// No connection (the last one ended, wireSegDone) or another
		// destination: once nothing is in flight, a new stream.
		if ws.segN > 0 || ws.sendOff != 0 {
			return false, wireStopWait
		}
		if f.remoteSlot(avDQPN(&w.av)) != slot {
			// The slot is that of the WQE this turn began at (wireSlot),
			// which a NOP completed here: the next turn takes this
			// WQE's own (another process, or this one).
			return false, wireStopWait
		}
		f.wireEpoch++
		ws.dcAV, ws.dcSlot, ws.dcOpen = w.av, slot, true
		ws.epoch, ws.first, ws.top = f.wireEpoch, ws.next, ws.next
	}
	off := ws.sendOff
	n := min(w.total-off, wireSegMax)
	if w.op.IsAtomic() {
		off, n = 0, w.total
	}
	if rd {
		limit := max(int(q.attr.MaxRdAtomic), 1)
		if ws.rdN >= limit || (ws.rdN > 0 && w.op == prm.OpRdmaRead && ws.rdBytes+n > wireReadBytes) {
			return false, wireStopWait
		}
	}
	psn := ws.next
	last := off+n >= w.total
	pay := 0
	switch {
	case w.op.IsAtomic():
		pay = wireAtomicSize
	case !rd:
		pay = int(n)
	}
	var av avInfo
	if dci {
		av = decodeAV(q.dev.h.link, &w.av)
	}
	if len(f.wireAcks) > 0 && !f.wireAcksFirst(slot) {
		return false, wireStopRing
	}
	sent := f.wireOut(slot, pay, func(h *wireHdr, b []byte) {
		h.Kind, h.Op, h.FM = wireRequest, uint8(w.op), w.fm
		h.DstQPN, h.SrcQPN, h.PSN, h.Imm, h.Epoch = q.attr.RemoteQPN, q.qpn, psn, w.imm, ws.epoch
		h.RAddr, h.RKey, h.Total = w.raddr, w.rkey, uint32(w.total)
		h.Off, h.Seg = uint32(off), uint32(n)
		h.ASize = uint8(w.asize)
		if dci {
			h.SrcLID = q.dev.h.lid
			h.DstQPN, h.DCKey = av.dqpn, beUint64(w.av[prm.AVKey:])
			h.DLID, h.DGID, h.SL, h.GRH = av.dlid, av.dgid, av.sl, uint8(boolBit(av.grh, 1))
			h.L3 = q.dev.h.roceL3(av.sgidIdx)
			if psn == ws.first {
				h.Flags = wireFirst
			}
		} else {
			q.wirePathHdr(h)
		}
		switch {
		case w.op.IsAtomic():
			putAtomic(b, w)
		case pay > 0:
			f.gatherAt(w, off, b[:pay])
		}
	})
	if !sent && f.wirePeerAlive(slot) {
		return false, wireStopRing
	}
	// Sent, or lost with the peer: either way it is in flight until
	// answered or timed out.
	ws.fullUntil = 0
	if ws.segN == 0 {
		// After the segment is out.
		ws.deadline = f.ackTimerStart(timeout)
	}
	ws.segs[(ws.segHead+ws.segN)%wireWindow] = wireSeg{idx: ws.sendIdx, psn: psn, off: off, n: n, last: last, rd: rd,
		op: w.op, fm: w.fm, wqe: w.idx, bbs: w.bbs, total: w.total}
	ws.segN++
	ws.next = (psn + 1) & ctx.MaxPSN
	if dci && psn == ws.top {
		ws.top = ws.next // a segment not sent before
	}
	if rd {
		ws.rdN++
		if w.op == prm.OpRdmaRead {
			ws.rdBytes += n
		}
	}
	if last {
		ws.sendIdx += w.bbs
		ws.sendOff = 0
	} else {
		ws.sendOff = off + n
	}
	return true, wireGo
}

// wirePathHdr sets the addressing fields of a request of RC QP q: its
// port's LID and the path of its remote QP.
func (q *qp) wirePathHdr(h *wireHdr) {
	p := &q.attr.Path
	h.SrcLID = q.dev.h.lid
	h.DLID, h.DGID, h.SL = p.DLID, p.DGID, p.SL
	h.GRH = uint8(boolBit(p.GlobalRoute || q.dev.h.link == ctx.LinkLayerEthernet, 1))
	h.L3 = q.dev.h.roceL3(p.SGIDIndex)
}

// wireSendSmall sends the WQE at ws.sendIdx of RC QP q on a shared fabric,
// none of it sent yet, as wireSendSeg would, when it is a small message:
// of the shape decodeSmall takes (one inline segment), and not fenced
// behind segments in flight. It writes the record straight from the WQE,
// without the general path's parse and checks, none of which such a WQE
// can fail (TestWireSendSmallAgrees). For any other WQE it writes nothing
// and returns wireNotSmall: wireSendSeg sends it.
func (f *Fabric) wireSendSmall(q *qp, slot int, timeout int64) (bool, int) {
	ws := &q.wire
	at := ws.sendIdx
	var m smallWQE
	if !q.decodeSmall(at, &m) || ws.segN > 0 && m.fm&prm.FlagFenceMask != 0 {
		return false, wireNotSmall
	}
	psn := ws.next
	s := f.shm
	oneLine := m.n <= wireSmallMax && q.oneLine()
	carry := false
	if len(f.wireAcks) > 0 {
		if carry = oneLine && f.wireCarryAck(slot, q); !carry && !f.wireAcksFirst(slot) {
			return false, wireStopRing
		}
	}
	if oneLine {
		// One line: the fields the wireHdr below would carry, and the
		// payload, written straight into the ring (the line is this
		// record's alone until its mark is published).
		if p, rec, pos, ok := s.open(slot, wireAlign); ok {
			c := (*wireSmallHdr)(unsafe.Pointer(&rec[ringMarkSize]))
			pa := &q.attr.Path
			c.Len, c.Kind, c.Op, c.FM, c.NSL = wireAlign, wireSmall, uint8(m.op), m.fm, uint8(m.n)|pa.SL<<4
			c.SrcGen, c.DstGen = uint32(s.gen), uint32(p.gen)
			c.DstQPN, c.SrcQPN, c.PSN, c.Imm = q.attr.RemoteQPN, q.qpn, psn, m.imm
			c.RAddr, c.RKey = m.raddr, m.rkey
			c.DLID, c.SrcLID, c.Epoch = pa.DLID, q.dev.h.lid, ws.epoch
			if carry {
				c.NSL |= wireSmallAck
				c.Epoch = f.wireAcks[0].psn
			}
			m.ring.copyOut(c.Data[:m.n], m.dataOff)
			p.commit(s.slot, pos, wireAlign)
			if carry {
				f.wireAcks = f.wireAcks[:0] // the only one (wireCarryAck)
			}
		} else if f.wirePeerAlive(slot) {
			return false, wireStopRing
		}
	} else if p, rec, pos, ok := s.open(slot, ringRecHdr+int(m.n)); ok {
		h := &s.hdr
		*h = wireHdr{Kind: wireRequest, Op: uint8(m.op), FM: m.fm,
			DstQPN: q.attr.RemoteQPN, SrcQPN: q.qpn, PSN: psn, Imm: m.imm, Epoch: ws.epoch,
			RAddr: m.raddr, RKey: m.rkey, Total: m.n, Seg: m.n}
		q.wirePathHdr(h)
		m.ring.copyOut(rec[ringRecHdr:ringRecHdr+int(m.n)], m.dataOff)
		s.publish(p, rec, pos)
	} else if f.wirePeerAlive(slot) {
		return false, wireStopRing
	}
	// Sent, or lost with the peer: in flight until answered or timed out.
	ws.fullUntil = 0
	if ws.segN == 0 {
		ws.deadline = f.ackTimerStart(timeout)
	}
	ws.segs[(ws.segHead+ws.segN)%wireWindow] = wireSeg{idx: at, psn: psn, n: uint64(m.n), last: true,
		op: m.op, fm: m.fm, wqe: at, bbs: m.bbs, total: uint64(m.n)}
	ws.segN++
	ws.next = (psn + 1) & ctx.MaxPSN
	ws.sendIdx += m.bbs
	return true, wireGo
}

// answerer returns the QPN an answer to q's segments comes from: an RC
// QP's remote QP, a DCI's DCT of the stream in flight. An answer from any
// other QP is dropped, as a NIC drops a response that does not belong to
// the connection: a process on the fabric that knows a PSN in flight
// cannot complete another's requests.
func (ws *wireQP) answerer(q *qp) uint32 {
	if q.typ == ctx.QPTypeRC {
		return q.attr.RemoteQPN
	}
	return avDQPN(&ws.dcAV)
}

// goBack forgets the segments in flight so that they are sent again, from
// the oldest, with the same PSNs.
func (ws *wireQP) goBack() {
	if ws.segN == 0 {
		return
	}
	e := ws.segs[ws.segHead]
	ws.sendIdx, ws.sendOff, ws.next = e.idx, e.off, e.psn
	ws.segHead, ws.segN, ws.rdN, ws.rdBytes = 0, 0, 0, 0
}

// wireLocalCheck checks the local buffers of a WQE before a segment of it
// leaves: the SGEs it reads, or those a READ or atomic writes.
func (f *Fabric) wireLocalCheck(q *qp, w *sendWQE) prm.Syndrome {
	switch w.op {
	case prm.OpRdmaRead:
		return f.checkLocalWrite(q, w)
	}
	if w.op.IsAtomic() {
		return f.checkLocalWrite(q, w)
	}
	return f.checkLocalRead(q, w)
}

// gatherAt copies the message bytes [off, off+len(dst)) of w (inline data
// and local SGEs, checked by wireLocalCheck) to dst.
func (f *Fabric) gatherAt(w *sendWQE, off uint64, dst []byte) {
	if len(w.sg) == 1 && w.sg[0].inline {
		// One inline segment (parseSendSmall's WQEs): one copy.
		w.ring.copyOut(dst, w.sg[0].off+uint32(off))
		return
	}
	for _, e := range w.sg {
		if len(dst) == 0 {
			return
		}
		if off >= e.n {
			off -= e.n
			continue
		}
		n := min(e.n-off, uint64(len(dst)))
		if e.inline {
			w.ring.copyOut(dst[:n], e.off+uint32(off))
		} else {
			copy(dst[:n], f.mrs[e.lkey].bytes(e.addr+off, n))
		}
		dst = dst[n:]
		off = 0
	}
}

// scatterAt copies data to the message bytes [off, off+len(data)) of w's
// local SGEs (a READ's, checked by checkLocalWrite).
func (f *Fabric) scatterAt(w *sendWQE, off uint64, data []byte) {
	for _, e := range w.sg {
		if len(data) == 0 {
			return
		}
		if off >= e.n {
			off -= e.n
			continue
		}
		n := min(e.n-off, uint64(len(data)))
		copy(f.mrs[e.lkey].bytes(e.addr+off, n), data[:n])
		data = data[n:]
		off = 0
	}
}

// wireFail completes the WQE at the consumer index of an RC QP or a DCI with
// syndrome s; the QP goes to error and the rest flush.
func (f *Fabric) wireFail(q *qp, s prm.Syndrome) {
	var w sendWQE
	w.sg = f.sgScratch[:0]
	_ = f.parseSend(q, &w)
	f.wireFailParsed(q, &w, s)
	f.sgScratch = w.sg[:0]
}

func (f *Fabric) wireFailParsed(q *qp, w *sendWQE, s prm.Syndrome) {
	q.wire.segHead, q.wire.segN, q.wire.rdN, q.wire.rdBytes = 0, 0, 0, 0
	q.wire.holdUntil = 0
	f.finishSend(q, w, fail(s))
}

// wireAnswerSeg takes the answer to the oldest segment in flight of RC QP
// or DCI q; any other answer is late or repeated and ignored.
func (f *Fabric) wireAnswerSeg(q *qp, h *wireHdr, payload []byte) {
	ws := &q.wire
	if q.closed || q.state != ctx.QPStateRTS || ws.segN == 0 {
		return
	}
	e := ws.segs[ws.segHead]
	if e.psn != h.PSN || e.idx != q.sqCI || q.sqPending() == 0 || h.SrcQPN != ws.answerer(q) {
		return
	}
	var w sendWQE
	if e.rd {
		// A READ's data and an atomic's result go to its local
		// SGEs: those are read again.
		w.sg = f.sgScratch[:0]
		defer func() { f.sgScratch = w.sg[:0] }()
		if s := f.parseSend(q, &w); s != 0 {
			f.wireFailParsed(q, &w, s)
			return
		}
	} else {
		w.op, w.fm, w.idx, w.bbs, w.total = e.op, e.fm, e.wqe, e.bbs, e.total
	}
	switch h.Status {
	case wireAck:
	case wireRNR:
		if q.attr.RNRRetry != 7 && q.rnrCount >= int(q.attr.RNRRetry) {
			f.wireFailParsed(q, &w, prm.SyndromeRNRRetryExc)
			return
		}
		// An RNR NAK is an answer: the transport retries start again,
		// as in one process (perform).
		q.retryCount = 0
		q.rnrCount++
		q.rnrRetries++
		f.stats.RNRNaks++
		ws.holdUntil = f.deadlineAfter(int64(ctx.RNRTimerDuration(h.RNR)))
		q.blockedUntil = ws.holdUntil
		ws.goBack()
		return
	default:
		// A NAK carries one of the syndromes a responder sends
		// (wireReply's callers); anything else is a bad response, not
		// a status of this side (a local error, a flush).
		s := prm.Syndrome(h.Synd)
		if h.Status != wireNAK || s != prm.SyndromeRemoteInvalReq && s != prm.SyndromeRemoteAccess && s != prm.SyndromeRemoteOp {
			s = prm.SyndromeBadResp
		}
		f.wireFailParsed(q, &w, s)
		return
	}
	var o outcome
	switch {
	case w.op == prm.OpRdmaRead:
		if uint64(len(payload)) < e.n || uint64(h.Seg) != e.n {
			f.wireFailParsed(q, &w, prm.SyndromeRemoteOp)
			return
		}
		if s := f.checkLocalWrite(q, &w); s != 0 {
			f.wireFailParsed(q, &w, s)
			return
		}
		f.scatterAt(&w, e.off, payload[:e.n])
		o = done(w.total)
	case w.op.IsAtomic():
		o = f.wireAtomicResult(q, &w, payload)
		if o.res == resultFail {
			f.wireFailParsed(q, &w, o.synd)
			return
		}
	default:
		o = done(w.total)
	}
	f.wireSegDone(q, &e, &w, o)
}

// wireSegDone retires e, the oldest segment in flight of q, answered with
// outcome o, and completes its WQE when e is the message's last: w, or
// for a SEND's or WRITE's segment with w nil, the WQE e describes.
func (f *Fabric) wireSegDone(q *qp, e *wireSeg, w *sendWQE, o outcome) {
	ws := &q.wire
	ws.segHead = (ws.segHead + 1) % wireWindow
	ws.segN--
	if ws.segN == 0 && ws.sendOff == 0 && q.typ == ctx.QPTypeDCI && ws.next == ws.top {
		// Every segment sent is answered and no message is part-way:
		// the DCI's connection ends, and its next message opens a new
		// stream (wireSendSeg), even to the same address. Not while
		// segments a go-back-N forgot are still to be sent again (a
		// full ring held them back): the DCT may have executed them,
		// and must take them as repeats of this stream, not as a new
		// stream's to execute again. A DCT's destroy waits for the
		// connections to it to end (DRAIN_DCT, then the DCT_DRAINED
		// event: mlx5_core_destroy_dct), so a ConnectX's DCI connects
		// afresh to whichever DCT then has the number; a stream kept
		// would have its segments ignored by a new DCT of the destroyed
		// one's number.
		ws.dcOpen = false
	}
	if e.rd {
		ws.rdN--
		if w.op == prm.OpRdmaRead {
			ws.rdBytes -= e.n
		}
	}
	q.retryCount = 0
	if ws.segN > 0 {
		// The oldest segment still in flight: its timer starts now,
		// with wireRun's wait (a UC QP's is wireUCLoss: it has no ACK
		// timeout, and 0 would take the segment as lost at once).
		ws.deadline = f.ackTimerStart(q.wireTimeout())
	}
	if ws.holdUntil == 0 {
		q.blockedUntil = 0
	}
	if e.last {
		if w != nil {
			f.finishSend(q, w, o)
		} else {
			f.sendDone(q, e.op, e.fm, e.wqe, e.bbs, o.byteCnt)
		}
		if ws.holdUntil != 0 {
			q.blockedUntil = ws.holdUntil
		}
	}
}

// wireCarriedAck takes the ACK that QP src's one-line request carries
// (wireSmallAck) for RC QP dst, of PSN psn, as wireAnswer and
// wireAnswerSeg take a plain ACK, when it answers dst's oldest segment in
// flight and that is a SEND's or a WRITE's: without the wireHdr the
// general path reads, since the request and its ACK cross every round
// trip of a polling loop. It reports false, having done nothing, for any
// other ACK, which the caller hands to wireIn.
func (f *Fabric) wireCarriedAck(dst, src, psn uint32) bool {
	q := f.qpByNum(dst)
	if q == nil || q.typ != ctx.QPTypeRC || q.closed || q.state != ctx.QPStateRTS || q.wire.segN == 0 {
		return false
	}
	ws := &q.wire
	e := &ws.segs[ws.segHead]
	if e.rd || e.psn != psn || e.idx != q.sqCI || q.sqPending() == 0 || src != q.attr.RemoteQPN {
		return false
	}
	f.wireSegDone(q, e, nil, done(e.total))
	return true
}

// wireServeSeg executes a segment for the RC QP or DCT t (checked by
// wireServe: from t's peer, or of a DCI stream with the DCT's key), in
// the requester's stream rs, and answers.
func (f *Fabric) wireServeSeg(from int, h *wireHdr, payload []byte, t *qp, rs *wireResp) {
	if d := (rs.expect - h.PSN) & ctx.MaxPSN; d != 0 {
		if t.uc {
			// UC: a gap in the PSNs (a message lost, or dropped
			// here) ends the message under way; the first segment of
			// a message starts again from its PSN, any other is
			// dropped.
			if h.Off != 0 {
				f.ucDrop(from, h, t)
				return
			}
			rs.expect = h.PSN
			f.ucAbandon(t, rs)
		} else {
			if d <= wireDupWindow {
				f.wireRepeatSeg(from, h, t, rs)
			}
			return
		}
	}
	op := prm.Opcode(h.Op)
	// The request's fields are read from h; a sendWQE is built only
	// where a helper takes one (a SEND's delivery, an atomic).
	total, off, n := uint64(h.Total), uint64(h.Off), uint64(h.Seg)
	if off+n > total || n > wireSegMax {
		return // no requester of this version sends it
	}
	last := off+n == total
	src := srcInfo{qpn: h.SrcQPN, lid: h.SrcLID, sl: h.SL, grh: h.GRH != 0, l3: h.L3}
	var data []byte
	var old [8]byte
	completes := false // a receive CQE written: its ACK is held
	switch op {
	case prm.OpSend, prm.OpSendImm, prm.OpSendInval, prm.OpRdmaWrite, prm.OpRdmaWriteImm:
		if uint64(len(payload)) < n {
			return
		}
	}
	switch op {
	case prm.OpSend, prm.OpSendImm, prm.OpSendInval:
		if off == 0 && rs.recv != nil {
			// A message begins while another holds its receive: no
			// requester of this version sends it (a stream's messages
			// go in order, and a UC gap or a DCI's new stream ends
			// the message under way first).
			return
		}
		if off == 0 {
			rw, ok := f.peekRecv(t)
			if !ok {
				if t.uc {
					f.ucDrop(from, h, t)
					return
				}
				f.wireReply(from, h, t, wireRNR, 0, t.attr.MinRNRTimer, nil)
				return
			}
			if last {
				w := sendWQE{op: op, fm: h.FM, imm: h.Imm, total: total}
				if s := f.deliverSend(nil, t, &w, payload[:n], rw, src); s != 0 {
					if t.uc {
						f.ucDrop(from, h, t)
						return
					}
					f.wireReply(from, h, t, wireNAK, uint8(s), 0, nil)
					return
				}
				completes = true
				break
			}
			// The first segment of several takes the receive at the
			// head of the queue, as a NIC's first packet of a message
			// does, and holds it for the message (wireTake). A
			// message longer than that receive fails now, before
			// anything is written (a NIC's fails at the packet that
			// overflows it), though a later receive might be long
			// enough.
			if total > rw.capacity() {
				s := f.recvFailed(t, rw, prm.SyndromeLocalLength)
				if t.uc {
					f.ucDrop(from, h, t)
					return
				}
				f.wireReply(from, h, t, wireNAK, uint8(s), 0, nil)
				return
			}
			if n != wireSegMax {
				// wireSendSeg cuts every segment but the last to
				// wireSegMax bytes: a shorter first segment is not
				// from a requester of this version, and takes no
				// receive.
				return
			}
			f.wireTake(t, rs, rw, total)
		} else if rs.recv == nil || rs.recvLen != total || !last && n != wireSegMax {
			// A later segment of no message begun (its first was
			// refused or never came), or not from a requester of this
			// version.
			return
		}
		// Each segment lands at its offset of the receive's scatter
		// list; the entries it touches are checked as it is written.
		if s := f.scatterRecvAt(rs.recv, off, payload[:n]); s != 0 {
			synd := f.recvError(t, f.wireRelease(t, rs), s)
			if t.uc {
				f.ucDrop(from, h, t)
				return
			}
			f.wireReply(from, h, t, wireNAK, uint8(synd), 0, nil)
			return
		}
		if last {
			f.sendReceived(t, f.wireRelease(t, rs), op, h.FM, h.Imm, uint32(total), src)
			completes = true
		}
	case prm.OpRdmaWrite, prm.OpRdmaWriteImm:
		var m *mr
		if total > 0 {
			// The whole message's range, at every segment: nothing is
			// written unless all of it lies in the region.
			if m = f.remoteMR(t, h.RKey, h.RAddr, total, ctx.AccessRemoteWrite); m == nil {
				if t.uc {
					f.ucDrop(from, h, t)
					return
				}
				f.remoteAccessError(h.SrcQPN, t)
				f.wireReply(from, h, t, wireNAK, uint8(prm.SyndromeRemoteAccess), 0, nil)
				return
			}
		}
		var rw *recvWQE
		imm := op == prm.OpRdmaWriteImm && last
		if imm {
			var ok bool
			if rw, ok = f.peekRecv(t); !ok {
				if t.uc {
					f.ucDrop(from, h, t)
					return
				}
				f.wireReply(from, h, t, wireRNR, 0, t.attr.MinRNRTimer, nil)
				return
			}
		}
		if m != nil && n > 0 {
			copy(m.bytes(h.RAddr+off, n), payload[:n])
		}
		if imm {
			f.consumeRecv(t, rw)
			var img [prm.CQE64Size]byte
			respCQE(&img, t, rw, prm.CQERespWrImm, uint32(total), h.Imm, src, h.FM&prm.FlagSolicited != 0, prm.CQEFormatNone)
			f.emitCQE(t.recvCQ, &img, nil, t)
			completes = true
		}
	case prm.OpRdmaRead:
		if total > 0 {
			m := f.remoteMR(t, h.RKey, h.RAddr, total, ctx.AccessRemoteRead)
			if m == nil {
				f.remoteAccessError(h.SrcQPN, t)
				f.wireReply(from, h, t, wireNAK, uint8(prm.SyndromeRemoteAccess), 0, nil)
				return
			}
			data = m.bytes(h.RAddr+off, n)
		}
	default: // atomics
		w := sendWQE{op: op, fm: h.FM, imm: h.Imm, raddr: h.RAddr, rkey: h.RKey, total: total, asize: int(h.ASize)}
		if !getAtomic(payload, &w) {
			return // no requester of this version sends it (nothing done yet)
		}
		var synd prm.Syndrome
		if data, synd = f.wireExecAtomic(t, h.SrcQPN, &w, &old); synd != 0 {
			f.wireReply(from, h, t, wireNAK, uint8(synd), 0, nil)
			return
		}
		rs.atomics[rs.atomicN%maxRdAtomic] = wireAtomic{psn: h.PSN, old: old, valid: true}
		rs.atomicN++
	}
	rs.expect = (rs.expect + 1) & ctx.MaxPSN
	if completes && len(f.wireAcks) < wireMaxHeldAcks {
		// The ACK of a request that wrote a receive CQE is held until
		// this process's next round (stepLocked): this round's end
		// does not wait for the ACK's cache lines. A request the
		// program posts meanwhile to the requester's process, its
		// answer to this one, carries the ACK or goes behind it
		// (wireAcksFirst). Other ACKs (a plain WRITE, a SEND's first
		// segments) go at once: nothing here answers them, and a
		// requester's window waits for them.
		f.wireAcks = append(f.wireAcks, wireHeldAck{slot: from, gen: h.SrcGen, op: h.Op, dst: h.SrcQPN, src: t.qpn, psn: h.PSN, off: h.Off, seg: h.Seg})
		return
	}
	f.wireReply(from, h, t, wireAck, 0, 0, data)
}

// wireMaxHeldAcks bounds the ACKs held for the next round: past it they go
// at once.
const wireMaxHeldAcks = 64

// wireMaxHeldAnswers bounds the answers held in all, those a full ring
// kept included (wireHoldReply). The requesters' windows bound them
// (wireWindow segments a QP), and each repeat of a request a requester
// retried adds one.
const wireMaxHeldAnswers = 4096

// wireHeldAck is an answer held for a later round: an ACK of a request
// that wrote a receive CQE (wireServeSeg), or any answer a full ring kept
// (wireHoldReply). slot and gen are the requester's process (on a shared
// fabric, its generation), op, dst (the requester's QPN), psn, off and
// seg echo its request, src is the responder's QPN; status, synd and rnr
// are the answer's. A READ's data is read again when the answer goes:
// readN bytes at raddr+off of the request's region (rkey, raddr, total);
// an atomic's original value is old[:oldN].
type wireHeldAck struct {
	slot              int
	gen               uint64
	op                uint8
	status, synd, rnr uint8
	oldN              uint8
	dst, src, psn     uint32
	off, seg          uint32
	rkey, total       uint32
	readN             uint32
	raddr             uint64
	old               [8]byte
}

// wireFlushAcks sends the answers held (wireServeSeg, wireHoldReply), in
// the order of their requests. Besides each round, a QP's modify and
// close and a device's or the Fabric's close send them: the requests they
// answer were executed, and a NIC would have answered them already. An
// answer whose requester's ring is full stays held, with the later
// answers to that requester (the answers to other processes go), and
// wireAcksBlocked is set: the next round sends them before anything
// else. A READ's answer whose responder is gone meanwhile, or in error,
// is dropped (the requester times out); one whose region is gone is the
// NAK of a remote access error.
func (f *Fabric) wireFlushAcks() {
	f.wireAcksBlocked = false
	if len(f.wireAcks) == 0 {
		return
	}
	acks := f.wireAcks
	// The slots whose ring kept an answer: their later answers stay,
	// in order, behind it; the answers to other processes go.
	var full [4]int
	blocked := full[:0]
	kept := 0
	for i := range acks {
		a := &acks[i]
		if len(blocked) > 0 && slices.Contains(blocked, a.slot) {
			acks[kept] = *a
			kept++
			continue
		}
		if f.shm != nil && f.shm.reg.gen(a.slot) != a.gen {
			continue // the requester's process is gone: so is its ACK
		}
		data := a.old[:a.oldN]
		if a.readN > 0 {
			t := f.qpByNum(a.src)
			if t == nil || t.closed {
				continue
			}
			if uint64(a.off)+uint64(a.readN) > uint64(a.total) {
				continue
			}
			if m := f.remoteMR(t, a.rkey, a.raddr, uint64(a.total), ctx.AccessRemoteRead); m != nil {
				data = m.bytes(a.raddr+uint64(a.off), uint64(a.readN))
			} else if t.state != ctx.QPStateRTR && t.state != ctx.QPStateRTS {
				// A responder in error (an earlier answer's NAK put
				// it there) sends nothing more.
				continue
			} else {
				// The region is gone since the READ executed
				// (deregistered): the answer becomes the NAK a
				// repeat of the READ gets (wireRepeatSeg), the
				// responder's remote access error.
				f.remoteAccessError(a.dst, t)
				a.status, a.synd, a.readN = wireNAK, uint8(prm.SyndromeRemoteAccess), 0
				data = nil
			}
		}
		sent := f.wireOut(a.slot, len(data), func(r *wireHdr, b []byte) {
			r.Kind, r.Op, r.Status, r.Synd, r.RNR = wireResponse, a.op, a.status, a.synd, a.rnr
			r.DstQPN, r.SrcQPN, r.PSN = a.dst, a.src, a.psn
			r.Total, r.Off, r.Seg = uint32(len(data)), a.off, a.seg
			copy(b, data)
		})
		if !sent && f.wirePeerAlive(a.slot) {
			blocked = append(blocked, a.slot)
			acks[kept] = *a
			kept++
		}
	}
	f.wireAcks = acks[:kept]
	f.wireAcksBlocked = kept > 0
}

// wireAcksFirst sends the answers held (wireFlushAcks: all of them, to
// every process) before a request or datagram to the process in slot, so
// that it reaches that process after them, as on a link: the responder's
// NIC acknowledges a request long before its program can answer it. It
// reports false when some answer to slot stays held (its ring is full):
// the request waits too.
func (f *Fabric) wireAcksFirst(slot int) bool {
	f.wireFlushAcks()
	return !f.wireHeldFor(slot)
}

// wireCarryAck reports whether the one-line request RC QP q sends to the
// process in slot can carry the answer held (wireSmallAck): the only one,
// a plain ACK from q to the QP the request is for, of the process's
// present generation. Its record then takes the ACK's place, ahead of
// the request, without a line of its own.
func (f *Fabric) wireCarryAck(slot int, q *qp) bool {
	if len(f.wireAcks) != 1 || f.wireAcksBlocked {
		return false
	}
	a := &f.wireAcks[0]
	return a.slot == slot && a.dst == q.attr.RemoteQPN && a.src == q.qpn && a.status == wireAck &&
		a.readN == 0 && a.oldN == 0 && a.gen == f.shm.reg.gen(slot)
}

// wireHeldFor reports whether an answer to the process in slot is held.
func (f *Fabric) wireHeldFor(slot int) bool {
	for i := range f.wireAcks {
		if f.wireAcks[i].slot == slot {
			return true
		}
	}
	return false
}

// wireRepeatSeg answers a segment of stream rs executed before (its
// answer was lost or is late) without executing it again: READ data is
// read anew (a region gone since is NAKed with a remote access error), an
// atomic returns the original value it returned the first time.
func (f *Fabric) wireRepeatSeg(from int, h *wireHdr, t *qp, rs *wireResp) {
	f.stats.RepeatsServed++
	op := prm.Opcode(h.Op)
	var data []byte
	switch {
	case op == prm.OpRdmaRead && h.Seg > 0:
		if h.Seg > wireSegMax {
			// No requester of this version asks for it (wireServeSeg
			// refuses it the first time), and no peer would take the
			// answer: a TCP link's listener drops a link that sends a
			// message that long, and a shared fabric's ring never has
			// room for it.
			return
		}
		if uint64(h.Off)+uint64(h.Seg) > uint64(h.Total) {
			return // no requester of this version sends it
		}
		m := f.remoteMR(t, h.RKey, h.RAddr, uint64(h.Total), ctx.AccessRemoteRead)
		if m == nil {
			// A repeated READ is checked as a new one: a region
			// deregistered since the first execution is a remote
			// access error, NAKed.
			f.remoteAccessError(h.SrcQPN, t)
			f.wireReply(from, h, t, wireNAK, uint8(prm.SyndromeRemoteAccess), 0, nil)
			return
		}
		data = m.bytes(h.RAddr+uint64(h.Off), uint64(h.Seg))
	case op.IsAtomic():
		var old [8]byte
		found := false
		// Newest first: a PSN comes round again every 2^24 requests,
		// and an atomic of a wrap before may still be remembered.
		for i := 1; i <= maxRdAtomic && !found; i++ {
			if a := &rs.atomics[(rs.atomicN-i+maxRdAtomic)%maxRdAtomic]; a.valid && a.psn == h.PSN {
				old = a.old
				found = true
			}
		}
		if !found || (h.ASize != 4 && h.ASize != 8) {
			return // forgotten: the requester times out
		}
		data = old[:h.ASize]
	}
	f.wireReply(from, h, t, wireAck, 0, 0, data)
}

// wireExecAtomic executes the atomic w on t's memory for the requester QP
// srcQPN, the value found going to old; it returns the bytes of the answer,
// or the syndrome of the NAK (an access error also raises t's event).
func (f *Fabric) wireExecAtomic(t *qp, srcQPN uint32, w *sendWQE, old *[8]byte) ([]byte, prm.Syndrome) {
	size := uint64(w.asize)
	if size != 4 && size != 8 {
		return nil, prm.SyndromeRemoteInvalReq
	}
	m := f.remoteMR(t, w.rkey, w.raddr, size, ctx.AccessRemoteAtomic)
	if m == nil {
		f.remoteAccessError(srcQPN, t)
		return nil, prm.SyndromeRemoteAccess
	}
	if w.raddr%size != 0 {
		return nil, f.misalignedAtomic(srcQPN, t)
	}
	atomicOp(w, m.bytes(w.raddr, size), old[:size])
	return old[:size], 0
}
