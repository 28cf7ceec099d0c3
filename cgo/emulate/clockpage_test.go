//go:build cgo && linux

package emulate

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestKernelMapsClockInfoPage maps the clock info page as libmlx5 does
// (MLX5_IB_MMAP_CLOCK_INFO, index MLX5_IB_CLOCK_INFO_V1, read-only,
// shared, one page) and checks the refusals of mlx5_ib, the page's fields
// against the model's clock, the sign protocol of the updates as the
// model's time passes, and that the page goes with the last mapping.
// stableClockPageFields reads the clock info page at addr as
// mlx5dv_get_clock_info does: again while the kernel is rewriting it (the
// sign odd, or changed during the read), up to 1000 times.
func stableClockPageFields(addr uintptr) (map[string]uint64, uint32, uint32) {
	fields, s0, s1 := clockPageFields(addr)
	for i := 0; i < 1000 && (s0 != s1 || s0&1 != 0); i++ {
		fields, s0, s1 = clockPageFields(addr)
	}
	return fields, s0, s1
}

func TestKernelMapsClockInfoPage(t *testing.T) {
	k := testKernel(t, ctx.LinkLayerInfiniBand)
	a := newArena(t)
	fd := openNode(t, k, 0)
	page := uintptr(k.pageSize)
	off := func(index int) int64 { return int64(mmapClockInfoCmd<<8|index) * int64(page) }
	_, en := k.mmap(0, page, unix.PROT_READ, unix.MAP_SHARED, fd, off(0))
	require.Equal(t, unix.EINVAL, en, "no context yet")
	en, _, _ = getContext(k, a, fd, ucontextReq(16, 4, 0))
	require.Zero(t, en)

	for _, c := range []struct {
		name   string
		length uintptr
		prot   int
		flags  int
		off    int64
		want   syscall.Errno
	}{
		{"version 2", page, unix.PROT_READ, unix.MAP_SHARED, off(1), unix.EOPNOTSUPP},
		{"writable", page, unix.PROT_READ | unix.PROT_WRITE, unix.MAP_SHARED, off(0), unix.EPERM},
		{"executable", page, unix.PROT_READ | unix.PROT_EXEC, unix.MAP_SHARED, off(0), unix.EPERM},
		{"private", page, unix.PROT_READ, unix.MAP_PRIVATE, off(0), unix.EINVAL},
		{"two pages", 2 * page, unix.PROT_READ, unix.MAP_SHARED, off(0), unix.EINVAL},
	} {
		_, en := k.mmap(0, c.length, c.prot, c.flags, fd, c.off)
		require.Equal(t, c.want, en, c.name)
		require.Nil(t, k.clock, "%s: a refused mapping leaves no page", c.name)
	}
	require.Zero(t, k.mappingCount())

	f := k.fabric
	sc, err := f.Open("")
	require.NoError(t, err)
	defer sc.Close()
	clock, err := sc.Clock()
	require.NoError(t, err)
	model := clock.Info()

	p1, en := k.mmap(0, page, unix.PROT_READ, unix.MAP_SHARED, fd, off(0))
	require.Zero(t, en)
	p2, en := k.mmap(0, page, unix.PROT_READ, unix.MAP_SHARED, fd, off(0))
	require.Zero(t, en, "mapped again")
	require.Equal(t, 2, k.mappingCount())
	require.Equal(t, 2, k.callCount("mmap clock info"))
	_, _, e := unix.Syscall(unix.SYS_MPROTECT, p1, page, unix.PROT_READ|unix.PROT_WRITE)
	require.Equal(t, unix.EACCES, e, "the page cannot be made writable")

	fields, s0, s1 := stableClockPageFields(p1)
	require.Equal(t, s0, s1)
	require.Zero(t, s0&1, "not updating")
	require.NotZero(t, s0, "written since made")
	require.Equal(t, uint64(model.Mult), fields["mult"])
	require.Equal(t, uint64(model.Shift), fields["shift"])
	require.Equal(t, model.Mask, fields["mask"])
	require.Equal(t, model.Frac, fields["frac"])
	require.Equal(t, uint64(sim.ClockMask), fields["mask"])
	require.Equal(t, model.LastCycles, fields["cycles"], "a manual fabric's time stands still")
	require.Equal(t, model.Nanoseconds, fields["nsec"])
	// mlx5_core's overflow period: the cycles whose product with mult
	// fits 63 bits (a third of the 48-bit counter is more), in ns.
	want := (uint64(1)<<63 - 1) / uint64(model.Mult) * uint64(model.Mult) >> model.Shift
	require.Equal(t, want, fields["overflow_period"])
	same, _, _ := clockPageFields(p2)
	require.Equal(t, fields, same, "both mappings show the one page")

	// The model's time passes; the kernel rewrites the page within its
	// refresh period, bumping the sign by 2 each time.
	f.Advance(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	var later map[string]uint64
	var l0, l1 uint32
	for {
		later, l0, l1 = stableClockPageFields(p2)
		if later["cycles"] != fields["cycles"] || time.Now().After(deadline) {
			break
		}
		time.Sleep(clockRefreshPeriod / 2)
	}
	require.Equal(t, model.LastCycles+uint64(sim.ClockKHz)*1000, later["cycles"], "one second on")
	require.Equal(t, model.Nanoseconds+uint64(time.Second), later["nsec"])
	require.Equal(t, l0, l1)
	require.Zero(t, l0&1)
	require.Greater(t, l0, s0)
	require.Zero(t, (l0-s0)%2)

	// The last mapping takes the page with it; the next makes a new one.
	k.munmap(p1, page)
	require.NoError(t, rawMunmap(p1, page))
	require.NotNil(t, k.clock)
	k.munmap(p2, page)
	require.NoError(t, rawMunmap(p2, page))
	require.Nil(t, k.clock)
	p3, en := k.mmap(0, page, unix.PROT_READ, unix.MAP_SHARED, fd, off(0))
	require.Zero(t, en)
	again, _, _ := clockPageFields(p3)
	require.Equal(t, later["cycles"], again["cycles"])
	require.Zero(t, k.close(fd))
	require.Nil(t, k.clock, "closing the device forgets its mappings")
	require.NoError(t, rawMunmap(p3, page))
}
