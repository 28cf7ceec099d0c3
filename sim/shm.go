package sim

import (
	"fmt"
	"math/bits"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// shmFabric is a Fabric's membership of a shared fabric: its slot in the
// registry, its inbound rings, and the peers' ring files it has mapped to
// send.
type shmFabric struct {
	name  string
	slot  int
	gen   uint64
	reg   *registry
	in    *ringFile
	peers [shmMaxSlots]*ringFile
	// seen is the inbound file's wake word as drain last looked at the
	// rings; rounds counts drains since the last scan of all 64.
	seen   uint32
	rounds uint32
	// active marks the slots whose rings have had records (drain reads
	// them first).
	active uint64
	// hold makes send leave its records unpublished (ringFile.held)
	// until publish; held marks the peers' slots with such records.
	hold bool
	held uint64
}

// joinShared joins (creating it if needed) the shared fabric name.
func joinShared(name string, link ctx.LinkLayer) (*shmFabric, error) {
	if !validFabricName(name) {
		return nil, fmt.Errorf("fabric name %q: want 1 to 64 of [A-Za-z0-9._-], not starting with a dot", name)
	}
	r, err := openRegistry(name, link)
	if err != nil {
		return nil, err
	}
	defer r.unlock()
	slot, gen, err := r.claim(name)
	if err != nil {
		r.close()
		return nil, err
	}
	in, err := createRingFile(name, slot, gen)
	if err != nil {
		r.close()
		return nil, err
	}
	r.publish(slot, gen)
	return &shmFabric{name: name, slot: slot, gen: gen, reg: r, in: in}, nil
}

// leave gives the slot back and removes the ring file.
func (s *shmFabric) leave() {
	s.publish()
	s.reg.release(s.slot, s.gen)
	_ = os.Remove(ringPath(s.name, s.slot))
	s.in.close()
	for i, p := range s.peers {
		if p != nil {
			p.close()
			s.peers[i] = nil
		}
	}
	s.reg.close()
}

// remoteSlot returns the slot of another process that owns qpn, or -1 when
// qpn is this process's or nobody's.
func (s *shmFabric) remoteSlot(qpn uint32) int {
	slot := qpnSlot(qpn)
	if slot == s.slot {
		return -1
	}
	return slot
}

// peer returns the ring file of the live process in slot, mapping it when
// the slot changed hands; nil when the slot is free or its file is gone.
func (s *shmFabric) peer(slot int) *ringFile {
	gen := s.reg.gen(slot)
	p := s.peers[slot]
	if p != nil && p.gen == gen {
		return p
	}
	if p != nil {
		p.close()
		s.peers[slot] = nil
	}
	if gen == 0 {
		return nil
	}
	p, err := openRingFile(s.name, slot, gen)
	if err != nil {
		return nil
	}
	s.peers[slot] = p
	return p
}

// send writes one message to the process in slot: fill sets the header
// (Kind, addressing and operation fields) and copies the payload into the
// record's tail. It reports false when the peer is absent or its ring is
// full (the message is lost, as a packet would be).
func (s *shmFabric) send(slot int, payloadLen int, fill func(h *wireHdr, payload []byte)) bool {
	p := s.peer(slot)
	if p == nil {
		return false
	}
	n := wireHdrSize + payloadLen
	rec, tail, ok := p.reserve(s.slot, n)
	if !ok {
		return false
	}
	h := (*wireHdr)(unsafe.Pointer(&rec[0]))
	*h = wireHdr{}
	fill(h, rec[wireHdrSize:n])
	h.Len = uint32(len(rec))
	h.SrcGen, h.DstGen = s.gen, p.gen
	if s.hold && n < shmHoldBytes {
		p.held = tail
		s.held |= 1 << slot
		return true
	}
	p.commit(s.slot, tail) // publishes any held records too
	p.held = 0
	return true
}

// shmHoldBytes bounds what a round holds back: a record this long (a
// segment of data) is published at once, with those held before it, and
// so are the held answers after an inbound record this long, so that a
// stream's ACKs do not wait for a long round to end.
const shmHoldBytes = 4096

// publish makes the records held back by send visible to their peers: one
// tail store and one wake-up per peer, however many records. Records to a
// peer whose slot changed hands since are dropped with its old file.
func (s *shmFabric) publish() {
	for s.held != 0 {
		slot := bits.TrailingZeros64(s.held)
		s.held &^= 1 << slot
		if p := s.peers[slot]; p != nil && p.held != 0 {
			p.commit(s.slot, p.held)
			p.held = 0
		}
	}
}

// peerAlive reports whether the process in slot still runs.
func (s *shmFabric) peerAlive(slot int) bool {
	gen := s.reg.gen(slot)
	return gen != 0 && s.reg.slotAlive(slot, gen)
}

// drain hands every message now in the inbound rings to f; it reports
// whether there was any.
func (s *shmFabric) drain(f *Fabric, now int64) bool {
	// Every producer bumps the wake word after it publishes a record
	// (ringFile.commit), so an unchanged word means no ring has a record
	// the last scan did not see: one load instead of two per ring. When
	// it moved, the rings of the processes that sent before (active) are
	// read first, and all 64 only when none of them had anything: a new
	// sender's first records wait at most for the next full scan, which
	// comes every shmRescan rounds whatever the word says (that also
	// covers a producer that died between its tail and its bump).
	seq := atomic.LoadUint32(s.in.u32(ringFileWake))
	// rounds counts every drain since the last full scan, also those that
	// found the word moved: an active sender moves it every round and
	// must not keep a new sender's ring unread.
	s.rounds++
	if seq == s.seen && s.rounds < shmRescan {
		return false
	}
	full := s.rounds >= shmRescan
	s.seen = seq
	got := false
	if !full {
		for m := s.active; m != 0; m &= m - 1 {
			if s.drainRing(f, bits.TrailingZeros64(m), now) {
				got = true
			}
		}
		if got {
			return true
		}
	}
	s.rounds = 0
	for from := 0; from < shmMaxSlots; from++ {
		if s.drainRing(f, from, now) {
			got = true
		}
	}
	return got
}

// drainRing hands the messages in the ring slot from writes to f and marks
// from active; it reports whether there was any.
func (s *shmFabric) drainRing(f *Fabric, from int, now int64) bool {
	tp, hp := s.in.tail(from), s.in.head(from)
	tail := atomic.LoadUint64(tp)
	head := atomic.LoadUint64(hp)
	if head == tail {
		return false
	}
	s.active |= 1 << from
	data := s.in.data(from)
	srcGen := s.reg.gen(from)
	for head != tail {
		pos := head & (ringDataSize - 1)
		h := (*wireHdr)(unsafe.Pointer(&data[pos]))
		n := uint64(h.Len)
		if n < wireAlign || n%wireAlign != 0 || n > tail-head || pos+n > ringDataSize {
			// A record no producer of this version writes: drop what
			// is in the ring rather than read past it.
			head = tail
			break
		}
		if h.Kind != wirePad && h.SrcGen == srcGen && h.DstGen == s.gen {
			rec := data[pos : pos+n]
			f.wireIn(from, h, rec[wireHdrSize:], now)
			if n >= shmHoldBytes && s.held != 0 {
				s.publish()
			}
		}
		head += n
		if n >= shmHoldBytes {
			// Room for the producer as soon as a large record is
			// done; small ones give theirs back together.
			atomic.StoreUint64(hp, head)
		}
	}
	atomic.StoreUint64(hp, head)
	return true
}

// shmRescan is how many rounds drain trusts the wake word before it scans
// every ring regardless.
const shmRescan = 1024

// joinLocked joins the shared fabric the options name, once (f.mu held).
// The HCAs are renumbered into the slot's LIDs and GIDs and the QPN space
// narrowed to the slot's range, before any device is open.
func (f *Fabric) joinLocked() error {
	if f.shmJoined {
		return f.shmErr
	}
	f.shmJoined = true
	if addr, key := f.linkConfig(); addr != "" {
		return f.joinLinkLocked(addr, key)
	}
	name := f.opts.Fabric
	if name == "" && f.fabricEnv {
		name = os.Getenv(EnvFabric)
		f.opts.Fabric = name
	}
	if name == "" {
		return nil
	}
	fail := func(err error) error {
		f.shmErr = fmt.Errorf("join fabric %q: %w", name, err)
		return f.shmErr
	}
	switch {
	case f.opts.Mode != Engine:
		return fail(fmt.Errorf("a shared fabric needs Engine mode: %w", ctx.ErrInvalidArgument))
	case len(f.hcas) > shmMaxDevices:
		return fail(fmt.Errorf("%d devices, at most %d in a shared fabric: %w", len(f.hcas), shmMaxDevices, ctx.ErrInvalidArgument))
	case f.closed:
		return fail(ctx.ErrClosed)
	}
	sh, err := joinShared(name, f.opts.LinkLayer)
	if err != nil {
		return fail(err)
	}
	f.shm = sh
	for i := range f.hcas {
		h := newHCA(sh.slot*shmMaxDevices+i, f.opts.LinkLayer)
		h.index, h.name = i, fmt.Sprintf("sim%d", i)
		f.hcas[i] = h
	}
	first, limit := slotQPNRange(sh.slot)
	f.qpns = newNumberSpace(first, limit)
	return nil
}

// remoteSlot returns the slot of the process of a shared fabric that owns
// qpn, or -1 when the Fabric is not shared or qpn is its own.
func (f *Fabric) remoteSlot(qpn uint32) int {
	if f.tcp != nil {
		return f.tcp.remoteSlot(qpn)
	}
	if f.shm == nil {
		return -1
	}
	return f.shm.remoteSlot(qpn)
}

// SharedFabric returns the name of the shared fabric this Fabric joined and
// its slot in it, or "" and -1 when it has joined none.
func (f *Fabric) SharedFabric() (name string, slot int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shm == nil {
		return "", -1
	}
	return f.shm.name, f.shm.slot
}

// DefaultFabricName is the shared fabric the measuring tools join on the
// software HCA when they run as -server or -client and EnvFabric is unset.
const DefaultFabricName = "default"

// Reaches reports whether a QP numbered qpn can be reached from this
// Fabric: one of its own, or one in the QPN range of a live process of the
// shared fabric it joined. It says nothing about whether that process has
// such a QP.
func (f *Fabric) Reaches(qpn uint32) bool {
	f.mu.Lock()
	if q := f.qps[qpn]; q != nil {
		f.mu.Unlock()
		return true
	}
	if l := f.tcp; l != nil {
		// Not under f.mu: the engine may have to take the listener's
		// announcement of a Fabric just linked.
		f.mu.Unlock()
		return l.reaches(qpn)
	}
	defer f.mu.Unlock()
	if f.shm == nil {
		return false
	}
	s := f.shm.remoteSlot(qpn)
	return s >= 0 && f.shm.peerAlive(s)
}
