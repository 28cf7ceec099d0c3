//go:build linux

package verbs

import (
	"errors"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// resident reports whether the page of p is mapped (msync fails with
// ENOMEM on an unmapped address).
func resident(p unsafe.Pointer) bool {
	page := uintptr(os.Getpagesize())
	start := unsafe.Slice((*byte)(unsafe.Add(p, -int(uintptr(p)&(page-1)))), page)
	return !errors.Is(unix.Msync(start, unix.MS_ASYNC), unix.ENOMEM)
}

// TestExtArena allocates as rdma-core's parent-domain allocator asks (a
// ring aligned beyond the page size, an 8-byte doorbell record), frees as
// ibv_destroy_* does, and releases: a freed allocation stays mapped and
// writable until release, which unmaps everything and refuses more.
func TestExtArena(t *testing.T) {
	a := newExtArena()
	const resQP, resDBR = 1, 3
	ring, err := a.alloc(3*4096+100, 64<<10, resQP)
	require.NoError(t, err)
	require.Zero(t, uintptr(ring)%(64<<10), "ring alignment")
	db, err := a.alloc(8, 8, resDBR)
	require.NoError(t, err)
	require.Zero(t, uintptr(db)%uintptr(os.Getpagesize()))
	ringBytes := unsafe.Slice((*byte)(ring), 3*4096+100)
	for i, b := range ringBytes {
		require.Zero(t, b, "byte %d of a new allocation", i)
	}
	ringBytes[len(ringBytes)-1] = 1
	*(*uint64)(db) = 2

	_, err = a.alloc(0, 8, resDBR)
	require.Error(t, err)
	_, err = a.alloc(64, 3<<12, resDBR)
	require.Error(t, err, "alignment not a power of two")

	require.True(t, a.free(ring))
	require.False(t, a.free(ring), "a second free")
	require.False(t, a.free(unsafe.Add(db, 8)), "an address the arena did not hand out")
	mapped, freed := a.counts()
	require.Equal(t, 2, mapped)
	require.Equal(t, 1, freed)
	// Freed by rdma-core, still the data plane's to write.
	require.True(t, resident(ring))
	ringBytes[0] = 3

	require.NoError(t, a.release())
	require.NoError(t, a.release())
	mapped, _ = a.counts()
	require.Zero(t, mapped)
	require.False(t, resident(ring), "the ring is still mapped after release")
	require.False(t, resident(db), "the doorbell record is still mapped after release")
	_, err = a.alloc(64, 8, resDBR)
	require.ErrorIs(t, err, errArenaReleased)
}

// TestQueueMemoryReleasesWhenUnreachable: the arena and the functions
// after it (the thread domain's dealloc, the device's hold) are released
// only once the queueMemory is unreachable, arena first, each once.
func TestQueueMemoryReleasesWhenUnreachable(t *testing.T) {
	a := newExtArena()
	p, err := a.alloc(4096, 4096, 1)
	require.NoError(t, err)
	var order []string
	var ran atomic.Int32
	arenaFirst := false
	func() {
		m := newQueueMemory(a,
			func() {
				mapped, _ := a.counts()
				arenaFirst = mapped == 0
				order = append(order, "td")
				ran.Add(1)
			},
			func() { order = append(order, "device"); ran.Add(1) })
		for range 3 {
			runtime.GC()
		}
		time.Sleep(10 * time.Millisecond)
		require.Zero(t, ran.Load(), "released while reachable")
		require.True(t, resident(p))
		runtime.KeepAlive(m)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for ran.Load() < 2 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, int32(2), ran.Load())
	require.Equal(t, []string{"td", "device"}, order)
	require.True(t, arenaFirst, "the arena goes first")
	require.False(t, resident(p))
}

// TestCloseGate runs the final release once, after the close and after the
// last holder let go, whichever comes last.
func TestCloseGate(t *testing.T) {
	t.Run("holders outlive the close", func(t *testing.T) {
		n := 0
		g := &closeGate{final: func() { n++ }}
		require.True(t, g.hold())
		require.True(t, g.hold())
		g.close()
		require.Zero(t, n)
		require.True(t, g.pending())
		require.False(t, g.hold(), "a closed gate takes no holder")
		g.let()
		require.Zero(t, n)
		g.let()
		require.Equal(t, 1, n)
		require.False(t, g.pending())
		g.close()
		require.Equal(t, 1, n, "once")
	})
	t.Run("closed with no holder", func(t *testing.T) {
		n := 0
		g := &closeGate{final: func() { n++ }}
		require.True(t, g.hold())
		g.let()
		require.Zero(t, n, "not closed yet")
		g.close()
		require.Equal(t, 1, n)
	})
	t.Run("held by queue memory", func(t *testing.T) {
		var closed atomic.Bool
		g := &closeGate{final: func() { closed.Store(true) }}
		require.True(t, g.hold())
		m := newQueueMemory(newExtArena(), g.let)
		g.close()
		runtime.GC()
		require.False(t, closed.Load(), "device closed while a queue's memory is reachable")
		runtime.KeepAlive(m)
		deadline := time.Now().Add(5 * time.Second)
		for !closed.Load() && time.Now().Before(deadline) {
			runtime.GC()
			time.Sleep(time.Millisecond)
		}
		require.True(t, closed.Load())
	})
}

// TestArenaNames: the callbacks find an arena by its number from its
// parent domain's creation until its deallocation, and not after.
func TestArenaNames(t *testing.T) {
	a, b := newExtArena(), newExtArena()
	ia, ib := nameArena(a), nameArena(b)
	require.NotZero(t, ia)
	require.NotEqual(t, ia, ib)
	require.Same(t, a, arenaNamed(ia))
	require.Same(t, b, arenaNamed(ib))
	forgetArena(ia)
	require.Nil(t, arenaNamed(ia))
	require.Same(t, b, arenaNamed(ib))
	forgetArena(ib)
	require.Nil(t, arenaNamed(0))
}
