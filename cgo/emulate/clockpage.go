//go:build cgo && linux

package emulate

/*
#include "uverbs_abi.h"
*/
import "C"

import (
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/mlx5kit/mlx5kit/sim"
)

// clockInfoVersions is the clock_info_versions bitmap GET_CONTEXT answers:
// the one layout of the clock info page, MLX5_IB_CLOCK_INFO_V1.
const clockInfoVersions = 1 << C.MLX5_IB_CLOCK_INFO_V1

// clockRefreshPeriod bounds the time between two updates of the clock
// info page.
const clockRefreshPeriod = 10 * time.Millisecond

// clockPage is the clock info page of the emulated device, what mlx5_core
// keeps for mlx5_ib to map: one page holding a struct mlx5_ib_clock_info
// that describes the model's device clock (sim.ClockKHz), the clock the
// model stamps CQEs from. Contexts map it read-only
// (MLX5_IB_MMAP_CLOCK_INFO, index MLX5_IB_CLOCK_INFO_V1) and libmlx5's
// mlx5dv_get_clock_info copies it. The page lives in a memory file the
// kernel maps writable for itself, made at the first context mapping and
// released with the last one; while a context has it mapped, a goroutine
// rewrites it every refresh period with the kernel's sign protocol: the
// sign word is made odd (MLX5_IB_CLOCK_INFO_KERNEL_UPDATING)
// while the fields change, then set to two more than before, so a reader
// that saw the same even sign before and after its copy has a consistent
// snapshot.
type clockPage struct {
	fabric *sim.Fabric
	fd     int                          // the memory file holding the page
	page   []byte                       // the kernel's writable mapping
	info   *C.struct_mlx5_ib_clock_info // the page's contents
	// period is how often the refresher rewrites the page.
	period time.Duration
	// writeMu serialises the writers of the page and its release;
	// released says the page is gone.
	writeMu  sync.Mutex
	released bool
	// users counts the contexts' mappings of the page; stop ends the
	// refresher that runs while users > 0 (both under kernel.mu).
	users int
	stop  chan struct{}
}

// newClockPage makes the page in a sealed memory file: once the kernel's
// own writable mapping exists, F_SEAL_FUTURE_WRITE refuses every later
// writable mapping, so a context's read-only mapping cannot be made
// writable (as mlx5_ib clears VM_MAYWRITE).
func newClockPage(f *sim.Fabric, pageSize int) (*clockPage, syscall.Errno) {
	info, ok := simadopt.ClockInfo(f)
	if !ok {
		return nil, unix.ENODEV
	}
	fd, err := unix.MemfdCreate("mlx5_ib clock info", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, errnoOf(err)
	}
	if err := unix.Ftruncate(fd, int64(pageSize)); err != nil {
		unix.Close(fd)
		return nil, errnoOf(err)
	}
	page, err := unix.Mmap(fd, 0, pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, errnoOf(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_FUTURE_WRITE); err != nil {
		unix.Munmap(page)
		unix.Close(fd)
		return nil, errnoOf(err)
	}
	p := &clockPage{fabric: f, fd: fd, page: page, info: (*C.struct_mlx5_ib_clock_info)(unsafe.Pointer(&page[0]))}
	// The fields that never change, as mlx5_core sets them once.
	p.info.shift = C.__u32(info.Shift)
	p.info.mask = C.__u64(info.Mask)
	overflow := clockOverflowNanoseconds(info)
	p.info.overflow_period = C.__u64(overflow)
	// Refresh well inside the overflow period, so that a conversion never
	// spans more cycles than fit, and at least every clockRefreshPeriod,
	// as a kernel whose clock is steered rewrites the page often.
	p.period = min(time.Duration(overflow/2), clockRefreshPeriod)
	p.update()
	return p, 0
}

// clockOverflowNanoseconds is the longest time after a snapshot that its
// conversion stays exact, computed as mlx5_core does: the cycles whose
// product with mult fits 63 bits, at most a third of the counter's range,
// in nanoseconds. The page's overflow_period holds it (libmlx5 reports it
// as mlx5dv_context.max_clock_info_update_nsec); mlx5_core stores the
// same period in jiffies there (docs/hardware.md).
func clockOverflowNanoseconds(info ctx.ClockInfo) uint64 {
	cycles := min((1<<63-1)/uint64(info.Mult), info.Mask/3)
	return cycles * uint64(info.Mult) >> info.Shift
}

// update copies a fresh snapshot of the model's clock into the page. The
// snapshot is taken under writeMu, so that the page never goes back to an
// earlier one.
func (p *clockPage) update() {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	if p.released {
		return
	}
	info, ok := simadopt.ClockInfo(p.fabric)
	if !ok {
		return
	}
	sign := (*uint32)(unsafe.Pointer(&p.info.sign))
	s := atomic.LoadUint32(sign)
	atomic.StoreUint32(sign, s|C.MLX5_IB_CLOCK_INFO_KERNEL_UPDATING)
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&p.info.cycles)), info.LastCycles)
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&p.info.mult)), info.Mult)
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&p.info.nsec)), info.Nanoseconds)
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&p.info.frac)), info.Frac)
	atomic.StoreUint32(sign, s+2*C.MLX5_IB_CLOCK_INFO_KERNEL_UPDATING)
}

// mapInto maps the page read-only for a context (kernel.mu held): the
// checks of mlx5_ib_mmap_clock_info_page, then the memory file at the
// caller's address and flags. The first mapping starts the refresher.
func (p *clockPage) mapInto(addr, length uintptr, prot, flags int, index int) (uintptr, syscall.Errno) {
	if index != C.MLX5_IB_CLOCK_INFO_V1 {
		return 0, unix.EOPNOTSUPP
	}
	if prot&(unix.PROT_WRITE|unix.PROT_EXEC) != 0 {
		return 0, unix.EPERM
	}
	mflags := flags&^(unix.MAP_TYPE|unix.MAP_ANONYMOUS) | unix.MAP_SHARED
	got, _, e := unix.Syscall6(unix.SYS_MMAP, addr, length, uintptr(prot), uintptr(mflags), uintptr(p.fd), 0)
	if e != 0 {
		return 0, e
	}
	// A context mapping the page sees a snapshot of now.
	p.update()
	p.users++
	if p.users == 1 {
		p.stop = make(chan struct{})
		go p.refresh(p.stop, p.period)
	}
	return got, 0
}

// unmapped forgets one context's mapping (kernel.mu held). The last one
// stops the refresher and releases the page, and reports true: the kernel
// makes a new one for the next mapping. The contexts' own mappings of the
// memory file outlive it.
func (p *clockPage) unmapped() (last bool) {
	p.users--
	if p.users > 0 {
		return false
	}
	close(p.stop)
	p.stop = nil
	p.release()
	return true
}

// release unmaps the kernel's view of the page and closes its memory file;
// a refresher still running writes nothing more.
func (p *clockPage) release() {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	p.released = true
	p.info = nil
	unix.Munmap(p.page)
	unix.Close(p.fd)
}

// refresh rewrites the page every period until stop closes, as mlx5_core's
// overflow work does.
func (p *clockPage) refresh(stop <-chan struct{}, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.update()
		}
	}
}
