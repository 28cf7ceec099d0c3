package transport

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/blueflame"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// recvRing is the producer side of a receive ring: a QP's own receive
// queue, or a shared receive queue. Both are written the same way (data
// segments, an InvalidLKey terminator when the list is short, a store
// barrier, the big-endian counter in doorbell record word 0, no MMIO); they
// differ in how a slot is chosen and given back.
//
//	RQ:  slots in order; head and tail free-running; slot = head & mask.
//	SRQ: a free list linked by each WQE's next_wqe_index; slot = head;
//	     head == tail means full; a completed slot is linked after tail.
type recvRing struct {
	buf   unsafe.Pointer
	dbrec unsafe.Pointer
	wrid  unsafe.Pointer // [cnt]uint64
	mask  uint32         // cnt - 1
	// closed is 1 once the QP or SRQ closed (from any goroutine): Finish
	// refuses every stage then. It sits in the padding after mask.
	closed atomic.Uint32
	// stride is the bytes per WQE, a power of two. Slot addresses multiply
	// by it: one instruction, where a shift by a variable count compiles
	// with Go's guard for counts of 64 and more.
	stride uintptr
	srq    bool
	maxSGE uint32 // data segments per WQE
	// segs is slot 0's first data segment: buf, or for an SRQ the byte
	// after its next segment.
	segs unsafe.Pointer

	head    uint32 // RQ: WQEs posted, free-running. SRQ: the free slot to post next.
	tail    uint32 // RQ: WQEs completed, free-running. SRQ: the last free slot.
	counter uint32 // WQEs posted, free-running (the doorbell value)
	rung    uint32 // counter as last written to the doorbell record
	posted  uint32 // WQEs posted and not completed

	// open is the first data segment of the stage the last begin started,
	// until a Finish posts it; 0 otherwise. A number, not a pointer:
	// storing it costs no GC write barrier.
	open uintptr

	// The errors Finish returns, built by the owner with its transport
	// name and QPN so that returning one allocates nothing.
	errFull, errSGE, errLength, errStale error
	// refusal is the owner's reason to refuse a post now: closed, error
	// state, no receive queue, full. Finish asks it for a stage that
	// BeginRecv refused, out of line.
	refusal func() error

	wridMem []uint64
	// SRQ: busy[slot] says the slot holds a posted WQE. A pointer to
	// busyMem's array, as wrid is to wridMem's: the slots are masked or
	// checked already, and a slice index would check them again.
	busy    unsafe.Pointer // [cnt]bool
	busyMem []bool
	// memory owns buf and dbrec (the descriptor's Memory): a stage kept
	// across Close writes to memory that is still mapped.
	memory any
}

func newRecvRing(buf, dbrec unsafe.Pointer, cnt, stride, maxSGE uint32, srq bool, head, tail uint32) (*recvRing, error) {
	switch {
	case buf == nil || dbrec == nil:
		return nil, fmt.Errorf("nil ring or doorbell record: %w", ctx.ErrInvalidArgument)
	case cnt == 0 || cnt > 1<<16 || cnt&(cnt-1) != 0:
		return nil, fmt.Errorf("%d entries is not a power of two up to 65536: %w", cnt, ctx.ErrInvalidArgument)
	case stride < prm.DataSize || stride&(stride-1) != 0:
		return nil, fmt.Errorf("stride %d is not a power of two of at least %d: %w", stride, prm.DataSize, ctx.ErrInvalidArgument)
	}
	r := &recvRing{
		buf:     buf,
		segs:    buf,
		dbrec:   dbrec,
		mask:    cnt - 1,
		stride:  uintptr(stride),
		srq:     srq,
		wridMem: make([]uint64, cnt),
	}
	room := stride
	if srq {
		if stride < prm.SRQNextSize+prm.DataSize || head > r.mask || tail > r.mask {
			return nil, fmt.Errorf("SRQ stride %d, head %d, tail %d: %w", stride, head, tail, ctx.ErrInvalidArgument)
		}
		r.segs = unsafe.Add(buf, prm.SRQNextSize)
		room -= prm.SRQNextSize
		r.head, r.tail = head, tail
		r.busyMem = make([]bool, cnt)
		r.busy = unsafe.Pointer(&r.busyMem[0])
	}
	r.maxSGE = room / prm.DataSize
	if maxSGE != 0 && maxSGE < r.maxSGE {
		r.maxSGE = maxSGE
	}
	r.wrid = unsafe.Pointer(&r.wridMem[0])
	return r, nil
}

// The error bits, kept in RecvStage.st from bit recvErrShift, of a stage
// whose SGE refused an entry: recvErrSGE for too many, or a stale (or
// refused) stage; recvErrLength for one above wqebuilder.MaxSGELength.
const (
	recvErrSGE    = 1
	recvErrLength = 2
)

// RecvStage.st holds the data segments written in its low 32 bits and the
// error bits from recvErrShift. An error sets the low 32 bits to
// recvRefuseAll, more than any max SGE, so that every later SGE is refused
// by the same test as one too many.
const (
	recvErrShift  = 32
	recvRefuseAll = 0xffffffff
)

// RecvStage is a receive WQE being built: SGE adds scatter entries and
// Finish posts it. Like the send stages it is a small value that the
// compiler keeps in registers through an inlined chain; an error (queue
// full, too many entries, a refused queue, a stage finished already) is
// kept in the stage and returned by Finish. A failed stage is never posted
// and writes nothing outside the one free slot it was given (nothing at all
// when the queue was full or refused).
//
// One receive WQE is built at a time per queue: a BeginRecv (or PostRecv)
// before the last stage was finished takes the same free slot. Once the
// newer stage is finished, the older stage's Finish is refused with
// wqebuilder.ErrStaleStage, as is a second Finish of the same stage; but
// an older stage finished first posts the slot as the newer one has
// written it, under the older stage's wrid (the two are told apart only
// by their slot, which keeps BeginRecv within the inlining budget; for
// the same reason a stage kept until the ring comes round to its slot is
// taken as the one open there).
// Finish or drop a stage before beginning the next.
type RecvStage struct {
	r     *recvRing
	first unsafe.Pointer // the first data segment: the ring's open stage while this is it; refusedStage for a refused post
	wrid  uint64
	st    uint64 // data segments written | error bits << recvErrShift
}

// begin starts a receive WQE in the slot the next post writes, which the
// caller checked is free (an SRQ's head is a slot already; masking it
// changes nothing), and makes it the open stage.
func (r *recvRing) begin(wrid uint64) RecvStage {
	first := unsafe.Add(r.segs, uintptr(r.head&r.mask)*r.stride)
	r.open = uintptr(first)
	return RecvStage{r: r, first: first, wrid: wrid}
}

// refusedStage is the first data segment of every stage BeginRecv refused:
// an address outside every ring, so that such a stage is never the open
// one (SGE writes nothing, Finish posts nothing), and error tells it from a
// stale stage.
var refusedStage = unsafe.Pointer(new(uint64))

// refuse returns a stage that writes nothing and whose Finish returns the
// owner's refusal. Its state word is 0, as a stage begin returns: a post
// that inlines both paths folds its segment count into constants.
func (r *recvRing) refuse() RecvStage {
	return RecvStage{r: r, first: refusedStage}
}

// SGE appends a scatter entry: length bytes at addr in the memory region
// lkey. A zero length adds nothing (rdma-core skips such entries: a zero
// byte count means 2 GiB to the device); a length above MaxSGELength (bit
// 31 of the byte count set) is refused with wqebuilder.ErrSGETooLong. A stage that is
// no longer the open one writes nothing: its slot may be posted already;
// nor does one that has refused an entry, even if its slot is open again
// later.
func (s RecvStage) SGE(addr uint64, length, lkey uint32) RecvStage {
	if int32(length) <= 0 {
		if length == 0 {
			return s
		}
		s.st |= recvErrLength<<recvErrShift | recvRefuseAll
	}
	if uint32(s.st) >= s.r.maxSGE || uintptr(s.first) != s.r.open {
		// Too many entries, a refused one, or a stale or refused stage:
		// error tells which.
		s.st |= recvErrSGE<<recvErrShift | recvRefuseAll
		return s
	}
	seg := s.next()
	*(*uint64)(seg) = bits.ReverseBytes64(uint64(length)<<32 | uint64(lkey))
	*(*uint64)(unsafe.Add(seg, prm.DataAddr)) = bits.ReverseBytes64(addr)
	s.st++
	return s
}

// next is where the stage's next data segment goes.
func (s RecvStage) next() unsafe.Pointer {
	return unsafe.Add(s.first, uintptr(uint32(s.st))*prm.DataSize)
}

// Finish posts the WQE: it writes the terminator when the list is shorter
// than the queue's max SGE and moves the producer. The device sees it at
// the next RingRecvDoorbell (or FinishDoorbell). It compiles into the
// caller, with a call only for a stage that cannot be posted.
func (s RecvStage) Finish() error { return s.finish(false) }

// FinishDoorbell is Finish followed by the receive doorbell. It compiles
// into the caller, with a call only for the store barrier and for a stage
// that cannot be posted.
func (s RecvStage) FinishDoorbell() error { return s.finish(true) }

// finish is the body of Finish (ring false) and FinishDoorbell (ring
// true), in a closure called once so that it compiles into the caller
// whole, as a send WQE's finish does.
func (s RecvStage) finish(ring bool) error {
	return func() error {
		r := s.r
		if s.st>>recvErrShift != 0 || uintptr(s.first) != r.open || r.closed.Load() != 0 {
			return s.error()
		}
		r.terminate(s.next(), uint32(s.st))
		if r.srq {
			r.advanceSRQ(s.wrid)
		} else {
			r.advanceRQ(s.wrid)
		}
		if ring {
			r.ring()
		}
		return nil
	}()
}

// terminate ends a scatter list of n entries, the next of which would go
// at seg, with the InvalidLKey entry when n is short of the max SGE.
func (r *recvRing) terminate(seg unsafe.Pointer, n uint32) {
	if n < r.maxSGE {
		*(*uint64)(seg) = bits.ReverseBytes64(prm.InvalidLKey)
		*(*uint64)(unsafe.Add(seg, prm.DataAddr)) = 0
	}
}

// advanceRQ records wrid for the RQ slot just written, moves the producer
// on and closes the open stage.
func (r *recvRing) advanceRQ(wrid uint64) {
	*(*uint64)(unsafe.Add(r.wrid, uintptr(r.head&r.mask)*8)) = wrid
	r.head++
	r.counter++
	r.posted++
	r.open = 0
}

// advanceSRQ records wrid for the SRQ slot just written, marks it busy,
// takes the next free slot from its next_wqe_index and closes the open
// stage.
func (r *recvRing) advanceSRQ(wrid uint64) {
	idx := r.head & r.mask
	*(*uint64)(unsafe.Add(r.wrid, uintptr(idx)*8)) = wrid
	*(*bool)(unsafe.Add(r.busy, idx)) = true
	wqe := unsafe.Add(r.buf, uintptr(idx)*r.stride)
	r.head = uint32(prm.Load16(unsafe.Add(wqe, prm.SRQNextWQEIndex))) & r.mask
	r.counter++
	r.posted++
	r.open = 0
}

// error is the error of a stage that finish turned down: the owner's
// refusal for a stage BeginRecv refused or a ring closed since, then
// wqebuilder.ErrStaleStage for a stage that is not the open one, then wqebuilder.ErrSGETooLong,
// then wqebuilder.ErrTooManySGE.
func (s RecvStage) error() error {
	switch {
	case s.first == refusedStage || s.r.closed.Load() != 0:
		return s.r.refusal()
	case uintptr(s.first) != s.r.open:
		return s.r.errStale
	case s.st>>recvErrShift&recvErrLength != 0:
		return s.r.errLength
	default:
		return s.r.errSGE
	}
}

// ringDoorbell publishes the receive WQEs finished since the last
// doorbell: a store barrier, then the big-endian 16-bit counter in doorbell
// record word 0, as rdma-core's mlx5_post_recv and mlx5_post_srq_recv do.
func (r *recvRing) ringDoorbell() {
	if r.rung == r.counter {
		return
	}
	r.ring()
}

// ring is ringDoorbell without the test for new WQEs.
func (r *recvRing) ring() {
	blueflame.StoreBarrier()
	prm.Store32(unsafe.Add(r.dbrec, prm.DoorbellRecordRecvB), r.counter&0xffff)
	r.rung = r.counter
}

// take retires the receive WQE a completion names and returns its wrid.
// For an RQ the completions come in order and wqeCounter is the index of
// the oldest posted WQE (free-running, or its slot: only the slot bits
// are compared); for an SRQ it is the slot, which goes back
// on the free list. ok is false, and nothing changes, when no WQE posted
// there is outstanding.
func (r *recvRing) take(wqeCounter uint16) (uint64, bool) {
	if r.srq {
		return r.takeSRQ(wqeCounter)
	}
	return r.takeRQ(wqeCounter)
}

// takeSRQ is take for a shared receive queue: wqeCounter is the slot,
// which goes back on the free list, after its tail.
func (r *recvRing) takeSRQ(wqeCounter uint16) (uint64, bool) {
	idx := uintptr(wqeCounter)
	if idx > uintptr(r.mask) {
		return 0, false
	}
	busy := (*bool)(unsafe.Add(r.busy, idx))
	if !*busy {
		return 0, false
	}
	*busy = false
	prm.Store16(unsafe.Add(r.buf, uintptr(r.tail)*r.stride+prm.SRQNextWQEIndex), wqeCounter)
	r.tail = uint32(wqeCounter)
	r.posted--
	return *(*uint64)(unsafe.Add(r.wrid, idx*8)), true
}

// takeRQ is take for a QP's own receive queue, whose completions come in
// order: the counter names the oldest receive posted by its slot bits
// (mlx5_ib and libmlx5 take the tail whatever the counter says, UCX masks
// it, so a device may report the free-running counter or the slot).
func (r *recvRing) takeRQ(wqeCounter uint16) (uint64, bool) {
	if r.posted == 0 || uint16(r.tail) != wqeCounter && (r.tail^uint32(wqeCounter))&r.mask != 0 {
		return 0, false
	}
	r.tail++
	r.posted--
	return *(*uint64)(unsafe.Add(r.wrid, uintptr(uint32(wqeCounter)&r.mask)*8)), true
}

// scatterTo copies the payload the device placed in the CQE into the
// buffers of the receive WQE at slot idx, as rdma-core does for
// scatter-to-CQE completions.
func (r *recvRing) scatterTo(idx uint32, data []byte) {
	seg := unsafe.Add(r.segs, uintptr(idx&r.mask)*r.stride)
	for i := uint32(0); i < r.maxSGE && len(data) > 0; i++ {
		p := unsafe.Add(seg, uintptr(i)*prm.DataSize)
		if prm.Load32(unsafe.Add(p, prm.DataLKey)) == prm.InvalidLKey {
			return
		}
		n := int(prm.Load32(p))
		addr := uintptr(prm.Load64(unsafe.Add(p, prm.DataAddr)))
		// The address is one the caller posted: registered memory outside
		// the Go heap, as the device would have written it.
		dst := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
		n = copy(unsafe.Slice((*byte)(dst), n), data)
		data = data[n:]
	}
}
