package sim

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file holds the inbound rings of a process of a shared fabric: one
// file per process, with one single-producer single-consumer ring per
// sending slot, and a futex word that wakes the owner's engine.

const (
	// ringDataSize is the size of one ring (a power of two). The file
	// is sparse: a ring occupies memory as far as it has been used.
	ringDataSize = 32 << 20
	// wireMaxPayload is the largest payload of one message (16 MiB less
	// a header, so perftest's largest size, 8 MiB, fits). A record never
	// wraps; one of at most half a ring always fits in an empty ring,
	// whatever the position of its tail (the pad in front of it is
	// shorter than the record).
	wireMaxPayload = ringDataSize/2 - wireHdrSize
	// ringRecycle is the position past which a producer that finds its
	// ring empty pads to the end and writes at the front again (reserve).
	ringRecycle = 64 << 10
	// wireAlign aligns every record (its header is read in place).
	wireAlign = 64

	ringFileGen      = 0   // u64: the owner's generation
	ringFileWake     = 64  // u32: futex word, bumped by every producer
	ringFileSleeping = 128 // u32: 1 while the owner's engine sleeps
	ringCtrlOff      = 4096
	ringCtrlSize     = 128 // tail (producer) and head (consumer), a cache line each
	ringDataOff      = ringCtrlOff + shmMaxSlots*ringCtrlSize
	ringFileSize     = ringDataOff + shmMaxSlots*ringDataSize
)

// ringFile is a mapped ring file: the process's own (inbound) or a peer's.
type ringFile struct {
	gen uint64
	mem []byte
	// held is the tail after records this process wrote into the peer's
	// ring and has not published yet (holding), 0 when none; headSeen is
	// the consumer's head as reserve last read it.
	held     uint64
	headSeen uint64
}

func (f *ringFile) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&f.mem[off])) }
func (f *ringFile) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&f.mem[off])) }
func (f *ringFile) tail(s int) *uint64  { return f.u64(ringCtrlOff + s*ringCtrlSize) }
func (f *ringFile) head(s int) *uint64  { return f.u64(ringCtrlOff + s*ringCtrlSize + 64) }
func (f *ringFile) data(s int) []byte {
	off := ringDataOff + s*ringDataSize
	return f.mem[off : off+ringDataSize : off+ringDataSize]
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
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, ringFileSize); err != nil {
		_ = unix.Unlink(p)
		return nil, fmt.Errorf("size %s: %w", p, err)
	}
	mem, err := unix.Mmap(fd, 0, ringFileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Unlink(p)
		return nil, fmt.Errorf("map %s: %w", p, err)
	}
	rf := &ringFile{gen: gen, mem: mem}
	atomic.StoreUint64(rf.u64(ringFileGen), gen)
	return rf, nil
}

// openRingFile maps the ring file of the process in slot s, which must be
// of generation gen.
func openRingFile(name string, s int, gen uint64) (*ringFile, error) {
	p := ringPath(name, s)
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size != ringFileSize {
		return nil, fmt.Errorf("%s is %d bytes, expected %d: %w", p, st.Size, ringFileSize, ErrFabricVersion)
	}
	mem, err := unix.Mmap(fd, 0, ringFileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	rf := &ringFile{gen: gen, mem: mem}
	if atomic.LoadUint64(rf.u64(ringFileGen)) != gen {
		rf.close()
		return nil, fmt.Errorf("%s belongs to another generation", p)
	}
	return rf, nil
}

func (f *ringFile) close() {
	if f.mem != nil {
		_ = unix.Munmap(f.mem)
		f.mem = nil
	}
}

// reserve finds room for a record of n bytes (header included) in the ring
// this process (slot from) writes in f, after any records held back
// (ringFile.held). It returns the record, the tail to publish with commit,
// and false when the ring is full.
func (f *ringFile) reserve(from, n int) ([]byte, uint64, bool) {
	need := uint64((n + wireAlign - 1) &^ (wireAlign - 1))
	tail := f.held
	if tail == 0 {
		tail = atomic.LoadUint64(f.tail(from))
	}
	data := f.data(from)
	pos := tail & (ringDataSize - 1)
	// The consumer's head, as last read: it only moves on, so the room
	// it leaves is never overstated. It is read again (a transfer from
	// the consumer's cache) only when that room looks too small, or past
	// ringRecycle, where the producer asks whether the ring is empty.
	head := f.headSeen
	if pos >= ringRecycle || pos+need > ringDataSize || ringDataSize-(tail-head) < need {
		head = atomic.LoadUint64(f.head(from))
		f.headSeen = head
	}
	var pad uint64
	switch {
	case pos+need > ringDataSize:
		pad = ringDataSize - pos
	case head == tail && pos >= ringRecycle && need <= pos:
		// The consumer has read everything: start again at the front,
		// whose lines both processes still have in cache, rather than
		// walk on into lines neither has touched since the last lap.
		pad = ringDataSize - pos
	}
	if ringDataSize-(tail-head) < pad+need {
		return nil, 0, false
	}
	if pad != 0 {
		h := (*wireHdr)(unsafe.Pointer(&data[pos]))
		h.Len, h.Kind = uint32(pad), wirePad
		pos = 0
	}
	return data[pos : pos+need], tail + pad + need, true
}

// commit publishes a reserved record and wakes the owner if it sleeps.
func (f *ringFile) commit(from int, tail uint64) {
	atomic.StoreUint64(f.tail(from), tail)
	atomic.AddUint32(f.u32(ringFileWake), 1)
	if atomic.LoadUint32(f.u32(ringFileSleeping)) != 0 {
		futexWake(f.u32(ringFileWake))
	}
}

// pending reports whether any inbound ring holds a record.
func (f *ringFile) pending() bool {
	for s := 0; s < shmMaxSlots; s++ {
		if atomic.LoadUint64(f.tail(s)) != atomic.LoadUint64(f.head(s)) {
			return true
		}
	}
	return false
}

// sleep waits up to d for a producer to commit a record.
func (f *ringFile) sleep(d time.Duration) {
	w := f.u32(ringFileWake)
	seq := atomic.LoadUint32(w)
	atomic.StoreUint32(f.u32(ringFileSleeping), 1)
	if !f.pending() {
		futexWait(w, seq, d)
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

// An engine of a shared fabric idle for shmDeepAfter sleeps shmDeepSleep at
// a time: a peer's message still wakes it at once (futex), a doorbell of
// its own process is seen within shmDeepSleep. Idle wake-ups cost tens of
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
