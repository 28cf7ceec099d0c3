package transport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"unsafe"
)

// FuzzRecvSequence drives a receive ring, a QP's own receive queue or a
// shared one, with a sequence of calls decoded from the input: BeginRecv
// stages (several alive at once), SGE and Finish or FinishDoorbell on any
// of them in any order, PostRecv, the doorbell, and completions of posted,
// free and out-of-range slots. After every call the ring and the doorbell
// record must hold exactly what a reference model says, the outstanding
// count must agree, and every error must be the one the model expects.
//
// The model is written from the mlx5 layouts with encoding/binary: a data
// segment is byte_count, lkey and address, big-endian; a list shorter than
// the max SGE ends with lkey 0x100; an SRQ WQE starts with a 16-byte next
// segment whose bytes 2..3 link the free list; the doorbell record's first
// word is the big-endian 16-bit counter. It states the stage contract: a
// stage writes only while it is the ring's open stage (the last begun, not
// yet posted), and Finish posts it only then, else wqebuilder.ErrStaleStage.
func FuzzRecvSequence(f *testing.F) {
	f.Add([]byte{0, 2, 0, 1, 3, 9, 2, 0, 4, 1, 0, 2, 1, 5, 0, 6, 0, 7, 0, 0})
	f.Add([]byte{1, 3, 0, 0, 1, 0, 40, 2, 1, 1, 0, 3, 4, 0, 5, 7, 6, 1, 6, 0, 0, 1, 2, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 6, 0, 6, 0, 4, 5, 2, 1, 3, 0})
	f.Add([]byte{1, 1, 0, 1, 0, 2, 1, 0, 2, 2, 0, 3, 2, 6, 9, 6, 200, 4, 4, 4, 4, 4, 0, 3})
	f.Fuzz(func(t *testing.T, prog []byte) { runRecvSequence(t, prog) })
}

// TestRecvSequenceRandom runs the fuzz body on pseudo-random programs, so
// that a plain go test covers more than the seed corpus.
func TestRecvSequenceRandom(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	x := uint64(0x7ec5)
	next := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	for i := range n {
		prog := make([]byte, 4+int(next()%300))
		for j := range prog {
			prog[j] = byte(next())
		}
		if !t.Run(fmt.Sprint(i), func(t *testing.T) { runRecvSequence(t, prog) }) {
			t.Fatalf("program %x", prog)
		}
	}
}

// Model constants, from the PRM layouts (not from internal/prm).
const (
	fzCnt        = 8
	fzStride     = 64
	fzInvalidKey = 0x100
)

// fzStage is the model's view of a stage: the byte offset of its first
// data segment in the ring (-1: refused), its entries and whether SGE
// refused one.
type fzStage struct {
	s      RecvStage
	first  int
	n      int
	sgeErr bool
	wrid   uint64
}

type fzRecvModel struct {
	t       *testing.T
	r       *recvRing
	rg      *ring
	srq     bool
	maxSGE  int
	ring    []byte // what the ring must hold
	dbrec   []byte
	open    int // first data segment of the open stage, -1 none
	head    int // RQ: posted, free-running; SRQ: next free slot
	tail    int // RQ: completed, free-running; SRQ: free list's last slot
	counter uint32
	busy    [fzCnt]bool
	wrid    [fzCnt]uint64
	posted  int
	stages  []*fzStage
}

func runRecvSequence(t *testing.T, prog []byte) {
	if len(prog) < 2 {
		return
	}
	pos := 0
	b := func() byte {
		if pos >= len(prog) {
			return 0
		}
		pos++
		return prog[pos-1]
	}
	m := &fzRecvModel{t: t, srq: b()%2 == 1, open: -1}
	m.rg = newTestRing(fzCnt * fzStride)
	segOff := 0
	if m.srq {
		segOff = 16
		for i := range fzCnt - 1 {
			binary.BigEndian.PutUint16(m.rg.mem[i*fzStride+2:], uint16(i+1))
		}
		m.head, m.tail = 0, fzCnt-1
	}
	limit := uint32(b() % 5) // 0: as many as the stride holds
	r, err := newRecvRing(m.rg.buf, unsafe.Pointer(&m.rg.dbrec[0]), fzCnt, fzStride, limit, m.srq, uint32(m.head), uint32(m.tail))
	if err != nil {
		t.Fatal(err)
	}
	setTestErrors(r)
	m.r = r
	m.maxSGE = (fzStride - segOff) / 16
	if limit != 0 && int(limit) < m.maxSGE {
		m.maxSGE = int(limit)
	}
	if int(r.maxSGE) != m.maxSGE {
		t.Fatalf("max SGE %d, model %d", r.maxSGE, m.maxSGE)
	}
	m.ring = bytes.Clone(m.rg.mem)
	m.dbrec = bytes.Clone(m.rg.dbrec)
	wrid := uint64(0)
	for ops := 0; ops < 120 && pos < len(prog); ops++ {
		op := b() % 8
		pick := func() *fzStage {
			if len(m.stages) == 0 {
				return nil
			}
			return m.stages[int(b())%len(m.stages)]
		}
		switch op {
		case 0, 1: // BeginRecv
			wrid++
			m.begin(wrid)
		case 2, 3: // SGE on a stage
			if st := pick(); st != nil {
				length := uint32(b()%4) * 24 // 0 adds nothing
				m.sge(st, 0x1000+uint64(b()), length, 0x70+uint32(b()%3))
			}
		case 4: // Finish or FinishDoorbell on a stage
			if st := pick(); st != nil {
				m.finish(st, b()%2 == 1)
			}
		case 5: // PostRecv
			wrid++
			m.postRecv(wrid, 0x2000+uint64(b()), uint32(b()%3)*8, 0x80)
		case 6: // a completion
			m.take(b())
		default:
			m.ringDoorbell()
		}
		m.check(fmt.Sprintf("op %d (%d)", ops, op))
	}
}

func (m *fzRecvModel) full() bool {
	if m.srq {
		return m.head == m.tail
	}
	return m.head-m.tail >= fzCnt
}

func (m *fzRecvModel) slot() int {
	if m.srq {
		return m.head
	}
	return m.head % fzCnt
}

func (m *fzRecvModel) firstSeg(slot int) int {
	if m.srq {
		return slot*fzStride + 16
	}
	return slot * fzStride
}

func (m *fzRecvModel) begin(wrid uint64) {
	st := &fzStage{first: -1, wrid: wrid}
	st.s = m.r.testBegin(wrid)
	if !m.full() {
		st.first = m.firstSeg(m.slot())
		m.open = st.first
	}
	m.stages = append(m.stages, st)
	if len(m.stages) > 4 {
		m.stages = m.stages[1:]
	}
}

func (m *fzRecvModel) putSeg(off int, length, lkey uint32, addr uint64) {
	binary.BigEndian.PutUint32(m.ring[off:], length)
	binary.BigEndian.PutUint32(m.ring[off+4:], lkey)
	binary.BigEndian.PutUint64(m.ring[off+8:], addr)
}

func (m *fzRecvModel) sge(st *fzStage, addr uint64, length, lkey uint32) {
	st.s = st.s.SGE(addr, length, lkey)
	switch {
	case length == 0 || st.first < 0 || st.sgeErr:
	case st.n >= m.maxSGE || st.first != m.open:
		st.sgeErr = true
	default:
		m.putSeg(st.first+16*st.n, length, lkey, addr)
		st.n++
	}
}

// post is the model's posting of the open stage's slot with n entries.
func (m *fzRecvModel) post(first, n int, wrid uint64) {
	if n < m.maxSGE {
		m.putSeg(first+16*n, 0, fzInvalidKey, 0)
	}
	slot := m.slot()
	m.wrid[slot] = wrid
	if m.srq {
		m.busy[slot] = true
		m.head = int(binary.BigEndian.Uint16(m.ring[slot*fzStride+2:])) % fzCnt
	} else {
		m.head++
	}
	m.counter++
	m.posted++
	m.open = -1
}

func (m *fzRecvModel) finish(st *fzStage, bell bool) {
	var err error
	if bell {
		err = st.s.FinishDoorbell()
	} else {
		err = st.s.Finish()
	}
	want := ""
	switch {
	case st.first < 0:
		want = "full"
	case st.first != m.open:
		want = "stale"
	case st.sgeErr:
		want = "sge"
	default:
		m.post(st.first, st.n, st.wrid)
		if bell {
			m.ringDoorbell()
		}
	}
	m.wantErr("Finish", err, want)
}

func (m *fzRecvModel) postRecv(wrid, addr uint64, length, lkey uint32) {
	// What Queue.PostRecv and SharedReceiveQueue.PostRecv do.
	err := m.r.testBegin(wrid).SGE(addr, length, lkey).FinishDoorbell()
	if m.full() {
		m.wantErr("PostRecv", err, "full")
		return
	}
	m.wantErr("PostRecv", err, "")
	first, n := m.firstSeg(m.slot()), 0
	if length != 0 {
		m.putSeg(first, length, lkey, addr)
		n = 1
	}
	m.post(first, n, wrid)
	m.ringDoorbell()
}

func (m *fzRecvModel) ringDoorbell() {
	m.r.ringDoorbell()
	binary.BigEndian.PutUint32(m.dbrec, m.counter&0xffff)
}

func (m *fzRecvModel) take(sel byte) {
	var counter uint16
	switch {
	case m.srq:
		counter = uint16(sel % (fzCnt + 2)) // two past the last slot
	case sel%4 == 0:
		counter = uint16(m.tail + int(sel>>2)%3) // a later one: out of order
	default:
		counter = uint16(m.tail)
	}
	got, ok := m.r.take(counter)
	want, wantOK := uint64(0), false
	switch {
	case m.srq && int(counter) < fzCnt && m.busy[counter]:
		want, wantOK = m.wrid[counter], true
		m.busy[counter] = false
		binary.BigEndian.PutUint16(m.ring[m.tail*fzStride+2:], counter)
		m.tail = int(counter)
		m.posted--
	case !m.srq && m.posted > 0 && int(counter) == m.tail:
		want, wantOK = m.wrid[m.tail%fzCnt], true
		m.tail++
		m.posted--
	}
	if ok != wantOK || got != want {
		m.t.Fatalf("take(%d) = %d, %v; model %d, %v", counter, got, ok, want, wantOK)
	}
}

func (m *fzRecvModel) wantErr(what string, err error, want string) {
	m.t.Helper()
	got := ""
	if err != nil {
		got = err.Error()
	}
	if got != want {
		m.t.Fatalf("%s: error %q, model %q", what, got, want)
	}
}

func (m *fzRecvModel) check(what string) {
	m.t.Helper()
	if !bytes.Equal(m.rg.mem, m.ring) {
		for i := range m.ring {
			if m.rg.mem[i] != m.ring[i] {
				m.t.Fatalf("%s: ring byte %d (slot %d) = %#x, model %#x", what, i, i/fzStride, m.rg.mem[i], m.ring[i])
			}
		}
	}
	if !bytes.Equal(m.rg.dbrec, m.dbrec) {
		m.t.Fatalf("%s: doorbell record %x, model %x", what, m.rg.dbrec, m.dbrec)
	}
	if int(m.r.posted) != m.posted {
		m.t.Fatalf("%s: %d posted, model %d", what, m.r.posted, m.posted)
	}
}
