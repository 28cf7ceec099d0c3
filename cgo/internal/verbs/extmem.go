//go:build linux

package verbs

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// The memory the data plane writes must outlive the verbs objects: libmlx5
// frees a QP's ring and doorbell record in ibv_destroy_qp (a CQ's in
// ibv_destroy_cq, an SRQ's in ibv_destroy_srq), hands a thread domain's
// BlueFlame register to the next thread domain at ibv_dealloc_td, and
// unmaps the UAR pages at ibv_close_device. A stage begun before a Close
// and written after it, or a poll racing a Close on another goroutine,
// would then write to freed memory or to another QP's register.
//
// So the provider creates QPs, CQs and SRQs through a parent domain whose
// allocator callbacks (extalloc.go) hand out memory from an extArena:
// anonymous mappings that rdma-core's free leaves in place. The arena is
// released, and the thread domain deallocated, by the cleanup of the
// descriptor's Memory (a queueMemory) once nothing in Go reaches it; the
// device is closed once it was closed and every queueMemory of it is gone
// (closeGate). This file is the bookkeeping, in plain Go so that it is
// tested without a device.

// extArena is the memory rdma-core allocated through one parent domain: a
// queue's rings and doorbell records. Each allocation is an anonymous
// mapping of its own, zeroed (rdma-core does not clear custom
// allocations), aligned as asked and excluded from fork (as rdma-core's
// own buffers are). free only marks an allocation: release unmaps them all.
type extArena struct {
	mu       sync.Mutex
	allocs   map[uintptr]*extAlloc // by the address handed out
	released bool
}

// extAlloc is one allocation of an arena.
type extAlloc struct {
	mapping []byte // the whole mapping
	size    uintptr
	resType uint64
	freed   bool
}

// errArenaReleased is the error of an allocation from a released arena.
var errArenaReleased = errors.New("memory arena released")

func newExtArena() *extArena { return &extArena{allocs: map[uintptr]*extAlloc{}} }

// alloc maps size bytes at an address aligned to align (a power of two;
// below the page size, the page size) for the resource type resType.
func (a *extArena) alloc(size, align uintptr, resType uint64) (unsafe.Pointer, error) {
	page := uintptr(os.Getpagesize())
	if align < page {
		align = page
	}
	if size == 0 || align&(align-1) != 0 || size > 1<<40 {
		return nil, fmt.Errorf("alloc %d bytes aligned to %d: %w", size, align, ctx.ErrInvalidArgument)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released {
		return nil, errArenaReleased
	}
	n := (size + page - 1) &^ (page - 1)
	m, err := unix.Mmap(-1, 0, int(n+align-page), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w (%w)", n+align-page, ctx.ErrNoMemory, err)
	}
	if err := unix.Madvise(m, unix.MADV_DONTFORK); err != nil {
		_ = unix.Munmap(m)
		return nil, fmt.Errorf("madvise DONTFORK: %w", err)
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
	off := (align - base%align) % align
	p := unsafe.Pointer(&m[off])
	a.allocs[uintptr(p)] = &extAlloc{mapping: m, size: size, resType: resType}
	return p, nil
}

// free records that rdma-core freed p; the mapping stays until release. It
// reports false for an address the arena did not hand out or freed
// already.
func (a *extArena) free(p unsafe.Pointer) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	x, ok := a.allocs[uintptr(p)]
	if !ok || x.freed {
		return false
	}
	x.freed = true
	return true
}

// counts returns the allocations still mapped and, of them, those rdma-core
// freed.
func (a *extArena) counts() (mapped, freed int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, x := range a.allocs {
		mapped++
		if x.freed {
			freed++
		}
	}
	return mapped, freed
}

// release unmaps every allocation, freed or not, and refuses later ones.
// It is idempotent.
func (a *extArena) release() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.released = true
	var errs []error
	for p, x := range a.allocs {
		if err := unix.Munmap(x.mapping); err != nil {
			errs = append(errs, fmt.Errorf("munmap %#x: %w", p, err))
		}
		delete(a.allocs, p)
	}
	return errors.Join(errs...)
}

// queueMemory is the Memory of a hardware descriptor (descriptor.QP,
// CQDescriptor, SRQDescriptor): while the data plane can reach it, its
// arena stays mapped and whatever its after functions release stays
// allocated (a QP's thread domain, the device's hold on its UAR pages).
// The provider keeps it reachable from the open object, so its cleanup
// runs only after the verbs object was destroyed (rdma-core has freed the
// arena's allocations by then) and the last data-plane reference went.
type queueMemory struct {
	arena *extArena
}

// queueRelease is what a queueMemory's cleanup releases: the arena, then
// each of after in order. It must not refer to the queueMemory.
type queueRelease struct {
	arena *extArena
	after []func()
}

// run releases the arena and runs after.
func (r queueRelease) run() {
	if r.arena != nil {
		_ = r.arena.release()
	}
	for _, f := range r.after {
		f()
	}
}

// newQueueMemory returns the owner of arena; after runs, in order, once
// the owner is unreachable and the arena released.
func newQueueMemory(arena *extArena, after ...func()) *queueMemory {
	m := &queueMemory{arena: arena}
	runtime.AddCleanup(m, queueRelease.run, queueRelease{arena: arena, after: after})
	return m
}

// closeGate runs a final release once its owner has closed and every
// holder has let go: a device is closed (ibv_close_device, which unmaps
// its UAR pages) only after Close and after the queueMemory of each of its
// queues was collected. The final function runs once, outside the lock, on
// the goroutine of the last of those events (a cleanup's, possibly).
type closeGate struct {
	mu      sync.Mutex
	holders int
	closed  bool
	done    bool
	final   func()
}

// hold counts one more holder; it reports false, counting nothing, once
// the gate is closed.
func (g *closeGate) hold() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.holders++
	return true
}

// let drops a holder counted by hold.
func (g *closeGate) let() {
	g.mu.Lock()
	g.holders--
	run := g.ready()
	g.mu.Unlock()
	if run {
		g.final()
	}
}

// close closes the gate; the final release runs now if nothing holds it.
func (g *closeGate) close() {
	g.mu.Lock()
	g.closed = true
	run := g.ready()
	g.mu.Unlock()
	if run {
		g.final()
	}
}

// ready reports, once, that the final release is due; g.mu is held.
func (g *closeGate) ready() bool {
	if g.done || !g.closed || g.holders > 0 {
		return false
	}
	g.done = true
	return true
}

// pending reports whether the gate is closed and still waiting for
// holders.
func (g *closeGate) pending() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed && !g.done
}

// openContexts counts the device contexts opened and not yet finally
// closed (a closed Device whose queues' memory is still reachable counts):
// the fd-leak check of the tests waits for it to drop to 0.
var openContexts atomic.Int64

// arenas names the arenas to the C allocator callbacks, which get a number
// (the parent domain's pd_context), not a Go pointer. An arena is named
// from its parent domain's creation until that domain is deallocated.
var arenas struct {
	mu   sync.Mutex
	next uintptr
	byID map[uintptr]*extArena
}

// nameArena registers a and returns its number, never 0.
func nameArena(a *extArena) uintptr {
	arenas.mu.Lock()
	defer arenas.mu.Unlock()
	if arenas.byID == nil {
		arenas.byID = map[uintptr]*extArena{}
	}
	arenas.next++
	arenas.byID[arenas.next] = a
	return arenas.next
}

// arenaNamed returns the arena registered as id, or nil.
func arenaNamed(id uintptr) *extArena {
	arenas.mu.Lock()
	defer arenas.mu.Unlock()
	return arenas.byID[id]
}

// forgetArena ends the registration id: the callbacks no longer find it,
// and it no longer keeps the arena reachable.
func forgetArena(id uintptr) {
	arenas.mu.Lock()
	defer arenas.mu.Unlock()
	delete(arenas.byID, id)
}

// OpenContexts returns the device contexts not yet closed by
// ibv_close_device: a closed Device stays open while the memory of one of
// its queues is reachable (see closeGate). Tests that count descriptors
// wait for it to reach 0.
func OpenContexts() int64 { return openContexts.Load() }
