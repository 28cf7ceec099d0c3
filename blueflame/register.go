package blueflame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// ChunkSize is the unit of a BlueFlame copy: one send WQE basic block.
const ChunkSize = prm.WQEBBSize

// ErrBadRegister is returned by NewRegister for an unusable register.
var ErrBadRegister = errors.New("bad BlueFlame register")

// Register is the doorbell / BlueFlame register of one send queue (struct
// mlx5dv_qp's bf member): two buffers of Size bytes at reg and reg+Size,
// written alternately. A Register is plain data: copy it into the send queue
// that owns it and call its methods through a pointer.
type Register struct {
	reg    unsafe.Pointer
	size   uint32
	offset uint32
	// straight is min(size, ChunkSize): a copy of n bytes with
	// 0 < n <= straight is one chunk, and the amd64 post copies it with
	// no loop after one unsigned compare of n-1 against it.
	straight uint64
}

// NewRegister returns the register at reg whose two BlueFlame buffers are size
// bytes each. size is 0 when the queue has no BlueFlame buffer (only the
// 8-byte doorbell at reg may be written); otherwise it is a multiple of 64.
func NewRegister(reg unsafe.Pointer, size uint32) (Register, error) {
	if reg == nil {
		return Register{}, fmt.Errorf("blueflame: new register: nil address: %w", ErrBadRegister)
	}
	if size%ChunkSize != 0 {
		return Register{}, fmt.Errorf("blueflame: new register: size %d not a multiple of %d: %w",
			size, ChunkSize, ErrBadRegister)
	}
	if uintptr(reg)%8 != 0 {
		return Register{}, fmt.Errorf("blueflame: new register: address %p not 8-byte aligned: %w",
			reg, ErrBadRegister)
	}
	return Register{reg: reg, size: size, straight: uint64(min(size, ChunkSize))}, nil
}

// Size returns the size of one BlueFlame buffer (0 for doorbell only).
func (r *Register) Size() uint32 { return r.size }

// Offset returns the offset of the buffer the next post writes (0 or Size).
func (r *Register) Offset() uint32 { return r.offset }

// SendDoorbell is everything a post to one send queue touches besides its
// WQEs: the queue's Register, its doorbell record and the bounds of its
// ring (a WQE that runs past the end continues at the start). Bound once,
// they stay in memory where the assembly reads them, and a post passes
// only the producer index, the WQE and its size. Like Register it is plain
// data: copy it into the send queue that owns it and call its methods
// through a pointer.
type SendDoorbell struct {
	Register
	dbrec    unsafe.Pointer
	ringBase unsafe.Pointer
	ringEnd  unsafe.Pointer
}

// NewSendDoorbell binds reg to the send queue whose doorbell record (two
// big-endian words, the send producer index in the second) is at dbrec and
// whose ring of 64-byte basic blocks is [ringBase, ringEnd).
func NewSendDoorbell(reg Register, dbrec, ringBase, ringEnd unsafe.Pointer) (SendDoorbell, error) {
	switch {
	case reg.reg == nil:
		return SendDoorbell{}, fmt.Errorf("blueflame: new send doorbell: register not made by NewRegister: %w", ErrBadRegister)
	case dbrec == nil || uintptr(dbrec)%4 != 0:
		return SendDoorbell{}, fmt.Errorf("blueflame: new send doorbell: doorbell record %p nil or not 4-byte aligned: %w", dbrec, ErrBadRegister)
	case ringBase == nil || uintptr(ringBase)%ChunkSize != 0 || uintptr(ringEnd) <= uintptr(ringBase) ||
		(uintptr(ringEnd)-uintptr(ringBase))%ChunkSize != 0:
		return SendDoorbell{}, fmt.Errorf("blueflame: new send doorbell: ring [%p, %p) not 64-byte aligned basic blocks: %w",
			ringBase, ringEnd, ErrBadRegister)
	}
	return SendDoorbell{Register: reg, dbrec: dbrec, ringBase: ringBase, ringEnd: ringEnd}, nil
}

// Post publishes a single WQE of n bytes at wqe with BlueFlame: after a store
// barrier it sets the send doorbell record (dbrec[1]) to the big-endian
// pi & 0xffff, the producer index after the WQE, copies the WQE in 64-byte
// chunks to the current BlueFlame buffer, wrapping the source from the
// ring's end to its start, flushes the write-combining buffer and toggles
// the buffer. A WQE larger than the BlueFlame buffer (or n == 0, or a
// register without BlueFlame) is published as Ring does instead.
//
// wqe must be 64-byte aligned inside the ring. Post is small enough to
// inline: it costs one call into the copy mode's assembly.
func (d *SendDoorbell) Post(pi uint32, wqe unsafe.Pointer, n int) { post(d, pi, wqe, n) }

// Ring publishes one or more WQEs without BlueFlame: after a store barrier
// it sets the send doorbell record to the big-endian pi & 0xffff, then stores
// the first 8 bytes of the WQE at wqe (the last one posted) to the register
// with one 8-byte store, flushes and toggles the buffer, as rdma-core does
// for batches and for WQEs too large for BlueFlame.
func (d *SendDoorbell) Ring(pi uint32, wqe unsafe.Pointer) { post(d, pi, wqe, 0) }

// post (one per architecture, in copy_*.go) is the active mode's whole post,
// register bookkeeping included: the destination is d.reg + d.offset, then
// d.offset toggles; the WQE is copied as (n+63)/64 chunks when that fits
// r.size, else (and for n == 0) only its first 8 bytes are stored; around
// the copy come the store barrier, the doorbell record dbrec[1] = big-endian
// pi & 0xffff, WC start and the flush. Where there is assembly, post is one
// assembly function that reads activeMode and runs that mode's copy (or
// jumps to postGeneric), so a post is one direct call.

// bigEndianWord returns the word whose bytes in memory are v big-endian.
func bigEndianWord(v uint32) uint32 {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return binary.NativeEndian.Uint32(b[:])
}

// postGeneric is the portable post: the same steps as the assembly versions,
// with the barrier functions between ordinary Go stores.
//
//lint:ignore U1000 the assembly of post jumps here in modeGeneric.
func postGeneric(d *SendDoorbell, pi uint32, src unsafe.Pointer, n int) {
	dst := unsafe.Add(d.reg, d.offset)
	d.offset ^= d.size
	chunks := uint(n+ChunkSize-1) / ChunkSize
	if chunks > uint(d.size/ChunkSize) {
		chunks = 0
	}
	StoreBarrier()
	*(*uint32)(unsafe.Add(d.dbrec, prm.DoorbellRecordSendB)) = bigEndianWord(pi & prm.CtrlWQEIndexMask)
	WCStart()
	if chunks == 0 {
		*(*uint64)(dst) = *(*uint64)(src)
	}
	for ; chunks > 0; chunks-- {
		to := (*[8]uint64)(dst)
		from := (*[8]uint64)(src)
		// One element at a time, in ascending order: a block copy could
		// be compiled to wider or reordered moves.
		to[0] = from[0]
		to[1] = from[1]
		to[2] = from[2]
		to[3] = from[3]
		to[4] = from[4]
		to[5] = from[5]
		to[6] = from[6]
		to[7] = from[7]
		dst = unsafe.Add(dst, ChunkSize)
		src = unsafe.Add(src, ChunkSize)
		if src == d.ringEnd {
			src = d.ringBase
		}
	}
	FlushWrites()
}
