//go:build cgo && linux

package emulate

/*
#include <stdlib.h>
#include <string.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/mlx5kit/mlx5kit/sim"
)

// backingDevice is the character device every uverbs descriptor is a
// descriptor of: libibverbs compares its number with sysfs dev.
const backingDevice = "/dev/null"

var global struct {
	mu     sync.Mutex
	k      *kernel
	sysfs  string
	err    error
	tried  bool
	fabric *sim.Fabric
}

func init() {
	if os.Getenv(EnvEmulate) != "1" {
		return
	}
	if err := Enable(); err != nil {
		fmt.Fprintf(os.Stderr, "mlx5kit: %s=1 but the emulated kernel is off: %v\n", EnvEmulate, err)
	}
}

// Enable switches the emulation on for this process: it builds the
// software HCA (a Fabric in engine mode, strict, with the link layer
// MLX5KIT_EMULATE_LINK names, joined to the shared fabric MLX5KIT_SIM_FABRIC
// names when it is set, so that the QPs of processes naming one fabric reach
// each other, or to the TCP link MLX5KIT_SIM_LINK names, which then wins,
// with the key in MLX5KIT_SIM_LINK_KEY), writes its sysfs tree, points SYSFS_PATH at
// it and lets the interposed C library calls reach the emulated kernel. It
// must run before libibverbs lists devices for the first time (libibverbs
// reads SYSFS_PATH once); MLX5KIT_EMULATE=1 calls it while the process
// starts. Calling it again returns the first call's result.
func Enable() error {
	global.mu.Lock()
	defer global.mu.Unlock()
	if global.tried {
		return global.err
	}
	global.tried = true
	global.err = enable()
	return global.err
}

func enable() error {
	if err := checkUserMemory(); err != nil {
		return fmt.Errorf("emulate: the model reads the caller's memory with process_vm_readv, which this process may not use: %w", err)
	}
	ll, err := linkLayerFromEnv(os.Getenv(envLink))
	if err != nil {
		return err
	}
	ports, err := portsFromEnv(os.Getenv(envPorts))
	if err != nil {
		return err
	}
	// The TCP link sim.EnvLink names, if any, as for the kit's own
	// programs: sim.EnvFabric is then ignored, and the link's key read
	// from sim.EnvLinkKey.
	fabric, link := os.Getenv(sim.EnvFabric), os.Getenv(sim.EnvLink)
	if link != "" {
		fabric = ""
	}
	f := sim.New(sim.Options{Mode: sim.Engine, Strict: true, LinkLayer: ll, Fabric: fabric, Link: link, Ports: ports})
	devs, err := describeFabric(f)
	if err != nil {
		return err
	}
	if err := nameDevices(devs, os.Getenv(envNames)); err != nil {
		return err
	}
	cdev, err := charDevNumber(backingDevice)
	if err != nil {
		return err
	}
	var dir string
	for _, base := range sysfsBases() {
		if dir, err = sharedSysfs(base, devs, cdev); err == nil {
			break
		}
	}
	if err != nil {
		return err
	}
	if err := os.Setenv("SYSFS_PATH", dir); err != nil {
		return fmt.Errorf("emulate: set SYSFS_PATH: %w", err)
	}
	k := newKernel(f, devs, backingDevice, cdev)
	k.noIoctl = os.Getenv(envABI) == abiWrite
	k.hooks = hooks{
		markFD: func(fd, kind int) { C.mk_emu_mark_fd(C.int(fd), C.int(kind)) },
		hideFD: func(fd int, hide bool) {
			h := C.int(0)
			if hide {
				h = 1
			}
			C.mk_emu_hide_fd(C.int(fd), h)
		},
		mapped: interposerMapped,
	}
	global.k, global.sysfs, global.fabric = k, dir, f
	// A polling loop of this process on an emulated device runs the
	// model's rounds itself (ctx.Context.Idle).
	verbs.SetIdle(simadopt.Idle(f))
	protectRuntimeFDs()
	C.mk_emu_set_on(1)
	return nil
}

// Enabled reports whether the emulation is on.
func Enabled() bool { return C.mk_emu_is_on() != 0 }

// Fabric returns the software HCA behind the emulated kernel, nil while
// the emulation is off.
func Fabric() *sim.Fabric {
	global.mu.Lock()
	defer global.mu.Unlock()
	return global.fabric
}

// SysfsPath returns the sysfs tree the emulation generated ("" while it is
// off).
func SysfsPath() string {
	global.mu.Lock()
	defer global.mu.Unlock()
	return global.sysfs
}

func linkLayerFromEnv(v string) (ctx.LinkLayer, error) {
	if v == "" {
		return ctx.LinkLayerInfiniBand, nil
	}
	ll, err := ctx.ParseLinkLayer(v)
	if err != nil {
		return 0, fmt.Errorf("emulate: %s=%q: %w", envLink, v, err)
	}
	return ll, nil
}

// portsFromEnv parses envPorts: empty for one port, else 1 to 255.
func portsFromEnv(v string) (uint8, error) {
	if v == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 255 {
		return 0, fmt.Errorf("emulate: %s=%q: want a port count of 1 to 255: %w", envPorts, v, ctx.ErrInvalidArgument)
	}
	return uint8(n), nil
}

// charDevNumber returns the number of a character device.
func charDevNumber(path string) (devNumber, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return devNumber{}, fmt.Errorf("emulate: stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return devNumber{}, fmt.Errorf("emulate: %s is not a character device: %w", path, ctx.ErrNotSupported)
	}
	return devNumber{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}, nil
}

// sysfsBases are the directories generated trees are kept in, in order of
// preference: the user's cache directory, then one of the user's own in
// the temporary directory.
func sysfsBases() []string {
	var bases []string
	if dir, err := os.UserCacheDir(); err == nil {
		bases = append(bases, filepath.Join(dir, "mlx5kit", "emulate"))
	}
	return append(bases, filepath.Join(os.TempDir(), "mlx5kit-emulate-"+strconv.Itoa(os.Getuid())))
}

func active() *kernel {
	global.mu.Lock()
	defer global.mu.Unlock()
	return global.k
}

// neg returns -errno as the interposer expects it.
func neg(en syscall.Errno) C.long {
	if en == 0 {
		return -C.long(unix.EIO)
	}
	return -C.long(en)
}

//export mk_emu_go_open
func mk_emu_go_open(path *C.char, flags C.int) C.long {
	k := active()
	if k == nil {
		return neg(unix.ENOENT)
	}
	name, en := copyInPath(uintptr(unsafe.Pointer(path)))
	if en != 0 {
		return neg(en)
	}
	fd, en := k.open(name, int(flags))
	if en != 0 {
		return neg(en)
	}
	return C.long(fd)
}

//export mk_emu_go_lookup
func mk_emu_go_lookup(path *C.char, out *C.char, size C.size_t) C.long {
	k := active()
	if k == nil {
		return neg(unix.ENOENT)
	}
	name, en := copyInPath(uintptr(unsafe.Pointer(path)))
	if en != 0 {
		return neg(en)
	}
	backing, en := k.lookup(name)
	if en != 0 {
		return neg(en)
	}
	if len(backing)+1 > int(size) {
		return neg(unix.ENAMETOOLONG)
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(out)), int(size))
	copy(dst, backing)
	dst[len(backing)] = 0
	return 0
}

//export mk_emu_go_ioctl
func mk_emu_go_ioctl(fd C.int, request C.ulong, arg C.uintptr_t) C.long {
	k := active()
	if k == nil {
		return neg(unix.EBADF)
	}
	if en := k.ioctl(int(fd), uint(request), uintptr(arg)); en != 0 {
		logRefusal(true, uintptr(arg), en)
		return neg(en)
	}
	return 0
}

//export mk_emu_go_write
func mk_emu_go_write(fd C.int, buf C.uintptr_t, count C.size_t) C.long {
	k := active()
	if k == nil {
		return neg(unix.EBADF)
	}
	if count > 1<<30 {
		return neg(unix.EINVAL)
	}
	n, en := k.write(int(fd), uintptr(buf), int(count))
	if en != 0 {
		logRefusal(false, uintptr(buf), en)
		return neg(en)
	}
	return C.long(n)
}

//export mk_emu_go_mmap
func mk_emu_go_mmap(addr C.uintptr_t, length C.size_t, prot, flags, fd C.int, off C.int64_t, out *C.uintptr_t) C.long {
	k := active()
	if k == nil {
		return neg(unix.EBADF)
	}
	got, en := k.mmap(uintptr(addr), uintptr(length), int(prot), int(flags), int(fd), int64(off))
	if en != 0 {
		return neg(en)
	}
	*out = C.uintptr_t(got)
	return 0
}

// goMunmaps counts the interposer's calls of mk_emu_go_munmap (tests).
var goMunmaps atomic.Int64

//export mk_emu_go_munmap
func mk_emu_go_munmap(addr C.uintptr_t, length C.size_t) {
	goMunmaps.Add(1)
	if k := active(); k != nil {
		k.munmap(uintptr(addr), uintptr(length))
	}
}

//export mk_emu_go_close
func mk_emu_go_close(fd C.int) C.long {
	k := active()
	if k == nil {
		return neg(unix.EBADF)
	}
	if en := k.close(int(fd)); en != 0 {
		return neg(en)
	}
	return 0
}

// mk_emu_go_forget drops what the kernel holds for a descriptor whose
// number the program has made another file's (dup2, dup3), without
// closing it.
//
//export mk_emu_go_forget
func mk_emu_go_forget(fd C.int) {
	if k := active(); k != nil {
		_ = k.release(int(fd), false)
	}
}

// mk_emu_go_move_hidden moves an event file's write end away from fd
// before dup2 or dup3 makes the number the program's (kernel.moveWriteFD):
// 1 if fd was one, for the interposer to close fd should the dup fail.
//
//export mk_emu_go_move_hidden
func mk_emu_go_move_hidden(fd C.int) C.int {
	if k := active(); k != nil && k.moveWriteFD(int(fd)) {
		return 1
	}
	return 0
}
