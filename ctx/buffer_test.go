package ctx_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// A buffer closed while regions are registered on it stays mapped until the
// last of them is closed; the regions' memory stays usable until then.
func TestBufferCloseWithRegions(t *testing.T) {
	_, c := openFake(t)
	defer c.Close()
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	buf, err := ctx.AllocBuffer(3*4096, ctx.BufferOptions{Guard: true})
	require.NoError(t, err)
	whole, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite)
	require.NoError(t, err)
	part, err := pd.RegisterMemory(buf.Bytes()[4096:8192], ctx.AccessLocalWrite)
	require.NoError(t, err)

	require.NoError(t, buf.Close())
	require.True(t, buf.Closed())
	require.Nil(t, buf.Bytes(), "closed for its owner at once")
	require.True(t, ctx.BufferMapped(buf))
	whole.Bytes()[0] = 1 // would fault if unmapped
	_, err = pd.RegisterBuffer(buf, ctx.AccessLocalWrite)
	require.ErrorIs(t, err, ctx.ErrClosed)

	require.NoError(t, whole.Close())
	require.True(t, ctx.BufferMapped(buf), "one region left")
	part.Bytes()[4095] = 2
	require.NoError(t, part.Close())
	require.False(t, ctx.BufferMapped(buf), "unmapped with the last region")
	require.NoError(t, buf.Close(), "idempotent")
}

// A buffer closed while a registration on it is under way (by another
// goroutine, here inside the provider's registration, after it has looked
// at the memory) stays mapped for the region: before, the buffer was held
// only after the provider returned, so Close unmapped it in between and
// the device was left with a region over unmapped memory. A registration
// the provider refuses lets go of the buffer.
func TestBufferClosedDuringRegistration(t *testing.T) {
	f, c := openFake(t)
	defer c.Close()
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)

	buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	require.NoError(t, err)
	mem := buf.Bytes()
	f.onRegister = func() { require.NoError(t, buf.Close()) }
	mr, err := pd.RegisterMemory(mem, ctx.AccessLocalWrite)
	f.onRegister = nil
	require.NoError(t, err)
	require.True(t, buf.Closed())
	require.True(t, ctx.BufferMapped(buf), "unmapped under a new region")
	mr.Bytes()[0] = 1
	require.NoError(t, mr.Close())
	require.False(t, ctx.BufferMapped(buf), "unmapped with its region")

	buf, err = ctx.AllocBuffer(4096, ctx.BufferOptions{})
	require.NoError(t, err)
	mem = buf.Bytes()
	f.onRegister = func() { require.NoError(t, buf.Close()) }
	f.failOn = "register"
	_, err = pd.RegisterMemory(mem, ctx.AccessLocalWrite)
	f.onRegister, f.failOn = nil, ""
	require.ErrorContains(t, err, "provider refused register")
	require.False(t, ctx.BufferMapped(buf), "a refused registration keeps the buffer mapped")
}

// Closing the Context closes the regions, and they unmap a buffer closed
// before it, in the order deferred calls run.
func TestBufferClosedBeforeContext(t *testing.T) {
	_, c := openFake(t)
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	require.NoError(t, err)
	_, err = pd.RegisterBuffer(buf, ctx.AccessLocalWrite)
	require.NoError(t, err)
	require.NoError(t, buf.Close())
	require.True(t, ctx.BufferMapped(buf))
	require.NoError(t, c.Close())
	require.False(t, ctx.BufferMapped(buf))
}

// A buffer with no region open unmaps at Close; a region on memory that no
// Buffer owns holds none. (A region over two neighbouring buffers holds
// both: TestBufferRegionSpanningBuffers.)
func TestBufferCloseWithoutRegions(t *testing.T) {
	_, c := openFake(t)
	defer c.Close()
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)

	b, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	require.NoError(t, err)
	mr, err := pd.RegisterBuffer(b, ctx.AccessLocalWrite)
	require.NoError(t, err)
	require.NoError(t, mr.Close())
	require.NoError(t, b.Close())
	require.False(t, ctx.BufferMapped(b), "the region was closed first")

	raw, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	rawMR, err := pd.RegisterMemory(raw, ctx.AccessLocalWrite)
	require.NoError(t, err)
	require.NoError(t, rawMR.Close())
	require.NoError(t, unix.Munmap(raw))
}

// adjacentBuffers allocates one-page buffers until two lie next to each
// other in the address space (mmap places them so on Linux), lower first;
// it skips the test when none do.
func adjacentBuffers(t *testing.T) (lo, hi *ctx.Buffer) {
	t.Helper()
	var all []*ctx.Buffer
	defer func() {
		for _, b := range all {
			if b != lo && b != hi {
				require.NoError(t, b.Close())
			}
		}
	}()
	for range 16 {
		b, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
		require.NoError(t, err)
		for _, x := range all {
			switch uintptr(x.Pointer()) {
			case uintptr(b.Pointer()) + 4096:
				lo, hi = b, x
			case uintptr(b.Pointer()) - 4096:
				lo, hi = x, b
			}
		}
		all = append(all, b)
		if lo != nil {
			return lo, hi
		}
	}
	t.Skip("no two buffers next to each other")
	return nil, nil
}

// A region over two buffers that lie next to each other keeps both mapped
// until it is closed, as a region inside one buffer keeps its buffer:
// before, neither was held (the range lay in no one buffer), and closing
// both unmapped the memory under the open region.
func TestBufferRegionSpanningBuffers(t *testing.T) {
	_, c := openFake(t)
	defer c.Close()
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	lo, hi := adjacentBuffers(t)
	mr, err := pd.RegisterMemory(unsafe.Slice((*byte)(lo.Pointer()), 2*4096), ctx.AccessLocalWrite)
	require.NoError(t, err)

	require.NoError(t, lo.Close())
	require.NoError(t, hi.Close())
	require.True(t, ctx.BufferMapped(lo), "lower buffer unmapped under an open region")
	require.True(t, ctx.BufferMapped(hi), "upper buffer unmapped under an open region")
	mr.Bytes()[0], mr.Bytes()[2*4096-1] = 1, 2 // would fault if unmapped

	require.NoError(t, mr.Close())
	require.False(t, ctx.BufferMapped(lo), "unmapped with the region")
	require.False(t, ctx.BufferMapped(hi), "unmapped with the region")
}

// hugePagesFree returns HugePages_Free of /proc/meminfo (0 when unknown).
func hugePagesFree(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "HugePages_Free:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(rest))
			return n
		}
	}
	return 0
}

// protectionAt returns the permissions /proc/self/maps gives the mapping
// holding addr ("" when none does).
func protectionAt(t *testing.T, addr uintptr) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		var lo, hi uintptr
		var perms string
		if _, err := fmt.Sscanf(line, "%x-%x %s", &lo, &hi, &perms); err == nil && lo <= addr && addr < hi {
			return perms
		}
	}
	return ""
}

// With huge pages reserved, a guarded buffer gets them, aligned, between
// inaccessible pages: the data was mapped right after a one-page guard of
// a normal mapping, at a huge-page-aligned address only by chance, so
// HugePages with Guard fell back to normal pages (nearly) every time.
func TestHugePagesWithGuard(t *testing.T) {
	if hugePagesFree(t) < 2 {
		t.Skip("fewer than 2 huge pages free (vm.nr_hugepages)")
	}
	for range 4 {
		b, err := ctx.AllocBuffer(4096, ctx.BufferOptions{HugePages: true, Guard: true})
		require.NoError(t, err)
		require.True(t, b.HugePages(), "reserved huge pages not used with Guard")
		at := uintptr(b.Pointer())
		require.Zero(t, at%ctx.HugePageSize)
		require.Equal(t, ctx.HugePageSize, b.Len())
		b.Bytes()[0], b.Bytes()[b.Len()-1] = 1, 2
		require.Equal(t, "---p", protectionAt(t, at-1), "guard before")
		require.Equal(t, "---p", protectionAt(t, at+uintptr(b.Len())), "guard after")
		require.NoError(t, b.Close())
		require.Empty(t, protectionAt(t, at), "unmapped at Close")
	}
}

// RegisterBuffer holds the buffer before it waits for the tree's lock: a
// Close of the buffer while it waits (here while another registration holds
// the lock) leaves the buffer mapped for the region. Before, RegisterBuffer
// took the buffer's memory and held the buffer only once it had the lock,
// so a Close in between unmapped the memory, and a provider that did not
// look at the mapping made the region over unmapped memory.
func TestRegisterBufferClosedWhileWaiting(t *testing.T) {
	f, c := openFake(t)
	defer c.Close()
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	other, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	require.NoError(t, err)
	defer other.Close()
	buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	require.NoError(t, err)

	inside, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.onRegister = func() {
		once.Do(func() {
			close(inside)
			<-release // the tree's lock held
		})
	}
	defer func() { f.onRegister = nil }()
	first := make(chan error, 1)
	go func() {
		mr, err := pd.RegisterBuffer(other, ctx.AccessLocalWrite)
		if err == nil {
			err = mr.Close()
		}
		first <- err
	}()
	<-inside
	type result struct {
		mr  *ctx.MemoryRegion
		err error
	}
	second := make(chan result, 1)
	go func() {
		mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite)
		second <- result{mr, err}
	}()
	time.Sleep(50 * time.Millisecond) // the second registration waits for the lock
	require.NoError(t, buf.Close())
	close(release)
	require.NoError(t, <-first)
	r := <-second
	if r.err != nil {
		require.ErrorIs(t, r.err, ctx.ErrClosed)
		return
	}
	require.True(t, ctx.BufferMapped(buf), "a region over unmapped memory")
	r.mr.Bytes()[0] = 1 // would fault if unmapped
	require.NoError(t, r.mr.Close())
	require.False(t, ctx.BufferMapped(buf), "unmapped with the region")
}
