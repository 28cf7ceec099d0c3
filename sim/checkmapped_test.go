package sim

import (
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestRegisterMemoryLastPage: a region in the last page of the address
// space (never mapped for a process) is refused like any other unmapped
// range: the rounding up of its end must not leave that page unchecked.
func TestRegisterMemoryLastPage(t *testing.T) {
	f := New(Options{Strict: true})
	defer f.Close()
	d, err := f.openDevice("sim0")
	require.NoError(t, err)
	defer d.Close()
	p, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	defer p.Close()
	for _, r := range []struct{ addr, length uint64 }{
		{^uint64(0) - 10, 5},
		{^uint64(0) - 10, 10},
		{^uint64(0) - 1<<20, 1 << 20},
	} {
		require.ErrorIs(t, checkMapped(r.addr, r.length), syscall.EFAULT, "[%#x,+%d)", r.addr, r.length)
		addr := r.addr
		mr, err := p.RegisterMemory(*(*unsafe.Pointer)(unsafe.Pointer(&addr)), r.length, ctx.AccessLocalWrite)
		if err == nil {
			_ = mr.Close()
		}
		require.ErrorIs(t, err, syscall.EFAULT, "[%#x,+%d)", r.addr, r.length)
	}
}
