// Package bufpool keeps a pool of fixed-size registered buffers for SEND and
// RECV: one mmap'd area cut into count buffers of size bytes, registered as
// one memory region, with a free list to pop and push buffer indexes and a
// helper that posts receives from the pool.
//
// It owns the buffers and their free list; it does not poll. A receive
// posted by PostReceives carries the buffer's index as its work request id,
// so the completion names the buffer to read and then push back (or post
// again).
//
// A Pool is used by one goroutine at a time. Pop, Push, Buffer, Addr and
// SGE allocate nothing and take no lock.
package bufpool

import (
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/nilness"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// Sentinel errors.
var (
	// ErrEmpty: every buffer is in use.
	ErrEmpty = errors.New("buffer pool empty")
	// ErrBadIndex: an index (or work request id) that names no buffer of
	// the pool.
	ErrBadIndex = errors.New("no such buffer")
	// ErrNotInUse: a buffer pushed back that was not popped.
	ErrNotInUse = errors.New("buffer not in use")

	// errClosed: the pool was closed; its memory is unmapped.
	errClosed = fmt.Errorf("bufpool: pool closed: %w", ctx.ErrClosed)

	// Push's errors, made once: Push allocates nothing.
	errPushClosed   = fmt.Errorf("bufpool: push: pool closed: %w", ctx.ErrClosed)
	errPushBadIndex = fmt.Errorf("bufpool: push: %w", ErrBadIndex)
	errPushNotInUse = fmt.Errorf("bufpool: push: %w", ErrNotInUse)
)

// Pool is a set of equal registered buffers.
type Pool struct {
	base   uintptr
	data   []byte
	size   int
	count  int
	lkey   uint32
	free   []int32  // stack of free indexes
	inUse  []uint64 // bitmap of popped buffers
	buf    *ctx.Buffer
	mr     *ctx.MemoryRegion
	closed bool
}

// New maps count buffers of size bytes each (each buffer starts on a
// 64-byte boundary when size is a multiple of 64; size is at most
// wqebuilder.MaxSGELength, as one SGE covers a buffer) and registers them in pd
// with access (AccessLocalWrite is added: receives write into the buffers).
func New(pd *ctx.ProtectionDomain, count, size int, access ctx.Access) (*Pool, error) {
	const op = "bufpool: new"
	if pd == nil {
		return nil, fmt.Errorf("%s: nil protection domain: %w", op, ctx.ErrInvalidArgument)
	}
	if size > wqebuilder.MaxSGELength {
		// A buffer is one scatter/gather entry: its byte count has 31 bits.
		return nil, fmt.Errorf("%s: buffer size %d above %d (the longest SGE): %w", op, size, wqebuilder.MaxSGELength, ctx.ErrInvalidArgument)
	}
	if count <= 0 || size <= 0 || count > 1<<31-1 || count > (1<<40)/size {
		return nil, fmt.Errorf("%s: %d buffers of %d bytes: %w", op, count, size, ctx.ErrInvalidArgument)
	}
	buf, err := ctx.AllocBuffer(count*size, ctx.BufferOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	mr, err := pd.RegisterBuffer(buf, access|ctx.AccessLocalWrite)
	if err != nil {
		_ = buf.Close()
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	p := &Pool{
		base:  mr.Addr(),
		data:  buf.Bytes()[: count*size : count*size],
		size:  size,
		count: count,
		lkey:  mr.LKey(),
		free:  make([]int32, count),
		inUse: make([]uint64, (count+63)/64),
		buf:   buf,
		mr:    mr,
	}
	// Pop hands out low indexes first.
	for i := range p.free {
		p.free[i] = int32(count - 1 - i)
	}
	return p, nil
}

// Size returns the size of one buffer in bytes.
func (p *Pool) Size() int { return p.size }

// Count returns the number of buffers.
func (p *Pool) Count() int { return p.count }

// Free returns the number of buffers not in use.
func (p *Pool) Free() int { return len(p.free) }

// MemoryRegion returns the region that covers every buffer (its LKey and
// RKey are the pool's keys).
func (p *Pool) MemoryRegion() *ctx.MemoryRegion { return p.mr }

// Pop takes a free buffer and returns its index; ok is false when every
// buffer is in use.
func (p *Pool) Pop() (i int, ok bool) {
	n := len(p.free)
	if n == 0 {
		return -1, false
	}
	i = int(p.free[n-1])
	p.free = p.free[:n-1]
	p.inUse[i>>6] |= 1 << (i & 63)
	return i, true
}

// Push gives buffer i back. Pushing an index that is out of range or not in
// use is an error and changes nothing.
func (p *Pool) Push(i int) error {
	if p.closed {
		return errPushClosed
	}
	if uint(i) >= uint(p.count) {
		return errPushBadIndex
	}
	bit := uint64(1) << (i & 63)
	if p.inUse[i>>6]&bit == 0 {
		return errPushNotInUse
	}
	p.inUse[i>>6] &^= bit
	p.free = append(p.free, int32(i)) // within capacity: never allocates
	return nil
}

// InUse reports whether buffer i is popped.
func (p *Pool) InUse(i int) bool {
	return uint(i) < uint(p.count) && p.inUse[i>>6]&(1<<(i&63)) != 0
}

// Buffer returns buffer i's memory (size bytes), or nil once the pool is
// closed (the memory is unmapped then). It panics for an index out of range,
// like a slice index.
func (p *Pool) Buffer(i int) []byte {
	if p.closed {
		return nil
	}
	if uint(i) >= uint(p.count) {
		panic("bufpool: buffer index out of range")
	}
	off := i * p.size
	return p.data[off : off+p.size : off+p.size]
}

// Addr returns the address of buffer i, for a data segment. It panics for
// an index out of range, like a slice index.
func (p *Pool) Addr(i int) uint64 {
	if uint(i) >= uint(p.count) {
		panic("bufpool: buffer index out of range")
	}
	return uint64(p.base) + uint64(i)*uint64(p.size)
}

// SGE returns the data segment (address, length, lkey) of the first n bytes
// of buffer i; n is capped at the buffer size. It panics for an index out
// of range, like Addr, and for a negative n, like a slice expression.
func (p *Pool) SGE(i, n int) (addr uint64, length, lkey uint32) {
	if n < 0 {
		panic("bufpool: negative length")
	}
	if n > p.size {
		n = p.size
	}
	return p.Addr(i), uint32(n), p.lkey
}

// Index returns the buffer index of a work request id from PostReceives
// (whose work request id is the buffer index).
func (p *Pool) Index(wrid uint64) (int, error) {
	if wrid >= uint64(p.count) {
		return -1, fmt.Errorf("bufpool: work request id %d: %w", wrid, ErrBadIndex)
	}
	return int(wrid), nil
}

// IndexOf returns the index of the buffer that holds address addr.
func (p *Pool) IndexOf(addr uint64) (int, error) {
	off := addr - uint64(p.base)
	if addr < uint64(p.base) || off >= uint64(p.count)*uint64(p.size) {
		return -1, fmt.Errorf("bufpool: address %#x: %w", addr, ErrBadIndex)
	}
	return int(off / uint64(p.size)), nil
}

// Receiver is a queue that receives into the pool's buffers: an RC or UD
// queue pair (its Queue), a DCT's or any SharedReceiveQueue.
type Receiver interface {
	BeginRecv(wrid uint64) transport.RecvStage
	RingRecvDoorbell()
}

// PostReceives pops n buffers and posts a receive of the whole buffer for
// each on r, with the buffer index as work request id, and rings the
// receive doorbell once. It stops at the first failure (the pool empty, the
// receive queue full or refused), pushes that buffer back and returns the
// number posted with the error.
func PostReceives[R Receiver](p *Pool, r R, n int) (int, error) {
	if p == nil {
		return 0, fmt.Errorf("bufpool: post receives: nil pool: %w", ctx.ErrInvalidArgument)
	}
	if nilness.Is(r) {
		return 0, fmt.Errorf("bufpool: post receives: nil receiver: %w", ctx.ErrInvalidArgument)
	}
	if p.closed {
		return 0, fmt.Errorf("bufpool: post receives: %w", errClosed)
	}
	posted := 0
	var err error
	for posted < n {
		i, ok := p.Pop()
		if !ok {
			err = ErrEmpty
			break
		}
		if err = r.BeginRecv(uint64(i)).SGE(p.Addr(i), uint32(p.size), p.lkey).Finish(); err != nil {
			_ = p.Push(i)
			break
		}
		posted++
	}
	if posted > 0 {
		r.RingRecvDoorbell()
	}
	if err != nil {
		return posted, fmt.Errorf("bufpool: post receives: %d of %d posted: %w", posted, n, err)
	}
	return posted, nil
}

// Repost posts buffer i again on r (after its receive completed and its
// data was consumed) and rings the receive doorbell. On failure the buffer
// stays in use and the error is returned.
func Repost[R Receiver](p *Pool, r R, i int) error {
	if p == nil {
		return fmt.Errorf("bufpool: repost buffer %d: nil pool: %w", i, ctx.ErrInvalidArgument)
	}
	if nilness.Is(r) {
		return fmt.Errorf("bufpool: repost buffer %d: nil receiver: %w", i, ctx.ErrInvalidArgument)
	}
	if p.closed {
		return fmt.Errorf("bufpool: repost buffer %d: %w", i, errClosed)
	}
	if uint(i) >= uint(p.count) {
		return fmt.Errorf("bufpool: repost buffer %d: %w", i, ErrBadIndex)
	}
	if !p.InUse(i) {
		return fmt.Errorf("bufpool: repost buffer %d: %w", i, ErrNotInUse)
	}
	if err := r.BeginRecv(uint64(i)).SGE(p.Addr(i), uint32(p.size), p.lkey).Finish(); err != nil {
		return fmt.Errorf("bufpool: repost buffer %d: %w", i, err)
	}
	r.RingRecvDoorbell()
	return nil
}

// Close deregisters the memory region and unmaps the buffers. Buffers must
// not be in flight. It is idempotent.
//
// Close of a nil *Pool returns nil.
func (p *Pool) Close() error {
	if p == nil {
		return nil
	}
	if p.closed {
		return nil
	}
	p.closed = true
	p.free, p.data = nil, nil
	return errors.Join(p.mr.Close(), p.buf.Close())
}
