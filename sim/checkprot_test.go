package sim

import (
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestRegisterMemoryProtection: as the kernel's ib_umem_get pins a
// writable region's pages for writing and the others for reading, a
// region with LocalWrite over a read-only mapping, and any region over
// an inaccessible one, is refused with EFAULT; a read-only region over a
// read-only mapping is registered.
func TestRegisterMemoryProtection(t *testing.T) {
	f := New(Options{Strict: true})
	defer f.Close()
	d, err := f.openDevice("sim0")
	require.NoError(t, err)
	defer d.Close()
	p, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	defer p.Close()
	page := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 3*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer unix.Munmap(mem)
	require.NoError(t, unix.Mprotect(mem[page:2*page], unix.PROT_READ))
	require.NoError(t, unix.Mprotect(mem[2*page:], unix.PROT_NONE))
	for _, c := range []struct {
		name   string
		off, n int
		access ctx.Access
		errno  syscall.Errno
	}{
		{"writable page, LocalWrite", 0, page, ctx.AccessLocalWrite, 0},
		{"read-only page, read only", page, page, ctx.AccessRemoteRead, 0},
		{"read-only page, LocalWrite", page, page, ctx.AccessLocalWrite, unix.EFAULT},
		{"into a read-only page, LocalWrite", page / 2, page, ctx.AccessLocalWrite, unix.EFAULT},
		{"inaccessible page, read only", 2 * page, page, 0, unix.EFAULT},
		{"into an inaccessible page, read only", page + page/2, page, 0, unix.EFAULT},
	} {
		m, err := p.RegisterMemory(unsafe.Pointer(&mem[c.off]), uint64(c.n), c.access)
		if c.errno == 0 {
			require.NoError(t, err, c.name)
			require.NoError(t, m.Close())
			continue
		}
		if err == nil {
			_ = m.Close()
		}
		require.ErrorIs(t, err, c.errno, c.name)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, c.name)
		require.ErrorContains(t, err, "ibv_reg_mr", c.name)
	}
}
