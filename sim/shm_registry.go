package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/procstat"
)

// This file is the registry of a shared fabric: a small shared-memory file
// that hands each joining process a slot, and with it a part of the fabric's
// LID, GID and QPN space (see docs/hardware.md, "A fabric shared by
// processes").

// EnvFabric is the environment variable that names the shared fabric the
// default Fabric joins: processes that name the same fabric reach each
// other's QPs. It is read when the default Fabric opens its first device.
const EnvFabric = "MLX5KIT_SIM_FABRIC"

// Errors of a shared fabric.
var (
	// ErrFabricVersion is returned when a fabric's registry was written by
	// a build that speaks another protocol version or another layout.
	ErrFabricVersion = errors.New("sim: shared fabric protocol version mismatch")
	// ErrFabricFull is returned when every slot of a shared fabric is held
	// by a live process.
	ErrFabricFull = errors.New("sim: shared fabric is full")
)

const (
	// shmVersion is the protocol version of the registry, the rings and the
	// messages. A process refuses a fabric of another version. Version 5:
	// a record opens with its mark (shm_ring.go), published without a
	// fence, and the senders word replaces the wake word's bump per
	// record. Version 6: a slot records its process's number of HCAs
	// (slotDevices). Version 7: one-line records of small requests
	// (wireSmall). Version 8: an 8-byte atomic's word and answer are in
	// host byte order (atomicOp), no longer big-endian. Version 9: a
	// one-line request carries the ACK held for its destination
	// (wireSmallAck), and requests follow the answers held.
	shmVersion = 9
	// shmMagic opens the registry file.
	shmMagic = 0x4d4c58354b534631 // "MLX5KSF1"
	// shmMaxSlots is the number of processes a fabric holds at once.
	shmMaxSlots = 64
	// shmMaxDevices is the number of HCAs a process of a shared fabric
	// may have: the LID and GID space of a slot.
	shmMaxDevices = 64
	// shmSlotQPNs is the size of the QPN range of a slot.
	shmSlotQPNs = 1 << 16

	regHeaderSize = 64
	regSlotSize   = 64
	regSize       = regHeaderSize + shmMaxSlots*regSlotSize

	// Registry header fields.
	regMagic    = 0
	regVersion  = 8
	regSlots    = 12
	regLink     = 16
	regRingSize = 20
	regNextGen  = 24
	// Slot fields.
	slotPID     = 0
	slotStart   = 8
	slotGen     = 16
	slotDevices = 24
	slotLastGen = 32 // the generation of the slot's last owner, once it is free
)

// shmDir is where the fabric's files live (a tmpfs); tests may point it
// elsewhere.
var shmDir = "/dev/shm"

// CheckFabricName refuses, with an error wrapping ctx.ErrInvalidArgument,
// a name no shared fabric may have (Options.Fabric, MLX5KIT_SIM_FABRIC,
// SweepFabric): it becomes part of file names, so it is 1 to 64 of
// [A-Za-z0-9._-], not starting with a dot.
func CheckFabricName(name string) error {
	if !validFabricName(name) {
		return fmt.Errorf("sim: fabric name %q: want 1 to 64 of [A-Za-z0-9._-], not starting with a dot: %w", name, ctx.ErrInvalidArgument)
	}
	return nil
}

// validFabricName accepts the names a fabric may have: they become part of
// file names.
func validFabricName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return name[0] != '.'
}

func registryPath(name string) string {
	return filepath.Join(shmDir, "mlx5kit-"+name+"-registry")
}

func ringPath(name string, slot int) string {
	return filepath.Join(shmDir, "mlx5kit-"+name+"-"+strconv.Itoa(slot))
}

// slotQPNRange is the range of QPNs the process in slot s hands out.
func slotQPNRange(s int) (first, limit uint32) {
	base := uint32(s+1) * shmSlotQPNs
	return base + firstQPN, base + shmSlotQPNs
}

// qpnSlot returns the slot whose range holds qpn, or -1.
func qpnSlot(qpn uint32) int {
	s := int(qpn/shmSlotQPNs) - 1
	if s < 0 || s >= shmMaxSlots {
		return -1
	}
	return s
}

// procStart returns the start time of a process (field 22 of
// /proc/<pid>/stat, in clock ticks since boot): with the pid it names one
// process, whatever pids are reused later.
func procStart(pid int) (uint64, error) {
	_, start, err := procstat.Read(pid)
	return start, err
}

// selfStart is this process's start time, read once: every comparison
// with it then agrees, also where /proc is emulated (qemu-user computes
// the field anew on each read).
var selfStart = sync.OnceValues(func() (uint64, error) { return procStart(os.Getpid()) })

// alive reports whether the process pid started at start still runs (a
// zombie does not).
func alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		s, err := selfStart()
		return err == nil && s == start
	}
	if err := unix.Kill(pid, 0); err != nil && err != unix.EPERM {
		return false
	}
	// A zombie has ended: it holds no memory and no file, and its
	// parent may not wait for it soon.
	state, s, err := procstat.Read(pid)
	return err == nil && s == start && !procstat.Ended(state)
}

// registry is a process's view of the registry file.
type registry struct {
	name string // the fabric's
	fd   int
	mem  []byte
	// base is &mem[0]: u32 and u64 add offsets to it without a bounds
	// check, as every offset they are given lies inside the file.
	base unsafe.Pointer
}

func (r *registry) u32(off int) *uint32 { return (*uint32)(unsafe.Add(r.base, off)) }
func (r *registry) u64(off int) *uint64 { return (*uint64)(unsafe.Add(r.base, off)) }
func slotOff(s int) int                 { return regHeaderSize + s*regSlotSize }

// gen returns the generation of the process in slot s, 0 when the slot is
// free.
func (r *registry) gen(s int) uint64 { return atomic.LoadUint64(r.u64(slotOff(s) + slotGen)) }

// lastGen returns the generation of the last process that held slot s
// and left it (or was found gone), 0 if none did.
func (r *registry) lastGen(s int) uint64 {
	return atomic.LoadUint64(r.u64(slotOff(s) + slotLastGen))
}

// free frees slot s, held by generation gen, recording gen as the
// slot's last (registry locked).
func (r *registry) free(s int, gen uint64) {
	atomic.StoreUint64(r.u64(slotOff(s)+slotLastGen), gen)
	atomic.StoreUint64(r.u64(slotOff(s)+slotGen), 0)
}

// pid returns the pid recorded in slot s.
func (r *registry) pid(s int) int { return int(atomic.LoadUint32(r.u32(slotOff(s) + slotPID))) }

// devices returns the number of HCAs the process in slot s recorded.
func (r *registry) devices(s int) int {
	return int(atomic.LoadUint32(r.u32(slotOff(s) + slotDevices)))
}

// slotAlive reports whether the process in slot s, of generation gen, runs:
// it holds its ring file's lock (ringHeld), or, for a process of a build
// that takes no such lock, or a kernel without the locks, its pid names a
// process of its start time.
func (r *registry) slotAlive(s int, gen uint64) bool {
	if r.gen(s) != gen {
		return false
	}
	return slotProcessAlive(r.name, s, r.pid(s), atomic.LoadUint64(r.u64(slotOff(s)+slotStart)))
}

// slotProcessAlive reports whether the process of slot s of fabric name,
// recorded with pid and start, runs (slotAlive).
func slotProcessAlive(name string, s, pid int, start uint64) bool {
	return ringHeld(ringPath(name, s)) || alive(pid, start)
}

// openRegistry opens (creating it if needed) and locks the registry of a
// fabric, checking its version and link layer. The caller unlocks.
func openRegistry(name string, link ctx.LinkLayer) (*registry, error) {
	p := registryPath(name)
	fd, st, err := lockRegistry(p)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*registry, error) {
		_ = unix.Close(fd)
		return nil, err
	}
	fresh := st.Size == 0
	stale, users := false, ""
	if !fresh && st.Size != regSize {
		stale, users = staleRegistry(name, fd, st.Size)
	}
	if fresh {
		if err := unix.Ftruncate(fd, regSize); err != nil {
			return fail(fmt.Errorf("size %s: %w", p, err))
		}
	} else if stale {
		// A registry of another layout (another slot count) that no
		// live process uses: left behind, it does not block this run.
		if err := unix.Ftruncate(fd, 0); err != nil {
			return fail(fmt.Errorf("size %s: %w", p, err))
		}
		if err := unix.Ftruncate(fd, regSize); err != nil {
			return fail(fmt.Errorf("size %s: %w", p, err))
		}
		removeRings(name)
		fresh = true
	} else if st.Size != regSize {
		if users != "" {
			users = "; it " + users
		}
		return fail(fmt.Errorf("%s is %d bytes, protocol version %d uses %d%s: %w (remove the file when no process uses the fabric)", p, st.Size, shmVersion, regSize, users, ErrFabricVersion))
	}
	// Its pages allocated before any is stored in: a full file system
	// is then this error, not a SIGBUS at the first store.
	if err := allocateFile(fd, 0, regSize); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		return fail(fmt.Errorf("allocate %s: %w", p, err))
	}
	r, err := mapRegistry(name, fd)
	if err != nil {
		return fail(err)
	}
	if *r.u64(regMagic) == shmMagic && (r.mismatch() != "" || ctx.LinkLayer(*r.u32(regLink)) != link) && r.liveSlot() < 0 {
		// A registry of another version, layout or link layer that no
		// live process uses any more: left behind, it does not block
		// this run.
		removeRings(name)
		fresh = true
	}
	if fresh || *r.u64(regMagic) == 0 {
		// New, or left half-made by a process that died while creating
		// it under the lock.
		clear(r.mem)
		*r.u32(regVersion) = shmVersion
		*r.u32(regSlots) = shmMaxSlots
		*r.u32(regLink) = uint32(link)
		*r.u32(regRingSize) = ringDataSize
		atomic.StoreUint64(r.u64(regMagic), shmMagic)
	}
	switch {
	case *r.u64(regMagic) != shmMagic:
		r.close()
		return nil, fmt.Errorf("%s is not a fabric registry: %w (remove the file when no process uses the fabric)", p, ErrFabricVersion)
	case r.mismatch() != "":
		why, users := r.mismatch(), "a process still uses it"
		if s := r.liveSlot(); s >= 0 {
			users = fmt.Sprintf("process %d still uses it", r.pid(s))
		}
		r.close()
		return nil, fmt.Errorf("%s %s, and %s: %w", p, why, users, ErrFabricVersion)
	case ctx.LinkLayer(*r.u32(regLink)) != link:
		l := ctx.LinkLayer(*r.u32(regLink))
		r.close()
		return nil, fmt.Errorf("fabric %q has link layer %v, this process asks for %v (every process of a fabric has the same: set Options.LinkLayer, $%s or mlx5kit-emulate's -link alike, or name another fabric): %w",
			name, l, link, EnvLinkLayer, ctx.ErrInvalidArgument)
	}
	return r, nil
}

// mapRegistry maps the registry file fd of the fabric name, of regSize
// bytes (the caller closes fd on an error).
func mapRegistry(name string, fd int) (*registry, error) {
	mem, err := unix.Mmap(fd, 0, regSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", registryPath(name), err)
	}
	return &registry{name: name, fd: fd, mem: mem, base: unsafe.Pointer(&mem[0])}, nil
}

// anyRingFile reports whether a ring file of the fabric name exists.
func anyRingFile(name string) bool {
	for s := 0; s < shmMaxSlots; s++ {
		if _, err := os.Lstat(ringPath(name, s)); err == nil {
			return true
		}
	}
	return false
}

// removeRings removes the ring files of every slot of the fabric name,
// when its registry is started afresh.
func removeRings(name string) {
	for s := 0; s < shmMaxSlots; s++ {
		_ = os.Remove(ringPath(name, s))
	}
}

// lockRegistry opens (creating it if needed) the registry file at p,
// refuses it when it is not this user's own (privateFile), locks it, and
// returns its descriptor and status. The last process to
// leave a fabric removes the file under its lock (release): a process that
// opened it before and got the lock after holds a file no longer at p, and
// opens p again.
func lockRegistry(p string) (int, unix.Stat_t, error) {
	for tries := 0; ; tries++ {
		var st unix.Stat_t
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return -1, st, fmt.Errorf("open %s: %w", p, err)
		}
		// Another user's file is refused before its lock is waited for:
		// its owner may hold the lock for good.
		if err := unix.Fstat(fd, &st); err != nil {
			_ = unix.Close(fd)
			return -1, st, fmt.Errorf("stat %s: %w", p, err)
		}
		if err := privateFile(p, &st); err != nil {
			_ = unix.Close(fd)
			return -1, st, err
		}
		if err := flockWithin(fd, registryLockWait); err != nil {
			_ = unix.Close(fd)
			return -1, st, fmt.Errorf("lock %s: %w", p, err)
		}
		if err := unix.Fstat(fd, &st); err != nil {
			_ = unix.Close(fd)
			return -1, st, fmt.Errorf("stat %s: %w", p, err)
		}
		var now unix.Stat_t
		err = unix.Stat(p, &now)
		if err == nil && now.Dev == st.Dev && now.Ino == st.Ino {
			return fd, st, nil
		}
		_ = unix.Close(fd)
		if tries == 100 {
			return -1, st, fmt.Errorf("lock %s: removed and made again 100 times while this process waited for it", p)
		}
	}
}

// privateFile refuses a fabric file, whose status is st, that is not this
// user's own or that other users may read or write: one made by another
// user in the shared /dev/shm (mode 0666, say) would let that user read
// and write what the fabric's processes keep there. The error matches
// os.ErrPermission (EACCES), as the open of another user's private file
// does.
func privateFile(p string, st *unix.Stat_t) error {
	uid := uint32(os.Geteuid())
	if st.Uid != uid || st.Mode&0o077 != 0 {
		return fmt.Errorf("%s belongs to uid %d with mode %#o; a fabric's files must belong to this process's user (uid %d) with mode 0600 (remove the file, or name another fabric): %w",
			p, st.Uid, st.Mode&0o777, uid, unix.EACCES)
	}
	return nil
}

// staleRegistry reports whether the registry file fd, of size bytes (not
// this build's), is one of another layout that no live process uses: its
// header and slot records keep their offsets in every version. When a
// live process uses it, users says which version the registry speaks and
// which process that is.
func staleRegistry(name string, fd int, size int64) (stale bool, users string) {
	if size < regHeaderSize || size > 1<<20 {
		return false, ""
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return false, ""
	}
	defer unix.Munmap(mem)
	ne := binary.NativeEndian
	if ne.Uint64(mem[regMagic:]) != shmMagic {
		return false, ""
	}
	n := min(int64(ne.Uint32(mem[regSlots:])), (size-regHeaderSize)/regSlotSize)
	for s := 0; s < int(n); s++ {
		off := slotOff(s)
		pid := int(ne.Uint32(mem[off+slotPID:]))
		if ne.Uint64(mem[off+slotGen:]) != 0 && slotProcessAlive(name, s, pid, ne.Uint64(mem[off+slotStart:])) {
			return false, fmt.Sprintf("speaks protocol version %d, and process %d still uses it", ne.Uint32(mem[regVersion:]), pid)
		}
	}
	return true, ""
}

// mismatch says how the registry differs from what this build speaks, or
// "" when it does not. The header fields it reads and the slot records
// keep their offsets in every version.
func (r *registry) mismatch() string {
	switch {
	case *r.u32(regVersion) != shmVersion:
		return fmt.Sprintf("speaks protocol version %d, this build %d", *r.u32(regVersion), shmVersion)
	case *r.u32(regSlots) != shmMaxSlots:
		return fmt.Sprintf("has %d slots, this build %d (protocol version %d)", *r.u32(regSlots), shmMaxSlots, shmVersion)
	case *r.u32(regRingSize) != ringDataSize:
		return fmt.Sprintf("has rings of %d bytes, this build %d (protocol version %d)", *r.u32(regRingSize), ringDataSize, shmVersion)
	}
	return ""
}

// liveSlot returns a slot held by a live process, or -1.
func (r *registry) liveSlot() int {
	for s := 0; s < shmMaxSlots; s++ {
		if g := r.gen(s); g != 0 && r.slotAlive(s, g) {
			return s
		}
	}
	return -1
}

func (r *registry) unlock() { _ = unix.Flock(r.fd, unix.LOCK_UN) }

// registryLockWait bounds how long a process waits for a fabric's registry
// lock (flockWithin). A member holds it only while it joins or leaves, for
// milliseconds; one stopped there (SIGSTOP, a debugger) or a hostile one
// could hold it for good, and a join, a Close or SweepFabric would wait
// with it. A variable for the tests.
var registryLockWait = 10 * time.Second

// flockWithin takes the exclusive lock of fd, waiting at most d for the
// process that holds it; after d the error says so and wraps EWOULDBLOCK.
func flockWithin(fd int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for pause := 20 * time.Microsecond; ; pause = min(2*pause, 5*time.Millisecond) {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			return err // nil: locked
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("another process has held the lock for %v (one stopped while it joined or left the fabric?): %w", d, unix.EWOULDBLOCK)
		}
		time.Sleep(pause)
	}
}

func (r *registry) close() {
	if r.mem != nil {
		_ = unix.Munmap(r.mem)
		r.mem, r.base = nil, nil
	}
	_ = unix.Close(r.fd)
}

// claim takes a slot for this process (registry locked): slots of processes
// that are gone are reclaimed first, their ring files removed. It returns
// the slot and its generation.
func (r *registry) claim(name string, devices int) (int, uint64, error) {
	r.reap(name)
	free := -1
	for s := 0; s < shmMaxSlots; s++ {
		if r.gen(s) == 0 {
			free = s
			break
		}
	}
	if free < 0 {
		return 0, 0, fmt.Errorf("%d live processes: %w", shmMaxSlots, ErrFabricFull)
	}
	pid := os.Getpid()
	start, err := selfStart()
	if err != nil {
		return 0, 0, err
	}
	gen := atomic.AddUint64(r.u64(regNextGen), 1)
	if gen == 0 {
		// 0 marks a free slot: a count at its end (a member may
		// have stored any value) skips it.
		gen = atomic.AddUint64(r.u64(regNextGen), 1)
	}
	off := slotOff(free)
	atomic.StoreUint32(r.u32(off+slotPID), uint32(pid))
	atomic.StoreUint64(r.u64(off+slotStart), start)
	atomic.StoreUint32(r.u32(off+slotDevices), uint32(devices))
	return free, gen, nil
}

// reap frees the slots of the fabric name whose processes are gone and
// removes their ring files (registry locked).
func (r *registry) reap(name string) {
	for s := 0; s < shmMaxSlots; s++ {
		if g := r.gen(s); g != 0 && !r.slotAlive(s, g) {
			_ = os.Remove(ringPath(name, s))
			r.free(s, g)
		}
	}
}

// publish makes a claimed slot visible (its ring file exists by now).
func (r *registry) publish(s int, gen uint64) {
	atomic.StoreUint64(r.u64(slotOff(s)+slotGen), gen)
}

// release frees slot s of the fabric name if it still holds generation
// gen, and removes its ring file (once it has the registry's lock, within
// registryLockWait); it also frees the slots of processes that
// are gone (reap), so that the files of processes killed before they could
// leave do not outlast the last process to leave. The last live process
// removes the registry too, under its lock: a process waiting for the lock
// meanwhile opens the path again (lockRegistry).
func (r *registry) release(name string, s int, gen uint64) {
	if flockWithin(r.fd, registryLockWait) != nil {
		// The slot stays in the registry, held while this process
		// runs; a process that joins or leaves after it has ended
		// reaps it and its ring file.
		return
	}
	defer r.unlock()
	if r.gen(s) == gen {
		// The ring file goes first, under the lock: once the slot is
		// free, the next process to claim it creates its own file at
		// this path.
		_ = os.Remove(ringPath(name, s))
		r.free(s, gen)
	}
	r.reap(name)
	r.removeUnused(name)
}

// removeUnused removes the registry file of the fabric name when no slot is
// held (registry locked), called right after reap: a slot reap left held
// keeps the registry even if its process has ended since, so that its ring
// file is removed with its slot (by the next reap) rather than outlasting
// the registry that names it. A process waiting for the lock meanwhile
// opens the path again (lockRegistry).
func (r *registry) removeUnused(name string) {
	for s := 0; s < shmMaxSlots; s++ {
		if r.gen(s) != 0 {
			return
		}
	}
	// Only the file this registry is: not one a process made at the
	// path since (the path is never another file while this one is
	// locked and at it).
	p := registryPath(name)
	var here, mine unix.Stat_t
	if unix.Stat(p, &here) == nil && unix.Fstat(r.fd, &mine) == nil && here.Dev == mine.Dev && here.Ino == mine.Ino {
		_ = os.Remove(p)
	}
}

// SweepFabric removes what processes that are gone left of the shared
// fabric name: it frees their slots, removes their ring files, and removes
// the registry when no live process holds a slot. Processes that leave
// (Fabric.Close) or join do the same; SweepFabric is for a program that
// ends without leaving, such as one under mlx5kit-emulate, and is called
// after it exits. It makes nothing: a fabric with no registry keeps none,
// and loses only the ring files no live process holds (one killed while it
// joined leaves its file with no slot, and the registry goes with the
// last process to leave); nor does a registry whose header was never
// written (a join that failed on a full /dev/shm, or died, after sizing
// it). A registry of another protocol version or layout is not touched
// and its error wraps ErrFabricVersion.
func SweepFabric(name string) error {
	if err := CheckFabricName(name); err != nil {
		return err
	}
	p := registryPath(name)
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) && !anyRingFile(name) {
		return nil
	}
	fd, st, err := lockRegistry(p)
	if err != nil {
		return err
	}
	// Made by this call's open after the last process removed it, or by
	// a process about to set it up, which opens the path again once it
	// has the lock; or sized by a process that then failed (a full file
	// system) or died before it wrote the header, as openRegistry finds
	// it too (magic 0): it holds no slot. No process joins while the
	// lock is held: a ring file no process holds is an orphan.
	orphans := func() {
		for s := 0; s < shmMaxSlots; s++ {
			if rp := ringPath(name, s); !ringHeld(rp) {
				_ = os.Remove(rp)
			}
		}
		_ = os.Remove(p)
	}
	if st.Size == 0 {
		orphans()
		_ = unix.Close(fd)
		return nil
	}
	if st.Size != regSize {
		_ = unix.Close(fd)
		return fmt.Errorf("%s is %d bytes, protocol version %d uses %d: %w", p, st.Size, shmVersion, regSize, ErrFabricVersion)
	}
	r, err := mapRegistry(name, fd)
	if err != nil {
		_ = unix.Close(fd)
		return err
	}
	defer r.close()
	if atomic.LoadUint64(r.u64(regMagic)) == 0 {
		orphans()
		return nil
	}
	if *r.u64(regMagic) != shmMagic {
		return fmt.Errorf("%s is not a fabric registry: %w", p, ErrFabricVersion)
	}
	if why := r.mismatch(); why != "" {
		return fmt.Errorf("%s %s: %w", p, why, ErrFabricVersion)
	}
	r.reap(name)
	r.removeUnused(name)
	return nil
}
