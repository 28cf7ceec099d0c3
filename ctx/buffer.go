package ctx

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HugePageSize is the size of the huge pages Buffer asks for (2 MiB, the
// x86-64 and arm64 default).
const HugePageSize = 2 << 20

// BufferOptions tune AllocBuffer.
type BufferOptions struct {
	// HugePages asks for explicit 2 MiB huge pages (MAP_HUGETLB with
	// MAP_HUGE_2MB, whatever the system's default huge page size). When
	// none are reserved the buffer falls back to normal pages with
	// transparent huge pages advised; Buffer.HugePages says which it got.
	HugePages bool
	// Guard surrounds the buffer with an inaccessible page on each side,
	// so that a stray access just before or after it faults at once.
	Guard bool
}

// Buffer is page-aligned memory from mmap, outside the Go heap, suitable for
// registration and for rings the device (or the software HCA) accesses.
//
// A memory region registered on a buffer (on each of the buffers it
// overlaps, when it spans neighbouring ones) keeps its memory mapped: Close
// while regions on it are open ends the buffer for its owner at once
// (Bytes and Pointer return nil, RegisterBuffer refuses it) and unmaps it
// when the last of those regions is closed, as a device keeps registered
// pages pinned until they are deregistered. So closing a buffer before the
// Context it is registered with, as deferred calls may, never leaves a
// region over unmapped memory, also when Close runs on another goroutine
// while a region on the buffer is being registered.
//
// Its methods may be called from any goroutine. The memory is not
// guarded: a slice from Bytes must not be used after Close unless a
// region registered on the buffer is still open.
type Buffer struct {
	mu      sync.Mutex
	mapping []byte // the whole mapping, guards included
	data    []byte
	huge    bool
	closed  bool // closed by its owner
	// regions counts the open memory regions that overlap data; guarded by
	// liveBuffers.mu. The mapping goes when closed and regions is 0.
	regions int
}

// liveBuffers holds the mapped buffers in address order, so that a
// registration can find the buffer its memory lies in (RegisterMemory is
// handed a slice, not the buffer). Lock order: liveBuffers.mu, then a
// Buffer's mu.
var liveBuffers struct {
	mu   sync.Mutex
	byAt []*Buffer // sorted by the address of data
}

// start returns the address of the buffer's first byte.
func (b *Buffer) start() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b.data))) }

// searchBuffers returns where a buffer starting at address at is, or would
// be, in liveBuffers.byAt; liveBuffers.mu is held.
func searchBuffers(at uintptr) (int, bool) {
	return slices.BinarySearchFunc(liveBuffers.byAt, at, func(x *Buffer, at uintptr) int { return cmp.Compare(x.start(), at) })
}

// track adds a new buffer to liveBuffers.
func (b *Buffer) track() *Buffer {
	liveBuffers.mu.Lock()
	defer liveBuffers.mu.Unlock()
	i, _ := searchBuffers(b.start())
	liveBuffers.byAt = slices.Insert(liveBuffers.byAt, i, b)
	return b
}

// holdBuffersOf finds the mapped buffers that [addr, addr+n) overlaps and
// counts one more region on each; it returns none when the range lies in
// no buffer (other mmap'd memory). A range may span buffers that lie next
// to each other in the address space, or reach from a buffer into other
// mapped memory: every buffer it touches stays mapped for the region.
func holdBuffersOf(addr unsafe.Pointer, n uint64) []*Buffer {
	liveBuffers.mu.Lock()
	defer liveBuffers.mu.Unlock()
	a := uintptr(addr)
	end := a + uintptr(n)
	if end < a { // wraps: the provider refuses it
		end = ^uintptr(0)
	}
	// The buffers that start before end, from the last back to the first
	// that ends after a (buffers do not overlap, so the ends are sorted
	// too).
	i, _ := searchBuffers(end)
	var held []*Buffer
	for i--; i >= 0; i-- {
		b := liveBuffers.byAt[i]
		if b.start()+uintptr(len(b.data)) <= a {
			break
		}
		b.regions++
		held = append(held, b)
	}
	return held
}

// holdRegion counts one more region on b and returns its memory, or nil,
// counting nothing, when b is closed (RegisterBuffer, which refuses a nil
// or zero b first).
func (b *Buffer) holdRegion() []byte {
	liveBuffers.mu.Lock()
	defer liveBuffers.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.regions++
	return b.data
}

// releaseRegions is releaseRegion of each buffer holdBuffersOf held.
func releaseRegions(held []*Buffer) error {
	var errs []error
	for _, b := range held {
		errs = append(errs, b.releaseRegion())
	}
	return errors.Join(errs...)
}

// releaseRegion is the closing of a region that holdBuffersOf counted: the
// last one unmaps a buffer its owner has closed.
func (b *Buffer) releaseRegion() error {
	liveBuffers.mu.Lock()
	defer liveBuffers.mu.Unlock()
	b.regions--
	if b.regions > 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		return nil
	}
	return b.unmapLocked()
}

// unmapLocked unmaps the buffer and drops it from liveBuffers; both locks
// are held.
func (b *Buffer) unmapLocked() error {
	liveBuffers.byAt = slices.DeleteFunc(liveBuffers.byAt, func(x *Buffer) bool { return x == b })
	if err := unix.Munmap(b.mapping); err != nil {
		return &OpError{Op: "free buffer", Err: err}
	}
	return nil
}

// AllocBuffer maps size bytes (rounded up to whole pages) of zeroed memory.
func AllocBuffer(size int, opts BufferOptions) (*Buffer, error) {
	const op = "alloc buffer"
	// The largest size whose rounding up to huge pages, and guard pages
	// around it, still fit an int.
	const maxSize = math.MaxInt/2 - HugePageSize
	if size <= 0 || size > maxSize {
		return nil, &OpError{Op: op, Err: fmt.Errorf("size %d out of range 1..%d: %w", size, maxSize, ErrInvalidArgument)}
	}
	page := os.Getpagesize()
	if opts.HugePages {
		n := roundUp(size, HugePageSize)
		guard := 0
		if opts.Guard {
			guard = page
		}
		if b, data, err := mapWithGuards(n, guard, unix.MAP_HUGETLB|unix.MAP_HUGE_2MB); err == nil {
			return (&Buffer{mapping: b, data: data, huge: true}).track(), nil
		}
	}
	n := roundUp(size, page)
	guard := 0
	if opts.Guard {
		guard = page
	}
	b, data, err := mapWithGuards(n, guard, 0)
	if err != nil {
		return nil, &OpError{Op: op, Err: fmt.Errorf("mmap %d bytes: %w (%w)", n, ErrNoMemory, err)}
	}
	if opts.HugePages {
		_ = unix.Madvise(data, unix.MADV_HUGEPAGE)
	}
	return (&Buffer{mapping: b, data: data}).track(), nil
}

// mapWithGuards maps n bytes with guard bytes of PROT_NONE on both sides;
// data is the n bytes, a part of mapping (the whole of it, to unmap).
// With hugetlb the data part is mapped separately, with MAP_FIXED, over
// the first huge-page-aligned address of a PROT_NONE reservation one huge
// page longer than the data and its guards: the slack left on either side
// stays PROT_NONE, inside the guards.
func mapWithGuards(n, guard int, extra int) (mapping, data []byte, err error) {
	if guard == 0 {
		b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|extra)
		if err != nil {
			return nil, nil, err
		}
		return b, b[:n:n], nil
	}
	if extra == 0 {
		b, err := unix.Mmap(-1, 0, n+2*guard, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, nil, err
		}
		data := b[guard : guard+n : guard+n]
		if err := unix.Mprotect(data, unix.PROT_READ|unix.PROT_WRITE); err != nil {
			_ = unix.Munmap(b)
			return nil, nil, err
		}
		return b, data, nil
	}
	b, err := unix.Mmap(-1, 0, n+2*guard+HugePageSize, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, err
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	off := int((base+uintptr(guard)+HugePageSize-1)&^(HugePageSize-1) - base)
	_, _, errno := unix.Syscall6(unix.SYS_MMAP, base+uintptr(off), uintptr(n), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|uintptr(extra), ^uintptr(0), 0)
	if errno != 0 {
		_ = unix.Munmap(b)
		return nil, nil, errno
	}
	return b, b[off : off+n : off+n], nil
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// Bytes returns the buffer's memory (nil after Close).
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	return b.data
}

// Pointer returns the first byte of the buffer (nil after Close).
func (b *Buffer) Pointer() unsafe.Pointer {
	d := b.Bytes()
	if d == nil {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(d))
}

// Len returns the buffer's size in bytes (whole pages).
func (b *Buffer) Len() int { return len(b.data) }

// HugePages reports whether the buffer is backed by explicit huge pages.
func (b *Buffer) HugePages() bool { return b.huge }

// Closed reports whether Close has run (the memory stays mapped while
// regions registered on it are open).
func (b *Buffer) Closed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// Close unmaps the buffer, or, while memory regions registered on it are
// open, ends it for its owner and leaves the unmapping to the close of the
// last of them (see Buffer). It is idempotent.
//
// Close of a nil *Buffer, or of a zero Buffer (not made by AllocBuffer),
// returns nil.
func (b *Buffer) Close() error {
	if b == nil || b.mapping == nil {
		return nil
	}
	liveBuffers.mu.Lock()
	defer liveBuffers.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	if b.regions > 0 {
		return nil
	}
	return b.unmapLocked()
}
