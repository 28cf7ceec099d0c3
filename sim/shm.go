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
	// hdr is where send builds a record's header; hdrIn is where
	// drainRing copies the header of a record it takes.
	hdr, hdrIn wireHdr
	// smallIn is where drainRing copies a one-line record (wireSmall);
	// its payload is handed on from there. ackIn is the ACK such a
	// record carries (wireSmallAck).
	smallIn wireSmallHdr
	ackIn   wireHdr
	// first is the slot whose ring drain reads first: the one after
	// the ring where the last drain stopped at a completion, so that
	// every sender's messages are taken in turn; stopped says whether
	// the last drain stopped there (messages may be left unread).
	first   int
	stopped bool
	// noSpace counts the messages send could not place because the
	// file system could not allocate the ring's pages (Stats.RingNoSpace).
	noSpace uint64
}

// joinShared joins (creating it if needed) the shared fabric name.
func joinShared(name string, link ctx.LinkLayer, devices int) (*shmFabric, error) {
	if err := CheckFabricName(name); err != nil {
		return nil, err
	}
	r, err := openRegistry(name, link)
	if err != nil {
		return nil, err
	}
	// On failure the registry is unlocked, then closed (never unlocked
	// after close: the descriptor's number may by then name another
	// file). A slot claimed but not published stays free.
	slot, gen, err := r.claim(name, devices)
	if err != nil {
		r.unlock()
		r.close()
		return nil, err
	}
	in, err := createRingFile(name, slot, gen)
	if err != nil {
		r.unlock()
		r.close()
		return nil, err
	}
	r.publish(slot, gen)
	r.unlock()
	return &shmFabric{name: name, slot: slot, gen: gen, reg: r, in: in}, nil
}

// leave gives the slot back and removes the ring file.
func (s *shmFabric) leave() {
	s.reg.release(s.name, s.slot, s.gen)
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
	if err := p.resume(s.slot); err != nil {
		// No room in the file system for the ring's lines: absent
		// until there is.
		p.close()
		s.noSpace++
		return nil
	}
	s.peers[slot] = p
	return p
}

// dropGone unmaps the ring file of every peer whose slot has changed hands
// or is free in the registry (f.mu held), as peer does when it next sends
// to such a slot: a process that left, or one found gone, has its ring
// file removed (registry.release, reap), and the pages this process
// allocated in it as a producer (up to a ring's size) are freed only once
// its mapping and descriptor are closed too. A peer that died but whose
// slot nobody has reclaimed yet keeps its file, and so its pages, until
// a process joins or leaves (reap): its mapping is kept until then. It
// reads one registry word per mapped peer and makes no system call but
// the munmap and close of a peer that left; every use of a peer's
// mapping (send, open, publish, room) ends before f.mu is released, so
// none outlasts it.
func (s *shmFabric) dropGone() {
	for i := range s.peers {
		if p := s.peers[i]; p != nil && s.reg.gen(i) != p.gen {
			p.close()
			s.peers[i] = nil
		}
	}
}

// shmGoneRounds is how often, in rounds, stepLocked looks for peers that
// left (dropGone); a power of two. The engine also looks before each of
// its sleeps, so that an idle process frees a departed peer's ring within
// one sleep of its leaving.
const shmGoneRounds = 1024

// send writes one message to the process in slot: fill sets the header
// (Kind, addressing and operation fields) and copies the payload into the
// record's tail. The record is published before send returns. It reports
// false when the peer is absent or its ring is full (the message is lost,
// as a packet would be).
func (s *shmFabric) send(slot int, payloadLen int, fill func(h *wireHdr, payload []byte)) bool {
	p, rec, at, ok := s.open(slot, ringRecHdr+payloadLen)
	if !ok {
		return false
	}
	h := &s.hdr
	*h = wireHdr{}
	fill(h, rec[ringRecHdr:ringRecHdr+payloadLen])
	s.publish(p, rec, at)
	return true
}

// open places a record of n bytes, its mark included, in the ring of the
// process in slot, as send does, for a caller that then writes it and
// publishes it: a message's record (n is ringRecHdr and the payload; the
// caller sets s.hdr, copies the payload after ringRecHdr and calls
// publish), or a one-line record (n is wireAlign; the caller writes its
// wireSmallHdr and commits it). The record is the whole of its place in
// the ring, padded to wireAlign. ok is false when the peer is absent or
// its ring has no room (nothing is written).
func (s *shmFabric) open(slot int, n int) (p *ringFile, rec []byte, at uint64, ok bool) {
	if p = s.peer(slot); p == nil {
		return nil, nil, 0, false
	}
	p.announce(s.slot)
	rec, at, err := p.reserve(s.slot, n)
	if err != nil {
		if err != errRingFull {
			s.noSpace++
		}
		return nil, nil, 0, false
	}
	return p, rec, at, true
}

// publish completes the record open placed at position at of p's ring with
// the header in s.hdr and publishes it.
func (s *shmFabric) publish(p *ringFile, rec []byte, at uint64) {
	// The header is built in s.hdr and copied into the ring whole: a
	// few wide stores into lines the consumer holds, instead of one per
	// field (and the zeroing before them), each waiting in the store
	// buffer for its line. Its part in the record's second line goes
	// first, after the payload, and the first line (the mark's) last:
	// the consumer, which asks for the second line as it polls the
	// first (markAt), then finds the second line whole.
	h := &s.hdr
	h.Len = uint32(len(rec))
	h.SrcGen, h.DstGen = s.gen, p.gen
	// Word by word, unrolled (the header and its place in the ring are
	// 8-byte aligned): an array copy of these sizes is a call to
	// memmove. Words 7 to 12 lie in the record's second line, 0 to 6 in
	// the first (hdrWords and hdrFirstLineWords).
	src := (*[hdrWords]uint64)(unsafe.Pointer(h))
	dst := (*[hdrWords]uint64)(unsafe.Pointer(&rec[ringMarkSize]))
	dst[7], dst[8], dst[9], dst[10], dst[11], dst[12] = src[7], src[8], src[9], src[10], src[11], src[12]
	dst[0], dst[1], dst[2], dst[3], dst[4], dst[5], dst[6] = src[0], src[1], src[2], src[3], src[4], src[5], src[6]
	p.commit(s.slot, at, len(rec))
}

// The header in words, and its words in a record's first line (after the
// mark): send copies them one by one, and fails to compile if they change.
const (
	hdrWords          = wireHdrSize / 8
	hdrFirstLineWords = (wireAlign - ringMarkSize) / 8
)

var (
	_ [hdrWords - 13]struct{}
	_ [13 - hdrWords]struct{}
	_ [hdrFirstLineWords - 7]struct{}
	_ [7 - hdrFirstLineWords]struct{}
)

// room reports whether a message with a payload of payloadLen bytes to the
// process in slot has room in its ring now: send then takes it.
func (s *shmFabric) room(slot int, payloadLen int) bool {
	p := s.peer(slot)
	return p != nil && p.fits(s.slot, ringRecHdr+payloadLen)
}

// peerAlive reports whether the process in slot still runs.
func (s *shmFabric) peerAlive(slot int) bool {
	gen := s.reg.gen(slot)
	return gen != 0 && s.reg.slotAlive(slot, gen)
}

// peerDevices returns the number of HCAs of the process in slot, 0 when
// the slot is free or its process is gone.
func (s *shmFabric) peerDevices(slot int) int {
	gen := s.reg.gen(slot)
	if gen == 0 {
		return 0
	}
	n := s.reg.devices(slot)
	if !s.reg.slotAlive(slot, gen) {
		return 0
	}
	return n
}

// drain hands the messages now in the inbound rings to f; it reports
// whether there was any. It stops after a request or datagram that writes
// a CQE (a receive completion: what a polling loop waits for in a round
// trip), without looking at what follows (a look at the next record's
// line would pull it from the producer while it writes there): the loop
// sees its completion first, and the next round takes the rest. The ring
// it stopped in is then read last, and whole: a completing request at its
// head is one of a run (a stream of SENDs), which does not cost a round
// each. Answers (ACKs, READ data, atomic results) never stop it. It reads
// the rings of the slots that announced themselves in the senders word,
// each at its head's mark, from the slot after the ring where it last
// stopped.
func (s *shmFabric) drain(f *Fabric) bool {
	got := false
	// The ring the last drain stopped in, if it did: a completing
	// request at its head now is one of a run (a stream of SENDs),
	// which this drain takes whole.
	run := -1
	if s.stopped {
		run = (s.first + shmMaxSlots - 1) % shmMaxSlots
	}
	s.stopped = false
	// This process's own slot is never a producer here (a message to a
	// QP of its own executes in the process): a record in that ring was
	// written by another member in this process's name.
	senders := atomic.LoadUint64(s.in.u64(ringFileSenders)) &^ (1 << s.slot)
	m := bits.RotateLeft64(senders, -s.first)
	for ; m != 0; m &= m - 1 {
		slot := (bits.TrailingZeros64(m) + s.first) % shmMaxSlots
		read, stopped := s.drainRing(f, slot, slot == run)
		got = got || read
		if stopped {
			s.stopped = true
			s.first = (slot + 1) % shmMaxSlots
			break
		}
	}
	return got
}

// drainRing hands the published messages in the ring slot from writes to
// f, stopping after a request or datagram that wrote a CQE unless run (the
// last drain stopped in this ring: see drain); it reports whether there
// was any, and whether it stopped.
func (s *shmFabric) drainRing(f *Fabric, from int, run bool) (read, stopped bool) {
	hp := s.in.head(from)
	// Positions are kept aligned: a peer can write the head and the
	// tail (they lie in shared memory), and a record's header is read
	// at its position.
	head := atomic.LoadUint64(hp) &^ (wireAlign - 1)
	start := head
	data := s.in.data(from)
	for s.in.markAt(from, head) {
		pos := head & (ringDataSize - 1)
		rh := (*wireHdr)(unsafe.Pointer(&data[pos+ringMarkSize]))
		n, kind := uint64(rh.Len), rh.Kind
		if n < wireAlign || n%wireAlign != 0 || pos+n > ringDataSize ||
			kind != wirePad && kind != wireSmall && n < uint64(ringRecHdr) || kind == wireSmall && n != wireAlign {
			// A record no producer of this version writes: drop what
			// is in the ring rather than read past it, and at least
			// the record's first line, so that it is not found again.
			t := atomic.LoadUint64(s.in.tail(from)) &^ (wireAlign - 1)
			if t-head-1 >= ringDataSize {
				t = head + wireAlign
			}
			head = t
			break
		}
		// The header is copied out of the ring before anything is
		// checked against it: the sender can still write there, and a
		// field read twice could pass a check and then name another
		// address, length or kind.
		if kind == wireSmall {
			// A one-line record: copied out whole, checked as a
			// wireHdr is, and handed on as the wireHdr it stands for.
			c := &s.smallIn
			*c = *(*wireSmallHdr)(unsafe.Pointer(rh))
			src := s.producerGen(from)
			if src != 0 && c.SrcGen == uint32(src) && c.DstGen == uint32(s.gen) && c.SrcQPN/shmSlotQPNs == uint32(from)+1 && c.NSL&wireSmallLen <= wireSmallMax {
				h := &s.hdrIn
				c.expand(h, src, s.gen)
				if c.NSL&wireSmallAck != 0 && !f.wireCarriedAck(h.DstQPN, h.SrcQPN, c.Epoch&ctx.MaxPSN) {
					// The ACK it carries first: it stood ahead of
					// the request.
					c.carriedAck(&s.ackIn, h)
					f.wireIn(from, &s.ackIn, nil)
				}
				cqes := f.stats.CQEs
				f.wireIn(from, h, c.Data[:h.Seg])
				if f.stats.CQEs != cqes && !run {
					head += n
					stopped = true
					break
				}
			}
		} else if kind != wirePad {
			h := &s.hdrIn
			*h = *rh
			h.Len, h.Kind = uint32(n), kind
			// A process speaks for its own QPs only: a record whose
			// source QPN is another slot's is dropped, as the TCP
			// link's listener drops one (a request or answer in
			// another process's name, or a DC stream per QPN of the
			// whole space). The range test is qpnSlot(h.SrcQPN) ==
			// from in fewer instructions.
			if h.SrcGen != 0 && h.SrcGen == s.producerGen(from) && h.DstGen == s.gen && h.SrcQPN/shmSlotQPNs == uint32(from)+1 {
				cqes := f.stats.CQEs
				f.wireIn(from, h, data[pos+uint64(ringRecHdr):pos+n])
				if kind != wireResponse && f.stats.CQEs != cqes && !run {
					head += n
					stopped = true
					break
				}
			}
		}
		head += n
		if n >= ringGiveBack {
			// Room for the producer as soon as a large record is
			// done; small ones give theirs back together.
			storeRelease64(hp, head)
		}
		if head-start >= ringDataSize {
			// A ring's worth in one call: the rest waits for the
			// next round, so that a producer that keeps up with the
			// room given back, or one that writes marks ahead of the
			// head given back (a hostile one, of small records),
			// cannot hold this one here (and the Fabric's lock) for
			// ever.
			break
		}
	}
	if head == start {
		return false, stopped
	}
	// A release store: a fence here would wait for the answers this
	// round wrote into the peers' rings to leave the store buffer.
	storeRelease64(hp, head)
	return true, stopped
}

// producerGen returns the generation whose records the ring slot from
// writes in carries: its owner's, or, once the slot is free, its last
// owner's (registry.lastGen). A process that closes its Fabric flushes
// the ACKs it holds into its peers' rings and then frees its slot: they
// were sent while it lived, and are taken as a NIC takes packets already
// on the wire. A new owner's generation replaces it.
func (s *shmFabric) producerGen(from int) uint64 {
	if g := s.reg.gen(from); g != 0 {
		return g
	}
	return s.reg.lastGen(from)
}

// ringGiveBack is the size of a record after which drainRing moves its
// head at once rather than after the last record it finds.
const ringGiveBack = 4096

// joinLocked joins the shared fabric the options name, once (f.mu held).
// The HCAs are renumbered into the slot's LIDs and GIDs and the QPN space
// narrowed to the slot's range, before any device is open.
func (f *Fabric) joinLocked() error {
	if f.shmJoined {
		return f.shmErr
	}
	f.shmJoined = true
	if f.envErr != nil {
		f.shmErr = f.envErr
		return f.shmErr
	}
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
	sh, err := joinShared(name, f.opts.LinkLayer, len(f.hcas))
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
