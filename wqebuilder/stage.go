package wqebuilder

import (
	"encoding/binary"
	"math/bits"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// The stage methods are written for the Go inliner: each must stay under its
// budget (80 nodes) so that a whole post compiles to straight-line stores
// with the stage in registers. That rules out calls to functions that do not
// inline (57 nodes each); the error paths therefore only set bits, and
// Finish turns them into an error with one call off the hot path
// (SendQueue.failure). The stores are little-endian
// loads and stores of byte-swapped words: mlx5kit runs on amd64 and arm64.

// wqe is the state every stage carries: four machine words, so that the Go
// compiler keeps a stage in registers (SSA) through an inlined chain.
type wqe struct {
	q *SendQueue
	// ctrl is the control segment: the WQE's first WQEBB in the ring, or
	// the queue's scratch area when Begin found the queue full.
	ctrl unsafe.Pointer
	// seg is where the next segment goes (already wrapped to the ring start
	// where that can be needed), or, in an InlineStage, the inline header.
	seg unsafe.Pointer
	// st packs the rest, see the st* constants.
	st uint64
}

// Layout of wqe.st.
const (
	stDSMask   = 0xff // ds so far (16-byte units, ctrl included)
	stPoison   = 0x3f // ds forced to the 6-bit maximum after an error
	stErrShift = 8    // error bits (errInline, errTooLarge, errLimit)
	stErrMask  = 0xff << stErrShift
	// DataStage / ScatterStage: the data segments the WQE may still take
	// (its room), and in bits 31..28 which error running out of room is
	// (limitSGE or limitTooLarge; 0 after an SGE above MaxSGELength, which
	// clears both fields). sge adds stSGEStep: one more segment, one less
	// room.
	stRoomShift     = 16
	stRoomMask      = 0xff << stRoomShift
	stLimitErrShift = 28
	stLimitMask     = 0xffff << stRoomShift // room and limit error
	stSGEStep       = 1<<64 - 1<<stRoomShift + 1
	// InlineStage: the inline payload so far. AtomicStage: the byte count
	// of the result data segment. (DataStage.Inline clears the room; the
	// limit error stays for failure.)
	stAuxShift = 16
	stAuxMask  = 0xfff << stAuxShift
	// The opcode sits in bits 39..32 and the opmod in bits 63..56; commit
	// adds the 16-bit WQE index in bits 55..40, so that uint32(st>>32) is
	// the opmod_idx_opcode word. Until then the state word of a stage is
	// the same on every post of the same operation, which lets the compiler
	// fold it into constants.
	stOpShift    = 32
	stIndexShift = stOpShift + prm.CtrlWQEIndexShift
)

// The limit errors of stLimitErrShift.
const (
	limitSGE      = 1 // MaxSGE data segments
	limitTooLarge = 2 // the WQE reached MaxWQEBBs
)

// CtrlStage is a WQE whose control segment has begun. DC and UD WQEs give
// their address next (DC, DCStream, UD); RC WQEs go straight to the
// operation (the methods of the embedded OpStage).
type CtrlStage struct{ OpStage }

// OpStage is a WQE ready for its operation: one of its methods picks the
// opcode and writes the remote-address or atomic segments.
type OpStage struct{ w wqe }

// DatagramStage is a UD WQE with its address vector: UD only sends.
type DatagramStage struct{ w wqe }

// DataStage takes the payload of SEND and RDMA_WRITE opcodes: data segments
// (SGE) and then, optionally, inline data (Inline).
type DataStage struct{ w wqe }

// ScatterStage takes the local buffers an RDMA_READ fills: data segments
// only.
type ScatterStage struct{ w wqe }

// InlineStage is a WQE with an inline data segment open: more Inline calls
// append to the same segment (as rdma-core copies several SGEs inline).
type InlineStage struct{ w wqe }

// AtomicStage is an atomic WQE waiting for the local buffer of the old value.
type AtomicStage struct{ w wqe }

// FinishStage is a complete WQE (NOP, or an atomic with its result buffer).
type FinishStage struct{ w wqe }

// Address stages. The 48-byte address vector sits right after the control
// segment and fills the first WQEBB, so it never wraps; the segment after it
// starts the next WQEBB, which may be the ring's first.

// DC addresses a DC WQE: av is the path part of the address vector (bytes
// 12..48 are used, as an address handle holds them; see
// ctx.AddressHandle.AV), dctn the remote DCT number and dcKey its DC access
// key, as mlx5dv_wr_set_dc_addr. The low 24 bits of dctn are written (a
// check would take DCStream past the inlining budget); package dc refuses
// a wider number when the remote is made.
func (s CtrlStage) DC(av *[prm.AVSize]byte, dctn uint32, dcKey uint64) OpStage {
	return OpStage{s.w.av(av, bits.ReverseBytes64(dcKey), dctn)}
}

// DCStream is DC with a DCI stream channel id in the control segment
// (mlx5dv_wr_set_dc_addr_stream), for a DCI created with DCI streams
// (MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS) and an id below its number of
// stream channels. On a DCI without streams, as package dc creates, no
// id but 0 is defined.
func (s CtrlStage) DCStream(av *[prm.AVSize]byte, dctn uint32, dcKey uint64, streamID uint16) OpStage {
	// Bytes 9..10 of the control segment, big-endian.
	*(*[2]byte)(unsafe.Add(s.w.ctrl, prm.CtrlDCIStreamID)) = [2]byte{byte(streamID >> 8), byte(streamID)}
	return OpStage{s.w.av(av, bits.ReverseBytes64(dcKey), dctn)}
}

// UD addresses a UD WQE: av is the path part of the address vector,
// remoteQPN and qkey the destination queue pair and its Q_Key, as rdma-core's
// set_datagram_seg. The low 24 bits of remoteQPN are written, as for DC;
// package ud refuses a wider number.
func (s CtrlStage) UD(av *[prm.AVSize]byte, remoteQPN, qkey uint32) DatagramStage {
	// The qkey, then its reserved word cleared.
	return DatagramStage{s.w.av(av, uint64(bits.ReverseBytes32(qkey)), remoteQPN)}
}

// avLayout is struct mlx5_wqe_av as the stages write it: the key, the
// destination word and the path part that comes from the address handle.
type avLayout struct {
	key  uint64
	dqp  uint32
	path [prm.AVSize - prm.AVStatRateSL]byte
}

// av writes the address vector: key (bytes 0..8, already in wire order), the
// extended-AV bit with the remote QPN or DCT number (its low 24 bits, so
// that wider ones never reach the flags byte), then bytes 12..48 copied
// from the handle. It adds the three segments and moves on to the next
// WQEBB.
func (w wqe) av(av *[prm.AVSize]byte, key uint64, dqp uint32) wqe {
	d := (*avLayout)(unsafe.Add(w.ctrl, prm.CtrlSize))
	d.key = key
	d.dqp = bits.ReverseBytes32(dqp&prm.AVDQPNMask | prm.ExtendedUDAV)
	d.path = (*avLayout)(unsafe.Pointer(av)).path
	w.st += prm.AVSegments
	w.seg = unsafe.Add(w.ctrl, prm.WQEBBSize)
	if w.seg == w.q.end {
		w.seg = w.q.buf
	}
	return w
}

// Send makes the UD WQE a SEND.
func (s DatagramStage) Send() DataStage {
	return DataStage{s.w.data(prm.OpSend)}
}

// SendImm makes the UD WQE a SEND with immediate data; imm arrives in the
// receiver's CQE as the same number.
func (s DatagramStage) SendImm(imm uint32) DataStage {
	*(*uint32)(unsafe.Add(s.w.ctrl, prm.CtrlImm)) = bits.ReverseBytes32(imm)
	return DataStage{s.w.data(prm.OpSendImm)}
}

// data sets the opcode of a WQE whose payload follows now and bounds its
// data segments.
func (w wqe) data(op prm.Opcode) wqe {
	w.st |= uint64(op)<<stOpShift | w.q.sgeLimit[w.st&7]
	return w
}

// Operations.

// Nop makes the WQE a NOP: a control segment only. It still completes when
// signaled, retiring the WQEs before it.
func (s OpStage) Nop() FinishStage {
	s.w.st |= uint64(prm.OpNop) << stOpShift
	return FinishStage(s)
}

// Send makes the WQE a SEND.
func (s OpStage) Send() DataStage {
	return DataStage{s.w.data(prm.OpSend)}
}

// SendImm makes the WQE a SEND with immediate data; imm arrives in the
// receiver's CQE as the same number.
func (s OpStage) SendImm(imm uint32) DataStage {
	*(*uint32)(unsafe.Add(s.w.ctrl, prm.CtrlImm)) = bits.ReverseBytes32(imm)
	return DataStage{s.w.data(prm.OpSendImm)}
}

// SendInv makes the WQE a SEND that invalidates rkey at the receiver.
func (s OpStage) SendInv(rkey uint32) DataStage {
	*(*uint32)(unsafe.Add(s.w.ctrl, prm.CtrlImm)) = bits.ReverseBytes32(rkey)
	return DataStage{s.w.data(prm.OpSendInval)}
}

// raddr writes the remote address segment (reserved word cleared).
func (w wqe) raddr(raddr uint64, rkey uint32) wqe {
	*(*[2]uint64)(w.seg) = [2]uint64{bits.ReverseBytes64(raddr), uint64(bits.ReverseBytes32(rkey))}
	w.seg = unsafe.Add(w.seg, prm.RaddrSize)
	w.st++
	return w
}

// RdmaWrite makes the WQE an RDMA_WRITE to raddr in the remote region rkey.
func (s OpStage) RdmaWrite(raddr uint64, rkey uint32) DataStage {
	return DataStage{s.w.raddr(raddr, rkey).data(prm.OpRdmaWrite)}
}

// RdmaWriteImm makes the WQE an RDMA_WRITE with immediate data, which
// consumes a receive WQE at the remote end and arrives in its CQE.
func (s OpStage) RdmaWriteImm(raddr uint64, rkey uint32, imm uint32) DataStage {
	*(*uint32)(unsafe.Add(s.w.ctrl, prm.CtrlImm)) = bits.ReverseBytes32(imm)
	return DataStage{s.w.raddr(raddr, rkey).data(prm.OpRdmaWriteImm)}
}

// RdmaRead makes the WQE an RDMA_READ from raddr in the remote region rkey
// into the local buffers given next.
func (s OpStage) RdmaRead(raddr uint64, rkey uint32) ScatterStage {
	return ScatterStage{s.w.raddr(raddr, rkey).data(prm.OpRdmaRead)}
}

// atomic writes the remote address segment and a 16-byte atomic segment of
// the big-endian words a and b, and records the opcode and result size.
func (w wqe) atomic(op uint64, raddr uint64, rkey uint32, a, b uint64) wqe {
	*(*[4]uint64)(w.seg) = [4]uint64{bits.ReverseBytes64(raddr), uint64(bits.ReverseBytes32(rkey)),
		bits.ReverseBytes64(a), bits.ReverseBytes64(b)}
	w.seg = unsafe.Add(w.seg, prm.RaddrSize+prm.AtomicSize)
	w.st = w.st + 2 | op
	return w
}

// Operation words for atomic: opcode, opmod and result byte count.
const (
	atomicCS   = uint64(prm.OpAtomicCS)<<stOpShift | prm.AtomicResultSize<<stAuxShift
	atomicFA   = uint64(prm.OpAtomicFA)<<stOpShift | prm.AtomicResultSize<<stAuxShift
	maskedCS32 = uint64(prm.OpAtomicMaskedCS)<<stOpShift | prm.OpmodMaskedAtomic32<<(stOpShift+prm.CtrlOpmodShift) | 4<<stAuxShift
	maskedFA32 = uint64(prm.OpAtomicMaskedFA)<<stOpShift | prm.OpmodMaskedAtomic32<<(stOpShift+prm.CtrlOpmodShift) | 4<<stAuxShift
	maskedCS64 = uint64(prm.OpAtomicMaskedCS)<<stOpShift | prm.OpmodMaskedAtomic64<<(stOpShift+prm.CtrlOpmodShift) | 8<<stAuxShift
	maskedFA64 = uint64(prm.OpAtomicMaskedFA)<<stOpShift | prm.OpmodMaskedAtomic64<<(stOpShift+prm.CtrlOpmodShift) | 8<<stAuxShift
)

// AtomicCS makes the WQE an 8-byte compare-and-swap at raddr: if the remote
// value equals compare it becomes swap. The old value lands in the buffer
// given to Result. On a device that reports no atomics
// (ctx.DeviceAttr.AtomicHCA false) the WQE completes with an error: the
// post does not refuse it as libmlx5's does (see the package
// documentation, Errors); nor does it refuse AtomicFA or the masked atomics.
func (s OpStage) AtomicCS(raddr uint64, rkey uint32, compare, swap uint64) AtomicStage {
	return AtomicStage{s.w.atomic(atomicCS, raddr, rkey, swap, compare)}
}

// AtomicFA makes the WQE an 8-byte fetch-and-add of add at raddr. The old
// value lands in the buffer given to Result. (The unused compare field is
// written as zero.)
func (s OpStage) AtomicFA(raddr uint64, rkey uint32, add uint64) AtomicStage {
	return AtomicStage{s.w.atomic(atomicFA, raddr, rkey, add, 0)}
}

// MaskedCS32 makes the WQE a 4-byte masked compare-and-swap: the bits of
// compareMask are compared with compare, and on a match the bits of swapMask
// are replaced by those of swap.
func (s OpStage) MaskedCS32(raddr uint64, rkey uint32, compare, swap, compareMask, swapMask uint32) AtomicStage {
	return AtomicStage{s.w.atomic(maskedCS32, raddr, rkey,
		uint64(swap)<<32|uint64(compare), uint64(swapMask)<<32|uint64(compareMask))}
}

// MaskedFA32 makes the WQE a 4-byte masked fetch-and-add: a set bit of
// fieldBoundary stops the carry out of that bit, so one add updates several
// independent fields.
func (s OpStage) MaskedFA32(raddr uint64, rkey uint32, add, fieldBoundary uint32) AtomicStage {
	return AtomicStage{s.w.atomic(maskedFA32, raddr, rkey, uint64(add)<<32|uint64(fieldBoundary), 0)}
}

// MaskedCS64 makes the WQE an 8-byte masked compare-and-swap (two atomic
// segments: swap and compare, then swapMask and compareMask).
func (s OpStage) MaskedCS64(raddr uint64, rkey uint32, compare, swap, compareMask, swapMask uint64) AtomicStage {
	// The three segments stay in one WQEBB: the remote address segment
	// starts 16 bytes (RC) or 0 bytes (DC) into a WQEBB.
	*(*[4]uint64)(s.w.seg) = [4]uint64{bits.ReverseBytes64(raddr), uint64(bits.ReverseBytes32(rkey)),
		bits.ReverseBytes64(swap), bits.ReverseBytes64(compare)}
	*(*[2]uint64)(unsafe.Add(s.w.seg, 32)) = [2]uint64{bits.ReverseBytes64(swapMask), bits.ReverseBytes64(compareMask)}
	s.w.seg = unsafe.Add(s.w.seg, prm.RaddrSize+prm.MaskedCS64Size)
	s.w.st = s.w.st + 3 | maskedCS64
	return AtomicStage(s)
}

// MaskedFA64 makes the WQE an 8-byte masked fetch-and-add.
func (s OpStage) MaskedFA64(raddr uint64, rkey uint32, add, fieldBoundary uint64) AtomicStage {
	return AtomicStage{s.w.atomic(maskedFA64, raddr, rkey, add, fieldBoundary)}
}

// Result gives the local buffer (addr in the memory region lkey) that
// receives the remote value from before the atomic: 8 bytes in host byte
// order, or 4 big-endian for a 4-byte masked atomic.
func (s AtomicStage) Result(addr uint64, lkey uint32) FinishStage {
	w := s.w
	if w.seg == w.q.end {
		w.seg = w.q.buf
	}
	*(*[2]uint64)(w.seg) = [2]uint64{bits.ReverseBytes64(w.st&stAuxMask<<(32-stAuxShift) | uint64(lkey)), bits.ReverseBytes64(addr)}
	w.seg = unsafe.Add(w.seg, prm.DataSize)
	w.st++
	return FinishStage{w}
}

// Payload.

// sge appends a data segment, or records the error when the WQE has no room
// for one more (and from then on writes nothing: the room stays 0).
func (w wqe) sge(addr uint64, length, lkey uint32) wqe {
	// The refusal is the then-branch so that the compiler lays the common
	// case out as the fall-through into what follows, with no jump back.
	if w.st&stRoomMask == 0 {
		// Which limit it was, failure reads from the limit error bits.
		w.st |= errLimit << stErrShift
	} else {
		if w.seg == w.q.end {
			w.seg = w.q.buf
		}
		*(*[2]uint64)(w.seg) = [2]uint64{bits.ReverseBytes64(uint64(length)<<32 | uint64(lkey)), bits.ReverseBytes64(addr)}
		w.seg = unsafe.Add(w.seg, prm.DataSize)
		w.st += stSGEStep
	}
	return w
}

// SGE appends a data segment for length bytes at addr in the memory region
// lkey. A zero length adds nothing (rdma-core skips such entries: to the
// device a zero byte count means 2 GiB). A length above MaxSGELength (bit
// 31 set, the inline flag of the byte count: the device would send the
// segment's own lkey and address as inline payload) fails the WQE with
// ErrSGETooLong.
func (s DataStage) SGE(addr uint64, length, lkey uint32) DataStage {
	// One signed test takes both rare cases off the common path: zero, and
	// bit 31 set, which takes the WQE's room and limit error away, so that
	// sge refuses this segment and every later one and failure reports
	// ErrSGETooLong.
	if int32(length) <= 0 {
		if length == 0 {
			return s
		}
		s.w.st &^= stLimitMask
	}
	return DataStage{s.w.sge(addr, length, lkey)}
}

// SGE appends a data segment that receives length bytes at addr in the
// memory region lkey. A zero length adds nothing; a length above
// MaxSGELength fails the WQE with ErrSGETooLong (see DataStage.SGE).
func (s ScatterStage) SGE(addr uint64, length, lkey uint32) ScatterStage {
	if int32(length) <= 0 {
		if length == 0 {
			return s
		}
		s.w.st &^= stLimitMask
	}
	return ScatterStage{s.w.sge(addr, length, lkey)}
}

// Inline opens an inline data segment carrying b in the WQE itself (no
// memory region needed; at most MaxInline bytes in all). Empty data adds no
// segment.
func (s DataStage) Inline(b []byte) InlineStage {
	s.w.seg, s.w.st = appendInline(s.w.q, s.w.seg, s.w.st&^stAuxMask, b)
	return InlineStage(s)
}

// Inline appends b to the open inline segment.
func (s InlineStage) Inline(b []byte) InlineStage {
	s.w.seg, s.w.st = appendInline(s.w.q, s.w.seg, s.w.st, b)
	return s
}

func inlineDS(n uint32) uint32 {
	if n == 0 {
		return 0
	}
	return (prm.InlineHeaderSize + n + prm.SegmentSize - 1) / prm.SegmentSize
}

// appendInline adds b to the inline segment whose header is at hdr (wrapped
// to the ring start first if it is at the ring end) and returns the header
// position and the new state word. It writes nothing once the WQE has
// failed, so hdr is in the ring whenever it writes.
func appendInline(q *SendQueue, hdr unsafe.Pointer, st uint64, b []byte) (unsafe.Pointer, uint64) {
	if hdr == q.end {
		hdr = q.buf
	}
	// Nothing is written once the WQE has failed, nor outside the ring: a
	// WQE begun on a full queue has its segments in the scratch area, which
	// the wrap below would not keep to.
	if len(b) == 0 || st&stErrMask != 0 || uintptr(hdr)-uintptr(q.buf) >= uintptr(q.end)-uintptr(q.buf) {
		return hdr, st
	}
	old := uint32(st>>stAuxShift) & 0xfff
	if uint(len(b)) > uint(q.maxInl-old) {
		return hdr, st | errInline<<stErrShift | stPoison
	}
	n := uint32(len(b))
	total := old + n
	ds := uint32(st)&stDSMask - inlineDS(old) + inlineDS(total)
	if ds > q.maxDS {
		return hdr, st | errTooLarge<<stErrShift | stPoison
	}
	prm.Store32(hdr, total|prm.InlineSeg)
	pos := uintptr(hdr) + prm.InlineHeaderSize + uintptr(old)
	if pos >= uintptr(q.end) {
		pos -= uintptr(q.end) - uintptr(q.buf)
	}
	dst := unsafe.Add(hdr, pos-uintptr(hdr))
	room := uintptr(q.end) - pos
	st = st&^(stDSMask|stAuxMask) | uint64(ds) | uint64(total)<<stAuxShift
	// Up to 32 bytes that do not wrap, the common case of inline data, b
	// moves in 8- or 4-byte loads and stores from both of its ends (they
	// overlap when its length is not a multiple), with no call. Longer
	// data and data that wraps go through copyInline, out of line, so
	// that this path saves no registers for its calls.
	m := len(b)
	if m > 32 || uintptr(m) > room {
		copyInline(q, dst, room, b)
		return hdr, st
	}
	d := unsafe.Slice((*byte)(dst), m)
	switch le := binary.LittleEndian; {
	case m >= 16:
		h0, h1 := le.Uint64(b), le.Uint64(b[8:])
		t0, t1 := le.Uint64(b[m-16:]), le.Uint64(b[m-8:])
		le.PutUint64(d, h0)
		le.PutUint64(d[8:], h1)
		le.PutUint64(d[m-16:], t0)
		le.PutUint64(d[m-8:], t1)
	case m >= 8:
		h, t := le.Uint64(b), le.Uint64(b[m-8:])
		le.PutUint64(d, h)
		le.PutUint64(d[m-8:], t)
	case m >= 4:
		h, t := le.Uint32(b), le.Uint32(b[m-4:])
		le.PutUint32(d, h)
		le.PutUint32(d[m-4:], t)
	case m > 0: // 1 to 3 bytes: the first, the middle and the last
		d[0], d[m/2], d[m-1] = b[0], b[m/2], b[m-1]
	}
	return hdr, st
}

// copyInline copies b to dst in the ring of q, where room bytes are left
// before the ring end: the rest continues at the ring start.
//
//go:noinline
func copyInline(q *SendQueue, dst unsafe.Pointer, room uintptr, b []byte) {
	if uintptr(len(b)) <= room {
		copy(unsafe.Slice((*byte)(dst), len(b)), b)
		return
	}
	copy(unsafe.Slice((*byte)(dst), room), b)
	copy(unsafe.Slice((*byte)(q.buf), uintptr(len(b))-room), b[room:])
}

// Finishing.

// Finishing is split in steps that each inline: refused (the checks) and
// failure (the error), blueFlameBytes, commit (control segment, producer
// index, bookkeeping). Finish and FinishBlueFlame both run them through
// finish, inside a closure that it calls at once: the compiler inlines a
// closure called once under a larger budget than a function's (as monocq's
// Poll does), so that the whole post, up to the call into the BlueFlame
// assembly for FinishBlueFlame, compiles into the caller.
// TestStageMethodsInline, TestFinishInlinesAtCallSite and
// TestFinishBlueFlameInlinesAtCallSite check that they do.

// refused reports whether the WQE must not be finished: a stage recorded
// an error, or its control segment is not the one the last Begin opened in
// the ring: it was begun on a full queue (its control segment is in the
// scratch area), or it is stale (the stage, or a copy of it, was finished
// already, or another stage begun at the same index finished first), or
// the queue was closed, or it counts (countingBit: finishFlagged then
// finishes it). failure says which. The closed word shares its cache line
// with the indexes commit reads next.
func (w wqe) refused() bool {
	return w.st&stErrMask != 0 || uintptr(w.ctrl) != w.q.open || w.q.closed.Load() != 0
}

// failure is the error of a WQE that refused turned down (see
// SendQueue.failure, a call: refused posts are rare).
func (w wqe) failure() error { return w.q.failure(w.ctrl, w.st) }

// blueFlameBytes returns the bytes a BlueFlame post of this WQE copies: the
// whole WQE when it is the only one pending (alone: the doorbell record held
// the producer index before commit moved it) and is larger than its control
// segment, else 0 (the 8-byte doorbell); the register's size check is the
// assembly's. That is rdma-core's rule with MLX5_POST_SEND_PREFER_BF set,
// and UCX's: rdma-core by default copies only WQEs that carry inline data.
// finish reads alone before commit and calls this after it, next to the
// call into the assembly: the byte count is then computed from the state
// word in the register it is already in (seven instructions fewer in
// PostPoll than computing it before commit, where the compiler kept the
// count and the segment count in two registers and swapped them).
func (w wqe) blueFlameBytes(alone bool) int {
	n := int(w.st&stDSMask) * prm.SegmentSize
	if !alone || n <= prm.CtrlSize {
		n = 0
	}
	return n
}

// commit writes the first half of the control segment (opcode, WQE index,
// QPN, ds), moves the producer index and records the WQE's end and wrid for
// Complete. It returns the new producer index, which saves a caller the
// reload (the compiler cannot tell that the record store left q.pi alone).
// Its callers then close the open WQE (q.open = 0), which does not fit the
// inliner's budget for commit.
func (w wqe) commit() uint64 {
	q := w.q
	pi := q.pi
	// opmod | index | opcode over qpn | ds, before the byte swap.
	word := bits.ReverseBytes64(w.st&ctrlWordMask | uint64(uint16(pi))<<stIndexShift | q.qpn8)
	*(*uint64)(w.ctrl) = word
	// The doorbell of a batch is these 8 bytes of its last WQE. Kept as a
	// number: a pointer store here would cost a GC write barrier check.
	q.lastDB = word
	end := pi + (w.st&stDSMask+prm.SegmentsPerWQEBB-1)/prm.SegmentsPerWQEBB
	q.pi = end
	*(*record)(unsafe.Add(q.records, uintptr(pi)&uintptr(q.mask)*recordSize)) = record{end, q.wrid}
	return end
}

// ctrlWordMask keeps the opcode, the opmod and ds of a state word (and the
// WQE index bits, which commit fills in).
const ctrlWordMask = 0xffffffff_000000ff

// finish is the body of every Finish (post false: the checks and commit,
// the WQE in the ring and not yet published) and every FinishBlueFlame
// (post true: the same and the BlueFlame post). The work sits in a closure
// called once: the inliner prices a closure of more than twice its budget
// as a call when it sizes finish, and then inlines it at its one call site
// under the larger budget of a closure called once, so that a whole Finish
// or FinishBlueFlame compiles into its caller with post a constant, down to
// the one call into the BlueFlame assembly
// (TestFinishBlueFlameInlinesAtCallSite, TestFinishInlinesAtCallSite).
func (w wqe) finish(post bool) error {
	return func() error {
		if w.refused() {
			return w.finishFlagged(post)
		}
		q := w.q
		// !q.Pending(), read before commit moves pi; written out, since the
		// inlined call would leave a NOP in every post.
		alone := q.rung == q.pi
		pi := w.commit()
		q.open = 0
		if post {
			q.rung = pi
			q.db.Post(uint32(pi), w.ctrl, w.blueFlameBytes(alone))
		}
		return nil
	}()
}

// Finish completes the WQE: it writes the control segment and moves the
// producer index, or returns the WQE's first error (a *PostError wrapping
// ErrQueueFull, ErrInlineTooLong, ErrSGETooLong, ErrTooManySGE or
// ErrWQETooLarge, or ErrStaleStage for a stage finished already; an SGE
// above MaxSGELength is reported even after a limit error), in which case
// nothing moved.
// The device sees the WQE at the next RingDoorbell or FinishBlueFlame.
func (s DataStage) Finish() error { return s.w.finish(false) }

// FinishBlueFlame is Finish followed by the doorbell, with the WQE copied to
// the BlueFlame register when it is the only one pending.
func (s DataStage) FinishBlueFlame() error {
	return s.w.finish(true)
}

// Finish completes the WQE (see DataStage.Finish).
func (s ScatterStage) Finish() error { return s.w.finish(false) }

// FinishBlueFlame is Finish and the doorbell (see DataStage.FinishBlueFlame).
func (s ScatterStage) FinishBlueFlame() error {
	return s.w.finish(true)
}

// Finish completes the WQE (see DataStage.Finish).
func (s InlineStage) Finish() error { return s.w.finish(false) }

// FinishBlueFlame is Finish and the doorbell (see DataStage.FinishBlueFlame).
func (s InlineStage) FinishBlueFlame() error {
	return s.w.finish(true)
}

// Finish completes the WQE (see DataStage.Finish).
func (s FinishStage) Finish() error { return s.w.finish(false) }

// FinishBlueFlame is Finish and the doorbell (see DataStage.FinishBlueFlame).
func (s FinishStage) FinishBlueFlame() error {
	return s.w.finish(true)
}
