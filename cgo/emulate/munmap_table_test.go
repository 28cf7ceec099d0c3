//go:build cgo && linux

package emulate

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestInterposedMunmapAsksGoOnlyForKnownMappings: the interposed munmap
// calls into Go for a range that holds a mapping the kernel made, and for
// nothing else: not for memory the kernel never mapped, and not for a
// mapping the kernel forgot when its descriptor closed, even while another
// emulated mapping lives. (A call into Go from a munmap the C library
// makes on a thread the runtime is starting aborts the process.)
func TestInterposedMunmapAsksGoOnlyForKnownMappings(t *testing.T) {
	k := testKernel(t, ctx.LinkLayerInfiniBand)
	k.hooks.mapped = interposerMapped
	a := newArena(t)
	page := uintptr(k.pageSize)
	off := int64(mmapClockInfoCmd<<8) * int64(page)
	open := func() int {
		fd := openNode(t, k, 0)
		en, _, _ := getContext(k, a, fd, ucontextReq(16, 4, 0))
		require.Zero(t, en)
		return fd
	}
	mapPage := func(fd int) uintptr {
		p, en := k.mmap(0, page, unix.PROT_READ, unix.MAP_SHARED, fd, off)
		require.Zero(t, en)
		return p
	}

	fd1, fd2 := open(), open()
	p1 := mapPage(fd1)
	calls := goMunmaps.Load()
	require.Zero(t, interposedMunmap(p1, page))
	require.Equal(t, calls+1, goMunmaps.Load(), "munmap of a mapping the kernel made")
	k.munmap(p1, page) // the process's kernel would have forgotten it

	other, err := unix.Mmap(-1, 0, int(page), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	p2, p3 := mapPage(fd1), mapPage(fd2) // p3 lives on
	calls = goMunmaps.Load()
	require.Zero(t, interposedMunmap(uintptr(unsafe.Pointer(&other[0])), page))
	require.Equal(t, calls, goMunmaps.Load(), "munmap of memory the kernel never mapped")

	require.Zero(t, k.close(fd1)) // forgets p2, which stays mapped
	calls = goMunmaps.Load()
	require.Zero(t, interposedMunmap(p2, page))
	require.Equal(t, calls, goMunmaps.Load(), "munmap of a mapping forgotten when its descriptor closed")

	require.Zero(t, interposedMunmap(p3, page))
	require.Equal(t, calls+1, goMunmaps.Load(), "munmap of the mapping that lives on")
	k.munmap(p3, page)
}
