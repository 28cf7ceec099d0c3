package sim

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file holds the inbound rings of a process of a shared fabric: one
// file per process, with one single-producer single-consumer ring per
// sending slot, and a futex word that wakes the owner's engine when it
// sleeps.
//
// A record is a mark, a wireHdr and a payload. The producer writes the
// header and the payload first and the mark last, with a release store:
// the mark is the record's position in the ring's unbounded byte count
// plus one. A zero page or a record of an earlier lap never carries the
// mark the consumer expects at its head, and the producer clears the
// mark after each record before publishing it (reserve), so neither does
// an earlier lap's payload. The consumer polls the mark at its head and
// nothing else: a record costs it the transfer of the lines the record
// occupies, with no tail or wake word read before them, and the producer
// publishes without a fence (docs/hardware.md, "Polling loops run the
// model; the wire in two cache lines").

const (
	// ringDataSize is the size of one ring (a power of two). The file
	// is sparse: a ring occupies memory as far as it has been used.
	ringDataSize = 32 << 20
	// wireMaxPayload is the largest payload of one message (16 MiB less
	// a record's mark and header and a line, so perftest's largest size,
	// 8 MiB, fits). A record never wraps; one of at most half a ring,
	// with the line kept free after it (reserve), always fits in an
	// empty ring, whatever the position of its tail (the pad in front of
	// it is shorter than the record).
	wireMaxPayload = ringDataSize/2 - ringRecHdr - wireAlign
	// ringRecycle is the position past which a producer that finds its
	// ring empty pads to the end and writes at the front again (reserve).
	ringRecycle = 64 << 10
	// wireAlign aligns every record (its header is read in place).
	wireAlign = 64
	// ringMarkSize is the mark in front of a record's header.
	ringMarkSize = 8
	// ringRecHdr is where a record's payload starts.
	ringRecHdr = ringMarkSize + wireHdrSize

	ringFileGen      = 0   // u64: the owner's generation
	ringFileWake     = 64  // u32: futex word, bumped by a producer when the owner sleeps
	ringFileSleeping = 128 // u32: 1 while the owner's engine sleeps
	ringFileSenders  = 192 // u64: a bit per slot that has written in its ring
	ringCtrlOff      = 4096
	ringCtrlSize     = 128 // tail (producer) and head (consumer), a cache line each
	ringDataOff      = ringCtrlOff + shmMaxSlots*ringCtrlSize
	ringFileSize     = ringDataOff + shmMaxSlots*ringDataSize
)

// ringFile is a mapped ring file: the process's own (inbound) or a peer's.
type ringFile struct {
	gen uint64
	mem []byte
	// fd is the open file: for a peer's ring file, through which
	// reserve has the file system allocate the pages of the ring before
	// it writes there (allocated is how many bytes from the ring's front
	// are known to be allocated); for the process's own, the holder of
	// its liveness lock (ringHeld).
	fd        int
	allocated uint64
	// base is &mem[0]: the accessors below add offsets to it without a
	// bounds check, as every offset they form lies inside the file (a
	// slot is below shmMaxSlots, a position is masked to its ring).
	base unsafe.Pointer
	// headSeen is the consumer's head as reserve last read it; announced
	// is set once this process's bit is in the file's senders word.
	headSeen  uint64
	announced bool
}

func (f *ringFile) u32(off int) *uint32 { return (*uint32)(unsafe.Add(f.base, off)) }
func (f *ringFile) u64(off int) *uint64 { return (*uint64)(unsafe.Add(f.base, off)) }
func (f *ringFile) tail(s int) *uint64  { return f.u64(ringCtrlOff + s*ringCtrlSize) }
func (f *ringFile) head(s int) *uint64  { return f.u64(ringCtrlOff + s*ringCtrlSize + 64) }
func (f *ringFile) mark(s int, pos uint64) *uint64 {
	return f.u64(ringDataOff + s*ringDataSize + int(pos&(ringDataSize-1)))
}
func (f *ringFile) data(s int) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(f.base, ringDataOff+s*ringDataSize)), ringDataSize)
}

// createRingFile makes a fresh ring file for slot s (a file left by an
// earlier owner of the slot is replaced, never reused).
func createRingFile(name string, s int, gen uint64) (*ringFile, error) {
	p := ringPath(name, s)
	_ = unix.Unlink(p)
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", p, err)
	}
	fail := func(format string, err error) (*ringFile, error) {
		_ = unix.Unlink(p)
		_ = unix.Close(fd)
		return nil, fmt.Errorf(format, p, err)
	}
	// The descriptor stays open, holding the file's liveness lock until
	// the process leaves or dies (ringHeld). A kernel without
	// open-file-description locks (before 3.15) refuses it; the other
	// processes then judge this one by its pid.
	_ = unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart, Len: 1})
	if err := unix.Ftruncate(fd, ringFileSize); err != nil {
		return fail("size %s: %w", err)
	}
	// The words in front of the rings (generation, wake and senders
	// words, heads and tails) are stored by this process and every
	// producer: their pages are allocated now, while a full file system
	// can still be an error rather than a SIGBUS at the first store.
	if err := allocateFile(fd, 0, ringDataOff); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		return fail("allocate %s: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, ringFileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("map %s: %w", err)
	}
	rf := &ringFile{gen: gen, mem: mem, base: unsafe.Pointer(&mem[0]), fd: fd}
	atomic.StoreUint64(rf.u64(ringFileGen), gen)
	return rf, nil
}

// ringHeld reports whether a process holds the liveness lock of the ring
// file at path, as its owner does from its creation until it leaves the
// fabric or dies (the kernel drops the lock with the process's last
// descriptor of the file). Unlike a pid, the lock means the same in every
// pid namespace: processes in two containers that share /dev/shm but not
// their pids see each other alive. It reports false when the file is
// absent, or the kernel has no open-file-description locks. The open does
// not block: a FIFO a member made at the path would otherwise hold the
// caller (and its Fabric's lock, or the registry's) until a writer came.
func ringHeld(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Len: 1}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &lk); err != nil {
		return false
	}
	return lk.Type != unix.F_UNLCK
}

// openRingFile maps the ring file of the process in slot s, which must be
// of generation gen.
func openRingFile(name string, s int, gen uint64) (*ringFile, error) {
	p := ringPath(name, s)
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	if err := privateFile(p, &st); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	if st.Size != ringFileSize {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("%s is %d bytes, expected %d: %w", p, st.Size, ringFileSize, ErrFabricVersion)
	}
	mem, err := unix.Mmap(fd, 0, ringFileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	rf := &ringFile{gen: gen, mem: mem, base: unsafe.Pointer(&mem[0]), fd: fd}
	if atomic.LoadUint64(rf.u64(ringFileGen)) != gen {
		rf.close()
		return nil, fmt.Errorf("%s belongs to another generation", p)
	}
	return rf, nil
}

func (f *ringFile) close() {
	if f.mem != nil {
		_ = unix.Munmap(f.mem)
		f.mem, f.base = nil, nil
	}
	if f.fd >= 0 {
		_ = unix.Close(f.fd)
		f.fd = -1
	}
}

// reserve finds room for a record of n bytes (mark and header included)
// in the ring this process (slot from) writes in f. It returns the record
// and its position; errRingFull when the ring is full, or the file
// system's error when it cannot allocate the ring's pages (allocate). A
// pad in front of the record is published at once.
//
// The line after the record stays free (read by the consumer), and its
// mark is cleared here, before the record's is published (commit): a
// consumer past the record then finds 0 there, or the next record's
// mark, never a word of an earlier lap's payload that happens to equal
// the mark it expects.
func (f *ringFile) reserve(from, n int) ([]byte, uint64, error) {
	tail, pos, need, pad, ok := f.plan(from, n)
	if !ok {
		return nil, 0, errRingFull
	}
	// Every line this writes: the record and the line after it (the
	// front's first line when the record ends the ring), at the front
	// after a pad; the pad's first line, which the record before it
	// cleared, lies inside what that record allocated.
	if pos+need >= f.allocated || pad != 0 {
		if err := f.allocateFor(from, pos, need, pad); err != nil {
			return nil, 0, err
		}
	}
	data := f.data(from)
	if pad != 0 {
		h := (*wireHdr)(unsafe.Pointer(&data[pos+ringMarkSize]))
		h.Len, h.Kind = uint32(pad), wirePad
		*f.mark(from, tail+pad) = 0
		storeRelease64(f.mark(from, tail), tail+1)
		tail += pad
		storeRelease64(f.tail(from), tail)
		pos = 0
	}
	*f.mark(from, tail+need) = 0
	return data[pos : pos+need], tail, nil
}

// errRingFull is reserve's answer when the consumer has not made room.
var errRingFull = errors.New("ring full")

// ringAllocStep is the step in which allocate has the file system
// allocate a ring's pages ahead of the producer.
const ringAllocStep = 64 << 10

// allocateFor allocates what reserve writes for a record of need bytes
// at pos, or at the front after a pad at pos (allocate). The pad's line
// lies inside what the record before it allocated, unless the consumer
// moved the tail (it lies in the consumer's file): then the pages up to
// it are allocated too, so that a full file system fails the record
// rather than kill this process.
func (f *ringFile) allocateFor(from int, pos, need, pad uint64) error {
	end := pos + need + wireAlign
	if pad != 0 {
		end = max(need, pos) + wireAlign
	}
	return f.allocate(from, end)
}

// allocate has the file system allocate the first end bytes of ring from,
// through the file: a store into a page of a shared mapping that a full
// tmpfs cannot give (a container's /dev/shm is 64 MiB by default, a ring
// 32 MiB) kills the storing process with SIGBUS, where fallocate answers
// ENOSPC, which reserve returns. It allocates up to ringAllocStep ahead,
// or to the page end lies in when that much has no room. Pages a
// producer of the slot before this one allocated are taken as they are.
// A file system without fallocate leaves the stores unguarded.
func (f *ringFile) allocate(from int, end uint64) error {
	end = min(end, ringDataSize)
	if end <= f.allocated {
		return nil
	}
	off := int64(ringDataOff+from*ringDataSize) + int64(f.allocated)
	to := min((end+ringAllocStep-1)&^(ringAllocStep-1), ringDataSize)
	err := allocateFile(f.fd, off, int64(to-f.allocated))
	if errors.Is(err, unix.ENOSPC) {
		to = min((end+pageSize-1)&^(pageSize-1), ringDataSize)
		err = allocateFile(f.fd, off, int64(to-f.allocated))
	}
	switch {
	case errors.Is(err, unix.EOPNOTSUPP):
		f.allocated = ringDataSize
	case err != nil:
		return err
	default:
		f.allocated = to
	}
	return nil
}

// allocateFile has the file system allocate n bytes of file fd at off
// (fallocate), again when a signal interrupts it (the Go runtime's
// preemption signals can).
func allocateFile(fd int, off, n int64) error {
	for {
		err := unix.Fallocate(fd, 0, off, n)
		if err != unix.EINTR {
			return err
		}
	}
}

// plan works out where reserve places a record of n bytes in the ring
// slot from writes: the tail, the record's position and size, and the pad
// in front of it; ok is false when the ring has no room. It writes
// nothing in the ring. A record it found room for still has it when
// reserve places it: only this process writes there, and the consumer
// only makes room.
func (f *ringFile) plan(from, n int) (tail, pos, need, pad uint64, ok bool) {
	need = uint64((n + wireAlign - 1) &^ (wireAlign - 1))
	// The tail lies in the consumer's file, which the consumer can
	// write: aligned here, every record, pad and mark stays in the ring.
	tail = atomic.LoadUint64(f.tail(from)) &^ (wireAlign - 1)
	pos = tail & (ringDataSize - 1)
	// The consumer's head, as last read: it only moves on, so the room
	// it leaves is never overstated. It is read again (a transfer from
	// the consumer's cache) only when that room looks too small, or past
	// ringRecycle, where the producer asks whether the ring is empty.
	head := f.headSeen
	if pos >= ringRecycle || pos+need > ringDataSize || ringDataSize-(tail-head) < need+wireAlign {
		head = atomic.LoadUint64(f.head(from))
		f.headSeen = head
	}
	switch {
	case pos+need > ringDataSize:
		pad = ringDataSize - pos
	case head == tail && pos >= ringRecycle && need+wireAlign <= pos:
		// The consumer has read everything: start again at the front,
		// whose lines both processes still have in cache, rather than
		// walk on into lines neither has touched since the last lap.
		pad = ringDataSize - pos
	}
	return tail, pos, need, pad, ringDataSize-(tail-head) >= pad+need+wireAlign
}

// fits reports whether a record of n bytes (mark and header included)
// has room in the ring slot from writes (plan).
func (f *ringFile) fits(from, n int) bool {
	_, _, _, _, ok := f.plan(from, n)
	return ok
}

// resume readies a mapping of f for the producer in slot from, which may
// take over the ring from an earlier owner of the slot: records that
// owner published past the tail it stored (it died between its mark and
// its tail) are counted in, so that the new owner writes where the
// consumer looks, and the consumer's head is read. It fails when the
// file system cannot allocate the lines it reads (allocate): a read of
// a page a full tmpfs cannot give is a SIGBUS too.
func (f *ringFile) resume(from int) error {
	tail := atomic.LoadUint64(f.tail(from)) &^ (wireAlign - 1)
	if err := f.allocate(from, tail&(ringDataSize-1)+wireAlign); err != nil {
		return err
	}
	// At most a pad and a record lie past a stored tail, in lines the
	// earlier owner wrote.
	for i := 0; i < 2 && atomic.LoadUint64(f.mark(from, tail)) == tail+1; i++ {
		pos := tail & (ringDataSize - 1)
		n := uint64((*wireHdr)(unsafe.Pointer(&f.data(from)[pos+ringMarkSize])).Len)
		if n < wireAlign || n%wireAlign != 0 || pos+n > ringDataSize {
			break
		}
		tail += n
		if err := f.allocate(from, tail&(ringDataSize-1)+wireAlign); err != nil {
			return err
		}
	}
	storeRelease64(f.tail(from), tail)
	f.headSeen = atomic.LoadUint64(f.head(from))
	return nil
}

// commit publishes the record reserve placed at position at: its mark,
// then the tail. The stores are release stores, without a fence; the
// owner is woken if it sleeps (see sleep for the race this leaves).
func (f *ringFile) commit(from int, at uint64, n int) {
	storeRelease64(f.mark(from, at), at+1)
	storeRelease64(f.tail(from), at+uint64(n))
	if atomic.LoadUint32(f.u32(ringFileSleeping)) != 0 {
		atomic.AddUint32(f.u32(ringFileWake), 1)
		futexWake(f.u32(ringFileWake))
	}
}

// announce sets slot from's bit in the senders word, once per mapping: the
// consumer polls the rings of the slots whose bit is set.
func (f *ringFile) announce(from int) {
	if f.announced {
		return
	}
	w := f.u64(ringFileSenders)
	if atomic.LoadUint64(w)&(1<<from) == 0 {
		atomic.OrUint64(w, 1<<from)
	}
	f.announced = true
}

// markAt reports whether the record at position pos of ring s is
// published. It asks for the record's second line first, without waiting
// for it: when the record has come, that line's transfer from the
// producer's cache overlaps the first's, instead of following it once
// the header is read.
func (f *ringFile) markAt(s int, pos uint64) bool {
	m := f.mark(s, pos)
	if pos&(ringDataSize-1) < ringDataSize-wireAlign {
		prefetch(unsafe.Add(unsafe.Pointer(m), wireAlign))
	}
	return atomic.LoadUint64(m) == pos+1
}

// ready reports whether the record at the head of ring s is published.
func (f *ringFile) ready(s int) bool {
	return f.markAt(s, atomic.LoadUint64(f.head(s))&^(wireAlign-1))
}

// pending reports whether any inbound ring holds a published record,
// except the ring of own, the owner's slot, which no drain reads (a record
// there was written by another member in the owner's name: see drain).
func (f *ringFile) pending(own int) bool {
	for m := atomic.LoadUint64(f.u64(ringFileSenders)) &^ (1 << own); m != 0; m &= m - 1 {
		if f.ready(bits.TrailingZeros64(m)) {
			return true
		}
	}
	return false
}

// sleepGuard is how long sleep keeps looking at the rings after it has
// said it sleeps, before it waits on the futex. A producer publishes with
// release stores and reads the sleeping word without a fence, so it can
// read the word before its mark is visible: the mark becomes visible once
// its store buffer drains, well within sleepGuard; a producer that read
// the word as 0 then finds it read here. Without the guard that race costs
// one sleep of at most d.
const sleepGuard = 2 * time.Microsecond

// sleep waits up to d for a producer to commit a record (own is the
// owner's slot: see pending).
func (f *ringFile) sleep(own int, d time.Duration) {
	w := f.u32(ringFileWake)
	seq := atomic.LoadUint32(w)
	atomic.StoreUint32(f.u32(ringFileSleeping), 1) // a full fence on amd64 and arm64
	t0 := time.Now()
	for !f.pending(own) {
		if time.Since(t0) >= sleepGuard {
			futexWait(w, seq, d)
			break
		}
	}
	atomic.StoreUint32(f.u32(ringFileSleeping), 0)
}

// wake wakes the owner's engine (used by Close).
func (f *ringFile) wake() {
	atomic.AddUint32(f.u32(ringFileWake), 1)
	futexWake(f.u32(ringFileWake))
}

// The futex operations on a word of a MAP_SHARED mapping: not the private
// variants, since the waker is another process.
const (
	futexOpWait = 0
	futexOpWake = 1
)

func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(addr *uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWake, 1, 0, 0, 0)
}

// An engine of a shared fabric or a TCP link idle for shmDeepAfter sleeps
// shmDeepSleep at a time: a peer's message still wakes it at once (futex,
// or the link's poll), a doorbell of its own process is seen within
// shmDeepSleep. Idle wake-ups cost tens of
// microseconds of scheduler work each; at IdleSleep's default an idle
// process would spend several percent of a core.
const (
	shmDeepAfter = 100 * time.Millisecond
	shmDeepSleep = 4 * time.Millisecond
)

// shmSpin is how long the engine of a shared fabric keeps polling after it
// last had work, before it sleeps: a round trip to another process takes a
// few microseconds when both engines poll, while the shortest futex sleep
// lasts the kernel's timer slack (50 µs) and more (about 100 µs measured on
// a busy 2-vCPU machine), and a futex wake-up costs the peer several
// microseconds more. The spin follows work only: an idle engine sleeps.
const shmSpin = 100 * time.Microsecond

func shmSleep(d time.Duration, idleSince time.Time) time.Duration {
	if d < shmDeepSleep && time.Since(idleSince) > shmDeepAfter {
		return shmDeepSleep
	}
	return d
}
