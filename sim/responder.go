package sim

import (
	"fmt"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

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

// peekRecv returns the next receive WQE of t without consuming it. The WQE
// is the Fabric's one scratch copy (recvScratch), valid until the next
// peekRecv: a round handles one receive at a time.
func (f *Fabric) peekRecv(t *qp) (*recvWQE, bool) {
	r := &f.recvScratch
	// A queue that looked empty when the round read its doorbell record
	// is read again, as a device reads the record when a message finds
	// no WQE: a receive posted before the send that meets it (the round
	// may have read the receiver's record before it, the sender's
	// after) is there for it.
	if s := t.srq; s != nil {
		if !s.closed && s.counter == s.consumed {
			f.scanSRQ(s)
		}
		if s.closed || s.counter == s.consumed {
			return nil, false
		}
		idx := s.hwHead & uint16(s.cnt-1)
		base := unsafe.Add(s.ring, uint32(idx)*s.stride)
		r.idx, r.srq, r.pd = idx, s, s.pd
		r.next = prm.Load16(unsafe.Add(base, prm.SRQNextWQEIndex)) & uint16(s.cnt-1)
		if bad := parseRecv(unsafe.Add(base, prm.SRQNextSize), int(s.maxSGE), r); bad != "" {
			f.violate(Violation{Kind: ViolationReceive, SRQN: s.srqn, Detail: fmt.Sprintf("SRQ WQE %d: %s", idx, bad)})
		}
		return r, true
	}
	if t.rqHead == t.rqCI {
		f.scanRQ(t)
	}
	if t.rqCnt == 0 || t.rqHead == t.rqCI {
		return nil, false
	}
	r.idx, r.srq, r.pd, r.next = t.rqCI, nil, t.pd, 0
	if bad := parseRecv(unsafe.Add(t.rq, (uint32(t.rqCI)&(t.rqCnt-1))*t.rqStride), int(t.rqMaxSGE), r); bad != "" {
		f.violate(Violation{Kind: ViolationReceive, QPN: t.qpn, WQEIndex: t.rqCI, Detail: "receive WQE: " + bad})
	}
	return r, true
}

// postedRecvs returns the receives posted to t (its SRQ's, or its RQ's)
// and not yet consumed, as the round last read them (peekRecv reads the
// doorbell again when it finds none).
func (f *Fabric) postedRecvs(t *qp) int {
	if s := t.srq; s != nil {
		if s.closed {
			return 0
		}
		return int(s.counter - s.consumed)
	}
	return int(t.rqHead - t.rqCI)
}

func (f *Fabric) consumeRecv(t *qp, r *recvWQE) {
	if r.srq != nil {
		r.srq.consumed++
		r.srq.hwHead = r.next
		r.srq.checkLimit()
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
		if !m.localWritable(r.pd, e.addr, n) {
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

// scatterRecvAt places data at byte off of the message in receive r's
// buffers (a segment of a SEND of several: wireServeSeg), checking every
// buffer it touches first, as scatterRecv does. It writes nothing unless
// all checks pass.
func (f *Fabric) scatterRecvAt(r *recvWQE, off uint64, data []byte) prm.Syndrome {
	if off+uint64(len(data)) > r.capacity() {
		return prm.SyndromeLocalLength
	}
	for pass := 0; pass < 2; pass++ {
		at, rest := off, data
		for _, e := range r.sg[:r.n] {
			if len(rest) == 0 {
				break
			}
			if at >= e.n {
				at -= e.n
				continue
			}
			n := min(e.n-at, uint64(len(rest)))
			m := f.mrs[e.lkey]
			if pass == 0 {
				if !m.localWritable(r.pd, e.addr+at, n) {
					return prm.SyndromeLocalProt
				}
			} else {
				copy(m.bytes(e.addr+at, n), rest[:n])
			}
			rest = rest[n:]
			at = 0
		}
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

// respCQE builds a responder completion in b, which must be zero. On an
// Ethernet port bits 25..24 of flags_rqpn carry the network header type
// where InfiniBand has SL (the SL of a RoCE packet travels in its VLAN
// tag, which the model does not have).
func respCQE(b *[prm.CQE64Size]byte, t *qp, r *recvWQE, op prm.CQEOpcode, byteCnt, imm uint32, src srcInfo, solicited bool, format uint8) {
	p := unsafe.Pointer(b)
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
}

// deliverSend places a SEND payload in the receive WQE r of t and writes
// the receive CQE. It returns the requester's syndrome (0 on success).
func (f *Fabric) deliverSend(q, t *qp, w *sendWQE, payload []byte, r *recvWQE, src srcInfo) prm.Syndrome {
	limit := 32
	format := uint8(prm.CQEFormatScatter32)
	if t.recvCQ.size == prm.CQE128Size {
		limit, format = 64, prm.CQEFormatScatter64
	}
	if t.scatterToCQE && len(payload) <= limit && len(payload) > 0 {
		f.consumeRecv(t, r)
		op, imm := sendRespOp(w.op, w.imm)
		var img [prm.CQE64Size]byte
		respCQE(&img, t, r, op, uint32(len(payload)), imm, src, w.fm&prm.FlagSolicited != 0, format)
		f.emitCQE(t.recvCQ, &img, payload, t)
		return 0
	}
	if s := f.scatterRecv(r, nil, 0, payload); s != 0 {
		return f.recvFailed(t, r, s)
	}
	f.consumeRecv(t, r)
	op, imm := sendRespOp(w.op, w.imm)
	var img [prm.CQE64Size]byte
	respCQE(&img, t, r, op, uint32(len(payload)), imm, src, w.fm&prm.FlagSolicited != 0, prm.CQEFormatNone)
	f.emitCQE(t.recvCQ, &img, nil, t)
	return 0
}

// sendRespOp returns the responder's CQE opcode of a SEND of opcode op,
// and the immediate (or invalidated rkey) its CQE carries: imm, or 0 for
// a plain SEND.
func sendRespOp(op prm.Opcode, imm uint32) (prm.CQEOpcode, uint32) {
	switch op {
	case prm.OpSendImm:
		return prm.CQERespSendImm, imm
	case prm.OpSendInval:
		return prm.CQERespSendInv, imm
	}
	return prm.CQERespSend, 0
}

// sendReceived writes the CQE of receive r of t, taken from its queue,
// into which a SEND of opcode op, flags fm and immediate imm placed n
// bytes.
func (f *Fabric) sendReceived(t *qp, r *recvWQE, op prm.Opcode, fm uint8, imm, n uint32, src srcInfo) {
	cop, imm := sendRespOp(op, imm)
	var img [prm.CQE64Size]byte
	respCQE(&img, t, r, cop, n, imm, src, fm&prm.FlagSolicited != 0, prm.CQEFormatNone)
	f.emitCQE(t.recvCQ, &img, nil, t)
}

// recvFailed completes receive r of t with error s (a message longer than
// it, LOCAL_LENGTH, or an SGE it may not write, LOCAL_PROT), moves an RC
// QP to the error state, and returns the syndrome of the requester's NAK.
//
// A UC QP stays in its state: a message too long for a receive of its own
// queue is dropped, the receive left posted; one too long for a receive
// of an SRQ, or one an SGE may not take, completes that receive in error
// (the IBA's classes of UC responder errors, as rxe_resp.c takes them).
func (f *Fabric) recvFailed(t *qp, r *recvWQE, s prm.Syndrome) prm.Syndrome {
	if t.uc && r.srq == nil && s == prm.SyndromeLocalLength {
		return s
	}
	f.consumeRecv(t, r)
	return f.recvError(t, r, s)
}

// recvError is recvFailed for a receive already taken from its queue: one
// a SEND of several segments took at its first (wireTake), which fails
// at a later one.
func (f *Fabric) recvError(t *qp, r *recvWQE, s prm.Syndrome) prm.Syndrome {
	img := errCQE(prm.CQERespErr, t.qpn, 0, r.idx, s, srqnOf(r))
	if t.typ == ctx.QPTypeRC && !t.uc {
		f.qpErrorLocked(t, "receive error")
	}
	f.emitCQE(t.recvCQ, &img, nil, t)
	if s == prm.SyndromeLocalLength {
		return prm.SyndromeRemoteInvalReq
	}
	return prm.SyndromeRemoteOp
}

func srqnOf(r *recvWQE) uint32 {
	if r.srq != nil {
		return r.srq.srqn
	}
	return 0
}
