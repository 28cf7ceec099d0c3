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
	return Register{reg: reg, size: size}, nil
}

// Size returns the size of one BlueFlame buffer (0 for doorbell only).
func (r *Register) Size() uint32 { return r.size }

// Offset returns the offset of the buffer the next post writes (0 or Size).
func (r *Register) Offset() uint32 { return r.offset }

// Address returns the register's base address.
func (r *Register) Address() unsafe.Pointer { return r.reg }

// Post publishes a single WQE of n bytes at wqe with BlueFlame: after a store
// barrier it sets the send doorbell record (dbrec[1] of the two-word record
// at dbrec) to the big-endian pi & 0xffff, the producer index after the WQE,
// copies the WQE in 64-byte chunks to the current BlueFlame buffer, wrapping
// the source from ringEnd to ringBase, flushes the write-combining buffer and
// toggles the buffer. A WQE larger than the BlueFlame buffer (or n == 0, or a
// register without BlueFlame) is published as Doorbell does instead.
//
// wqe must be 64-byte aligned inside the ring [ringBase, ringEnd), whose
// length is a multiple of 64. Post is small enough to inline: it costs one
// call into the copy mode's assembly.
func (r *Register) Post(dbrec unsafe.Pointer, pi uint32, wqe unsafe.Pointer, n int, ringBase, ringEnd unsafe.Pointer) {
	post(r, dbrec, pi, wqe, n, ringBase, ringEnd)
}

// Doorbell publishes one or more WQEs without BlueFlame: after a store barrier
// it sets the send doorbell record to the big-endian pi & 0xffff, then stores
// the first 8 bytes of the WQE at wqe (the last one posted) to the register
// with one 8-byte store, flushes and toggles the buffer, as rdma-core does
// for batches and for WQEs too large for BlueFlame.
func (r *Register) Doorbell(dbrec unsafe.Pointer, pi uint32, wqe unsafe.Pointer) {
	post(r, dbrec, pi, wqe, 0, nil, nil)
}

// post (one per architecture, in copy_*.go) is the active mode's whole post,
// register bookkeeping included: the destination is r.reg + r.offset, then
// r.offset toggles; the WQE is copied as (n+63)/64 chunks when that fits
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
//lint:ignore U1000 the assembly of post jumps here in ModeGeneric.
func postGeneric(r *Register, dbrec unsafe.Pointer, pi uint32, src unsafe.Pointer, n int, ringBase, ringEnd unsafe.Pointer) {
	dst := unsafe.Add(r.reg, r.offset)
	r.offset ^= r.size
	chunks := uint(n+ChunkSize-1) / ChunkSize
	if chunks > uint(r.size/ChunkSize) {
		chunks = 0
	}
	StoreBarrier()
	*(*uint32)(unsafe.Add(dbrec, prm.DoorbellRecordSendB)) = bigEndianWord(pi & prm.CtrlWQEIndexMask)
	WCStart()
	if chunks == 0 {
		*(*uint64)(dst) = *(*uint64)(src)
	}
	for ; chunks > 0; chunks-- {
		d := (*[8]uint64)(dst)
		s := (*[8]uint64)(src)
		// One element at a time, in ascending order: a block copy could
		// be compiled to wider or reordered moves.
		d[0] = s[0]
		d[1] = s[1]
		d[2] = s[2]
		d[3] = s[3]
		d[4] = s[4]
		d[5] = s[5]
		d[6] = s[6]
		d[7] = s[7]
		dst = unsafe.Add(dst, ChunkSize)
		src = unsafe.Add(src, ChunkSize)
		if src == ringEnd {
			src = ringBase
		}
	}
	FlushWrites()
}
