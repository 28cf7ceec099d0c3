//go:build cgo && linux

package emulate

/*
#include "uverbs_abi.h"
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/mlx5kit/mlx5kit/sim"
)

// devPrefix is the directory of the device nodes the kernel answers for.
const devPrefix = "/dev/infiniband/"

// maxFD bounds the descriptors the kernel hands out (the interposer keeps
// one byte per descriptor below it).
const maxFD = C.MK_EMU_MAX_FDS

// Descriptor kinds, as the interposer records them.
const (
	fdUverbs = C.MK_EMU_FD_UVERBS
	fdEvent  = C.MK_EMU_FD_EVENT
)

// hooks tell the interposer about descriptors and mappings; a kernel made
// for a test has none.
type hooks struct {
	markFD func(fd, kind int)
	// hideFD marks (or unmarks) the write end of an event file's pipe
	// or the clock info page's memory file, a descriptor the program
	// never sees, for close, closefrom and close_range to leave open.
	hideFD func(fd int, hide bool)
	// mapped reports a mapping made (add) or forgotten, by its start.
	mapped func(addr uintptr, add bool)
}

// kernel is the kernel side of the uverbs ABI for the devices of one
// Fabric: device nodes, the ioctl methods and write commands of the
// uverbs core and of mlx5_ib, event descriptors and the mmap of UAR pages.
// Its methods are what the interposed open, ioctl, write, mmap, munmap and
// close call; each returns 0 or an errno, as the system call would.
type kernel struct {
	mu      sync.Mutex
	fabric  *sim.Fabric
	devs    []sysfsDevice
	backing string    // the character device behind every uverbs descriptor
	cdev    devNumber // its number, which sysfs dev reports
	// noIoctl answers every ioctl with ENOTTY, as a kernel without the
	// ioctl framework: libibverbs then uses write() and sysfs alone.
	noIoctl  bool
	pageSize int
	hooks    hooks

	files  map[int]*ufile
	events map[int]*eventFile
	// writeEnds are the event files' pipes' write ends the model holds
	// open (hidden from closefrom and close_range), by number: only the
	// file a number is listed for closes it (closeWriteFD), and a dup2
	// onto it moves it away (moveWriteFD).
	writeEnds map[int]*eventFile
	maps      map[uintptr]*mapping
	// clock is the clock info page while a context maps it.
	clock *clockPage
	// calls counts the commands answered, by method or command name
	// ("ioctl GET_CONTEXT", "write QUERY_DEVICE", "mmap UAR").
	calls map[string]int
	// notices is where the emulation says, once, what it does not
	// emulate when a program reaches for it (standard error);
	// rdmaCMNoted is set once it has said so of rdma_cm.
	notices     io.Writer
	rdmaCMNoted bool
}

// ufile is an open uverbs device node.
type ufile struct {
	fd   int
	dev  *sysfsDevice
	uctx *ucontext // nil until GET_CONTEXT
}

// ucontext is what GET_CONTEXT creates: the device opened on the model and
// the user access region (UAR) pages of the context.
type ucontext struct {
	dev        provider.Device
	cqeVersion uint8
	// staticPages are the UAR pages of the bfregs the library asked for
	// (MLX5_IB_MMAP_REGULAR_PAGE, _WC_PAGE, _NC_PAGE index them);
	// dynPages more can be allocated one by one (MLX5_IB_MMAP_ALLOC_WC),
	// dynBusy holds those taken.
	staticPages, dynPages int
	dynBusy               map[int]bool
	// objects are the context's verbs objects by handle.
	objects map[uint32]*uobject
	// nextHandle is one past the highest handle given out; freeHandles
	// the handles below it that no object holds.
	nextHandle  uint32
	freeHandles handleHeap
	// async routes the model's async events to the context's async
	// event descriptors.
	async asyncEvents
}

// eventFile is an event descriptor: the read end of a pipe the model
// writes whole event records into.
type eventFile struct {
	fd int
	// writeMu guards writeFD, which the engine writes completion events
	// to (cqEvents.post) and close sets to -1.
	writeMu sync.Mutex
	writeFD int
	// writers are the objects whose records were written, oldest first
	// (nil for a port event): the unread records are the last of them.
	// Those read are forgotten when the list reaches trimAt.
	writers []*eventTally
	trimAt  int
	// comp marks a completion channel (CREATE_COMP_CHANNEL), which CQs
	// may name.
	comp bool
	// owner is the uverbs file that created it: only its commands may
	// name it (lookup_get_fd_uobject, EBADF otherwise).
	owner *ufile
}

// takeWriteFD returns the write end and forgets it: no event goes to its
// number once the caller closes it (the program's next descriptor may
// take the number). The unread events are discarded, read out of the
// pipe: a program that keeps the read end open (its uverbs file closed,
// release) then reads the end of the pipe at once, as a kernel answers
// EIO once the queue is freed (ib_uverbs_free_event_queue), and a read
// blocked already is woken.
func (e *eventFile) takeWriteFD() int {
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	fd := e.writeFD
	if fd >= 0 {
		e.discardUnread()
		e.readUnread()
	}
	e.writeFD = -1
	return fd
}

// mapping is a UAR page the library mapped: anonymous shared memory the
// model watches in place of device memory.
type mapping struct {
	file   *ufile
	addr   uintptr
	length uintptr
	prot   int // the protection it was mapped with
	cmd    int // MLX5_IB_MMAP_* command of the offset
	index  int // UAR page index within the context
	// registers are the QPs whose doorbell register in the page the
	// model watches (bfregRegister): forgetMapping ends the watch before
	// the page goes.
	registers map[*uobject]bool
}

func newKernel(f *sim.Fabric, devs []sysfsDevice, backing string, cdev devNumber) *kernel {
	return &kernel{
		fabric: f, devs: devs, backing: backing, cdev: cdev,
		pageSize:  unix.Getpagesize(),
		files:     map[int]*ufile{},
		events:    map[int]*eventFile{},
		writeEnds: map[int]*eventFile{},
		maps:      map[uintptr]*mapping{},
		calls:     map[string]int{},
		notices:   os.Stderr,
	}
}

func (k *kernel) markFD(fd, kind int) {
	if k.hooks.markFD != nil {
		k.hooks.markFD(fd, kind)
	}
}

func (k *kernel) hideFD(fd int, hide bool) {
	if k.hooks.hideFD != nil {
		k.hooks.hideFD(fd, hide)
	}
}

// closeWriteFD closes the write end of e's pipe that takeWriteFD
// returned (k.mu not held) and unmarks it, with k.mu held so that the mark
// of a pipe newEventFile makes meanwhile under the number stays. A number
// moveWriteFD gave up (a dup2 onto it made it the program's) is left
// alone.
func (k *kernel) closeWriteFD(e *eventFile, fd int) {
	if fd < 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closeWriteFDLocked(e, fd)
}

// closeWriteFDLocked is closeWriteFD with k.mu held.
func (k *kernel) closeWriteFDLocked(e *eventFile, fd int) {
	if fd < 0 || k.writeEnds[fd] != e {
		return
	}
	delete(k.writeEnds, fd)
	_ = unix.Close(fd)
	k.hideFD(fd, false)
}

// moveWriteFD makes way for a dup2 or dup3 onto fd, the number of an
// event file's write end the program never saw (on a kernel it is not
// open, and the call succeeds): the write end moves to another number,
// and fd is no longer hidden or the model's, so that the call replaces
// it and the model's events never reach the program's file there. It
// reports whether fd was a write end (or the clock info page's memory
// file, moveClockFD): the caller closes fd if its dup fails, as nothing
// else holds it then. Should the move fail (no
// descriptor left), the file loses its write end: the events already in
// it can be read, later ones are lost.
func (k *kernel) moveWriteFD(fd int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.writeEnds[fd]
	if !ok {
		return k.moveClockFD(fd)
	}
	delete(k.writeEnds, fd)
	e.writeMu.Lock()
	if e.writeFD == fd {
		// (A write end takeWriteFD took is about to be closed: the
		// caller's dup closes it instead.)
		nfd, err := dupHidden(fd)
		if err != nil {
			// The records in the pipe stay readable; later
			// events are lost.
			e.writeFD = -1
		} else {
			e.writeFD = nfd
			k.writeEnds[nfd] = e
			k.hideFD(nfd, true)
		}
	}
	e.writeMu.Unlock()
	k.hideFD(fd, false)
	return true
}

// moveClockFD is moveWriteFD for the clock info page's memory file (k.mu
// held): it moves to another number, and reports whether fd was it.
// Should the move fail, later contexts cannot map the page.
func (k *kernel) moveClockFD(fd int) bool {
	p := k.clock
	if p == nil || p.fd != fd {
		return false
	}
	nfd, err := dupHidden(fd)
	if err != nil {
		p.fd = -1
	} else {
		p.fd = nfd
		k.hideFD(nfd, true)
	}
	k.hideFD(fd, false)
	return true
}

// dupHidden duplicates fd onto another number below maxFD, one the
// interposer can mark hidden (EMFILE when none is free there).
func dupHidden(fd int) (int, error) {
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil && nfd >= maxFD {
		_ = unix.Close(nfd)
		return -1, unix.EMFILE
	}
	return nfd, err
}

func (k *kernel) mapped(addr uintptr, add bool) {
	if k.hooks.mapped != nil {
		k.hooks.mapped(addr, add)
	}
}

// device returns the device a node path names (/dev/infiniband/uverbsN).
func (k *kernel) device(path string) (*sysfsDevice, syscall.Errno) {
	name, ok := strings.CutPrefix(path, devPrefix)
	if !ok {
		return nil, unix.ENOENT
	}
	n, ok := strings.CutPrefix(name, "uverbs")
	if !ok || n == "" || strings.TrimLeft(n, "0123456789") != "" || (len(n) > 1 && n[0] == '0') {
		return nil, unix.ENOENT
	}
	i, err := strconv.Atoi(n)
	if err != nil {
		return nil, unix.ENOENT
	}
	for d := range k.devs {
		if k.devs[d].Index == i {
			return &k.devs[d], 0
		}
	}
	return nil, unix.ENOENT
}

// lookup returns the path of the character device that stands for a
// device node, for stat.
func (k *kernel) lookup(path string) (string, syscall.Errno) {
	if _, en := k.device(path); en != 0 {
		return "", en
	}
	return k.backing, 0
}

// open opens a device node: a descriptor of the backing character device,
// so that fstat reports the number sysfs gives, with the uverbs file
// behind it.
func (k *kernel) open(path string, flags int) (int, syscall.Errno) {
	dev, en := k.device(path)
	if en != 0 {
		if path == devPrefix+"rdma_cm" {
			k.noteRdmaCM()
		}
		return -1, en
	}
	if flags&unix.O_DIRECTORY != 0 {
		return -1, unix.ENOTDIR
	}
	if flags&(unix.O_CREAT|unix.O_EXCL) == unix.O_CREAT|unix.O_EXCL {
		return -1, unix.EEXIST
	}
	fd, err := unix.Open(k.backing, unix.O_RDWR|(flags&(unix.O_CLOEXEC|unix.O_NONBLOCK)), 0)
	if err != nil {
		return -1, errnoOf(err)
	}
	if fd >= maxFD {
		_ = unix.Close(fd)
		return -1, unix.EMFILE
	}
	k.mu.Lock()
	// The number is new to the C library: an event file the emulation
	// still holds under it was closed behind its back (a forked child).
	delete(k.events, fd)
	k.files[fd] = &ufile{fd: fd, dev: dev}
	k.mu.Unlock()
	k.markFD(fd, fdUverbs)
	return fd, 0
}

// noteRdmaCM says, once per process, that the node librdmacm opens is
// absent (ENOENT, as on a host without the rdma_ucm module): the program's
// own message ("rdma_create_event_channel failed") does not say why.
func (k *kernel) noteRdmaCM() {
	k.mu.Lock()
	noted := k.rdmaCMNoted
	k.rdmaCMNoted = true
	k.mu.Unlock()
	if !noted && k.notices != nil {
		fmt.Fprintf(k.notices, "mlx5kit emulate: %srdma_cm: rdma_cm (librdmacm) is not emulated; use the program's TCP exchange (perftest without -R)\n", devPrefix)
	}
}

// close closes a uverbs or event descriptor. Closing a uverbs descriptor
// destroys its context and closes the device on the model, and ends the
// event descriptors it created: their unread events are dropped and a read
// returns end of file at once (they stay open until closed themselves).
func (k *kernel) close(fd int) syscall.Errno { return k.release(fd, true) }

// release forgets a uverbs or event descriptor as close does; it closes
// the descriptor itself only when closeFD is set (dup2 and dup3 have
// already made the number another file's).
func (k *kernel) release(fd int, closeFD bool) syscall.Errno {
	k.mu.Lock()
	var dev provider.Device
	var uc *ucontext
	var writeFD = -1
	var ev *eventFile
	if f, ok := k.files[fd]; ok {
		delete(k.files, fd)
		if f.uctx != nil {
			uc = f.uctx
			dev = f.uctx.dev
			f.uctx = nil
		}
		for a, m := range k.maps {
			if m.file == f {
				k.forgetMapping(a, m)
			}
		}
		// Its completion channels and async event descriptors end
		// with it, open or not.
		for _, e := range k.events {
			if e.owner == f {
				k.closeWriteFDLocked(e, e.takeWriteFD())
			}
		}
	} else if e, ok := k.events[fd]; ok {
		delete(k.events, fd)
		ev = e
		writeFD = e.takeWriteFD()
	} else {
		k.mu.Unlock()
		return unix.EBADF
	}
	k.mu.Unlock()
	k.markFD(fd, 0)
	if uc != nil {
		uc.destroyObjects()
	}
	if dev != nil {
		_ = dev.Close()
	}
	k.closeWriteFD(ev, writeFD)
	if !closeFD {
		return 0
	}
	return errnoOf(unix.Close(fd))
}

// newEventFile creates an event descriptor (close-on-exec, as the kernel
// makes them).
func (k *kernel) newEventFile() (*eventFile, syscall.Errno) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, errnoOf(err)
	}
	// Both ends within the interposer's tables: the write end must be
	// marked hidden (closefrom, close_range and close leave it).
	if p[0] >= maxFD || p[1] >= maxFD {
		_ = unix.Close(p[0])
		_ = unix.Close(p[1])
		return nil, unix.EMFILE
	}
	// The model never blocks writing an event: the write end does not
	// block (the read end, the caller's, is unchanged).
	if err := unix.SetNonblock(p[1], true); err != nil {
		_ = unix.Close(p[0])
		_ = unix.Close(p[1])
		return nil, errnoOf(err)
	}
	e := &eventFile{fd: p[0], writeFD: p[1]}
	delete(k.files, e.fd) // as in open: a stale entry for the number
	k.events[e.fd] = e
	k.markFD(e.fd, fdEvent)
	k.writeEnds[e.writeFD] = e
	k.hideFD(e.writeFD, true)
	return e, 0
}

// dropEventFile undoes newEventFile (a command that failed after it).
func (k *kernel) dropEventFile(e *eventFile) {
	delete(k.events, e.fd)
	k.markFD(e.fd, 0)
	_ = unix.Close(e.fd)
	k.closeWriteFDLocked(e, e.takeWriteFD())
}

// mmap maps a UAR page of a context (the offset's MLX5_IB_MMAP_* command
// and index, as mlx5_ib decodes them) as anonymous shared memory.
func (k *kernel) mmap(addr, length uintptr, prot, flags, fd int, off int64) (uintptr, syscall.Errno) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.events[fd]; ok {
		return 0, unix.ENODEV
	}
	f, ok := k.files[fd]
	if !ok {
		return 0, unix.EBADF
	}
	if f.uctx == nil {
		return 0, unix.EINVAL
	}
	if off < 0 || off%int64(k.pageSize) != 0 || length == 0 {
		return 0, unix.EINVAL
	}
	if flags&unix.MAP_TYPE != unix.MAP_SHARED {
		return 0, unix.EINVAL
	}
	if length != uintptr(k.pageSize) {
		return 0, unix.EINVAL
	}
	pgoff := uint64(off) / uint64(k.pageSize)
	cmd := int(pgoff>>C.MK_MLX5_IB_MMAP_CMD_SHIFT) & C.MK_MLX5_IB_MMAP_CMD_MASK
	uc := f.uctx
	var index int
	switch cmd {
	case C.MLX5_IB_MMAP_REGULAR_PAGE, C.MLX5_IB_MMAP_WC_PAGE, C.MLX5_IB_MMAP_NC_PAGE:
		index = int(pgoff & (1<<C.MK_MLX5_IB_MMAP_CMD_SHIFT - 1))
		if index >= uc.staticPages {
			return 0, unix.EINVAL
		}
	case C.MLX5_IB_MMAP_ALLOC_WC:
		ext := int(pgoff&(1<<C.MK_MLX5_IB_MMAP_CMD_SHIFT-1)) | int((pgoff>>16)&0xff)<<8
		index = ext + uc.staticPages
		if ext >= uc.dynPages || uc.dynBusy[ext] {
			return 0, unix.EINVAL
		}
		uc.dynBusy[ext] = true
	case C.MLX5_IB_MMAP_GET_CONTIGUOUS_PAGES:
		return 0, unix.ENOSYS
	case C.MLX5_IB_MMAP_CLOCK_INFO:
		return k.mmapClockInfo(f, addr, length, prot, flags, int(pgoff&0xff))
	default:
		// The core clock and device memory pages are not modelled; no
		// response advertised them.
		return 0, unix.EINVAL
	}
	mflags := flags&^(unix.MAP_TYPE|unix.MAP_ANONYMOUS) | unix.MAP_SHARED | unix.MAP_ANONYMOUS
	if prot&unix.PROT_WRITE != 0 {
		// libmlx5 maps its UAR pages write-only; the model reads the
		// doorbell registers in them (bfregRegister). A writable page
		// is readable on x86 and arm64 anyway.
		prot |= unix.PROT_READ
	}
	got, _, e := unix.Syscall6(unix.SYS_MMAP, addr, length, uintptr(prot), uintptr(mflags), ^uintptr(0), 0)
	if e != 0 {
		if cmd == C.MLX5_IB_MMAP_ALLOC_WC {
			delete(uc.dynBusy, index-uc.staticPages)
		}
		return 0, e
	}
	k.maps[got] = &mapping{file: f, addr: got, length: length, prot: prot, cmd: cmd, index: index}
	k.mapped(got, true)
	k.calls["mmap UAR"]++
	return got, 0
}

// mmapClockInfo maps the clock info page for a context (k.mu held),
// making the page when no context maps it yet.
func (k *kernel) mmapClockInfo(f *ufile, addr, length uintptr, prot, flags, index int) (uintptr, syscall.Errno) {
	if k.clock == nil {
		p, en := newClockPage(k.fabric, k.pageSize)
		if en != 0 {
			return 0, en
		}
		// The memory file is a descriptor the program never opened:
		// hidden as an event file's write end is, so that the
		// program's close, closefrom and close_range leave it.
		if p.fd >= maxFD {
			p.release()
			return 0, unix.EMFILE
		}
		k.hideFD(p.fd, true)
		k.clock = p
	}
	got, en := k.clock.mapInto(addr, length, prot, flags, index)
	if en != 0 {
		if k.clock.users == 0 {
			k.clock.release()
			k.hideFD(k.clock.fd, false)
			k.clock = nil
		}
		return 0, en
	}
	k.maps[got] = &mapping{file: f, addr: got, length: length, cmd: C.MLX5_IB_MMAP_CLOCK_INFO, index: index}
	k.mapped(got, true)
	k.calls["mmap clock info"]++
	return got, 0
}

// forgetMapping drops the mapping at a (k.mu held). The model stops
// watching the doorbell registers in it first: the program's munmap
// unmaps the page once this returns.
func (k *kernel) forgetMapping(a uintptr, m *mapping) {
	for o := range m.registers {
		simadopt.ForgetRegister(o.qp)
		o.regMap = nil
	}
	m.registers = nil
	delete(k.maps, a)
	k.mapped(a, false)
	if m.cmd == C.MLX5_IB_MMAP_CLOCK_INFO && k.clock.unmapped() {
		k.hideFD(k.clock.fd, false)
		k.clock = nil
	}
}

// munmap forgets the mappings inside [addr, addr+length). A call the
// kernel's munmap refuses with EINVAL (an address that is not
// page-aligned, no length, a range past the end of the address space)
// unmaps nothing and forgets nothing.
func (k *kernel) munmap(addr, length uintptr) {
	ps := uintptr(k.pageSize)
	if addr&(ps-1) != 0 || length == 0 {
		return
	}
	if end := (addr + length + ps - 1) &^ (ps - 1); end <= addr {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for a, m := range k.maps {
		if a >= addr && a-addr < length {
			k.forgetMapping(a, m)
		}
	}
}

// callCount returns how many times a command was answered successfully.
func (k *kernel) callCount(name string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.calls[name]
}

// mappingCount returns the number of UAR and clock info pages mapped.
func (k *kernel) mappingCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.maps)
}

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if en, ok := err.(syscall.Errno); ok {
		return en
	}
	return unix.EIO
}
