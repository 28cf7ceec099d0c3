package wqebuilder_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// FuzzBuilderSequence drives a send queue with a random sequence of builder
// calls (Begin, an address, an operation, SGEs, inline pieces, Finish,
// FinishBlueFlame, a repeated Finish, RingDoorbell, Complete) decoded from
// the input, and checks after every call that the ring, the doorbell record
// and the BlueFlame register hold exactly what a reference encoder says.
//
// The reference encoder below is written from the mlx5 PRM layouts (the
// structs of infiniband/mlx5dv.h) with encoding/binary; it uses nothing from
// wqebuilder or internal/prm. It models the documented contract: a
// successful WQE writes exactly its segments (inline padding is not
// written), a failed one moves nothing and writes nowhere but the WQEBBs it
// was given (nowhere at all when the queue was full), and Complete retires
// a WQE and everything before it only when the counter names the start of a
// WQE in flight.
//
// The ring, the doorbell record and the register each end where a
// PROT_NONE page begins, so a write past any of them faults; the bytes before
// them on their pages are checked too.
func FuzzBuilderSequence(f *testing.F) {
	f.Add([]byte{3, 4, 200, 0x06, 5, 0, 0x08, 0, 4, 3, 1, 2, 3, 0, 1, 0, 1, 2, 0x02, 9, 1, 3})
	f.Add([]byte{0, 1, 16, 0x02, 0, 0, 0x08, 0, 0, 0, 0, 2, 0, 0x08, 0, 1, 0, 0, 1, 2, 0, 2, 5})
	f.Add([]byte{1, 0, 60, 0x07, 0, 0, 0xff, 1, 1, 3, 80, 1, 0, 0xff, 2, 11, 0, 0, 2, 0xff, 3, 12, 2, 2})
	f.Add([]byte{6, 9, 255, 0x0e, 14, 0, 0x08, 0, 4, 5, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 2, 1, 0})
	f.Add([]byte{2, 2, 0, 0x02, 0, 0, 0x08, 2, 9, 0, 0, 0x08, 3, 10, 0, 2, 0, 0x08, 0, 8, 0, 2, 7})
	f.Fuzz(func(t *testing.T, prog []byte) {
		in := &fzInput{b: prog}
		cfg := fzConfig(in)
		rig := newFzRig(t, cfg)
		if rig == nil {
			return
		}
		for ops := 0; ops < 96 && !in.done(); ops++ {
			switch in.byte() % 8 {
			case 0, 1, 2, 3, 4:
				rig.post(in)
			case 5:
				rig.ringDoorbell()
			default:
				rig.complete(in)
			}
			rig.check()
		}
	})
}

// TestBuilderSequenceRandom runs the fuzz body on pseudo-random programs, so
// that a plain go test covers more than the seed corpus.
func TestBuilderSequenceRandom(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 300
	}
	x := fzRand(0x5eed)
	for i := 0; i < n; i++ {
		prog := make([]byte, 8+int(x.next()%400))
		for j := range prog {
			prog[j] = byte(x.next())
		}
		in := &fzInput{b: prog}
		cfg := fzConfig(in)
		ok := t.Run(fmt.Sprint(i), func(t *testing.T) {
			rig := newFzRig(t, cfg)
			if rig == nil {
				return
			}
			for ops := 0; ops < 96 && !in.done(); ops++ {
				switch in.byte() % 8 {
				case 0, 1, 2, 3, 4:
					rig.post(in)
				case 5:
					rig.ringDoorbell()
				default:
					rig.complete(in)
				}
				rig.check()
			}
		})
		if !ok {
			t.Fatalf("program %x", prog)
		}
	}
}

// fzInput hands out the fuzz input byte by byte (zeros once it runs out).
type fzInput struct {
	b []byte
	i int
}

func (in *fzInput) done() bool { return in.i >= len(in.b) }

func (in *fzInput) byte() byte {
	if in.i >= len(in.b) {
		in.i++
		return 0
	}
	in.i++
	return in.b[in.i-1]
}

func (in *fzInput) u16() uint16 { return uint16(in.byte())<<8 | uint16(in.byte()) }

// fzRand is a splitmix64 generator for the values whose bits do not matter
// to the structure (addresses, keys, payload bytes).
type fzRand uint64

func (r *fzRand) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	z := uint64(*r)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// fzConfig decodes a send queue configuration from the first input bytes.
func fzConfig(in *fzInput) wqebuilder.Config {
	b0, b1, b2, b3, b4 := in.byte(), in.byte(), in.byte(), in.byte(), in.byte()
	cfg := wqebuilder.Config{
		WQECnt:    1 << (1 + b0%7), // 2 .. 128 WQEBBs
		QPN:       0x5a0000 | uint32(b4)<<4 | uint32(b0),
		MaxSGE:    uint32(b1 % 10),
		MaxInline: uint32(b2) | uint32(b3&1)<<8,
	}
	if b3&2 != 0 {
		cfg.BlueFlameSize = 256
	}
	if b3&4 != 0 {
		cfg.MaxWQEBBs = 2 + uint32(b4%15)
	}
	return cfg
}

// fzWQE is a WQE in flight in the reference.
type fzWQE struct {
	start uint32 // producer index of its first WQEBB
	bbs   uint32
	wrid  uint64
}

// fzRig is the queue under test and its reference state.
type fzRig struct {
	t   *testing.T
	q   *wqebuilder.SendQueue
	cfg wqebuilder.Config
	rnd fzRand

	ringPages, dbPages, bfPages []byte // actual memory, whole pages
	ring, reg                   []byte
	refRing, refDB, refBF       []byte // expected content of the pages

	pi, ci, rung uint32
	bfOff        uint32
	lastDB       [8]byte
	inflight     []fzWQE
	wrid         uint64
	maxDS        uint32
}

func newFzRig(t *testing.T, cfg wqebuilder.Config) *fzRig {
	r := &fzRig{t: t, rnd: fzRand(cfg.QPN)}
	ringBytes := int(cfg.WQECnt) * 64
	r.ringPages, r.ring = guardedTail(t, ringBytes)
	regBytes := max(2*int(cfg.BlueFlameSize), 8)
	r.bfPages, r.reg = guardedTail(t, regBytes)
	var dbrec []byte
	r.dbPages, dbrec = guardedTail(t, 8)
	for _, p := range [][]byte{r.ringPages, r.dbPages, r.bfPages} {
		for i := range p {
			p[i] = byte(r.rnd.next())
		}
	}
	cfg.Buf = unsafe.Pointer(&r.ring[0])
	cfg.DBRec = unsafe.Pointer(&dbrec[0])
	cfg.BlueFlame = unsafe.Pointer(&r.reg[0])
	q, err := wqebuilder.New(cfg)
	if err != nil {
		if !errors.Is(err, ctx.ErrInvalidArgument) {
			t.Fatalf("New: %v does not match ctx.ErrInvalidArgument", err)
		}
		return nil
	}
	r.q = q
	r.cfg = q.Config()
	if r.cfg.MaxWQEBBs < 2 || r.cfg.MaxWQEBBs > 16 || r.cfg.MaxWQEBBs > r.cfg.WQECnt {
		t.Fatalf("New accepted max WQEBBs %d for a ring of %d", r.cfg.MaxWQEBBs, r.cfg.WQECnt)
	}
	r.maxDS = min(r.cfg.MaxWQEBBs*4, 63)
	r.refRing = bytes.Clone(r.ringPages)
	r.refDB = bytes.Clone(r.dbPages)
	r.refBF = bytes.Clone(r.bfPages)
	r.check()
	return r
}

// ringOff is the offset in ringPages of ring byte i (wrapped).
func (r *fzRig) ringOff(i uint32) int {
	n := uint32(len(r.ring))
	return len(r.ringPages) - len(r.ring) + int(i%n)
}

// check compares every page with the reference and the counters.
func (r *fzRig) check() {
	t := r.t
	t.Helper()
	for _, c := range []struct {
		name      string
		got, want []byte
	}{{"send ring page", r.ringPages, r.refRing}, {"doorbell record page", r.dbPages, r.refDB}, {"BlueFlame page", r.bfPages, r.refBF}} {
		if !bytes.Equal(c.got, c.want) {
			i := 0
			for c.got[i] == c.want[i] {
				i++
			}
			t.Fatalf("%s differs from the reference at byte %d: got %#02x, want %#02x", c.name, i, c.got[i], c.want[i])
		}
	}
	q := r.q
	if q.ProducerIndex() != r.pi || q.ConsumerIndex() != r.ci {
		t.Fatalf("indexes pi %d ci %d, reference pi %d ci %d", q.ProducerIndex(), q.ConsumerIndex(), r.pi, r.ci)
	}
	if q.Outstanding() != r.pi-r.ci || q.Free() != r.cfg.WQECnt-(r.pi-r.ci) {
		t.Fatalf("outstanding %d free %d, reference %d and %d", q.Outstanding(), q.Free(), r.pi-r.ci, r.cfg.WQECnt-(r.pi-r.ci))
	}
	if q.Pending() != (r.rung != r.pi) {
		t.Fatalf("pending %v with pi %d rung %d", q.Pending(), r.pi, r.rung)
	}
	if r.pi-r.ci > r.cfg.WQECnt {
		t.Fatalf("%d WQEBBs in flight in a ring of %d", r.pi-r.ci, r.cfg.WQECnt)
	}
}

// fzImage is the reference encoding of one WQE: its bytes from the control
// segment on and which of them the builder writes.
type fzImage struct {
	b       []byte
	written []bool
}

func (m *fzImage) put(off int, p []byte) {
	for len(m.b) < off+len(p) {
		m.b = append(m.b, 0)
		m.written = append(m.written, false)
	}
	copy(m.b[off:], p)
	for i := range p {
		m.written[off+i] = true
	}
}

func fzBE32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func fzBE64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// Opcodes and opmods from the PRM (MLX5_OPCODE_*).
const (
	fzNop        = 0x00
	fzSendInv    = 0x01
	fzWrite      = 0x08
	fzWriteImm   = 0x09
	fzSend       = 0x0a
	fzSendImm    = 0x0b
	fzRead       = 0x10
	fzCS         = 0x11
	fzFA         = 0x12
	fzMaskedCS   = 0x14
	fzMaskedFA   = 0x15
	fzOpmodMask4 = 0x08
	fzOpmodMask8 = 0x09
)

// fzError is the outcome the reference predicts for a WQE.
type fzError int

const (
	fzOK fzError = iota
	fzFull
	fzInline
	fzSGE
	fzTooLarge
	fzSGELength
)

func (e fzError) sentinel() error {
	return [...]error{nil, wqebuilder.ErrQueueFull, wqebuilder.ErrInlineTooLong, wqebuilder.ErrTooManySGE, wqebuilder.ErrWQETooLarge, wqebuilder.ErrSGETooLong}[e]
}

// fzWQEState follows one WQE through the reference as the calls are made.
type fzWQEState struct {
	img        fzImage
	ds         uint32 // segments so far
	limit      uint32 // data segments stop at this ds
	limitErr   fzError
	err        fzError
	opcode     uint8
	inlineHdr  int // byte offset of the open inline header
	inlineSize uint32
}

func (w *fzWQEState) seg(p []byte) {
	if w.err == fzOK {
		w.img.put(int(w.ds)*16, p)
	}
	w.ds += uint32(len(p) / 16)
}

// dataSeg is struct mlx5_wqe_data_seg: byte_count, lkey, addr.
func fzDataSeg(addr uint64, length, lkey uint32) []byte {
	return append(append(fzBE32(length), fzBE32(lkey)...), fzBE64(addr)...)
}

// raddrSeg is struct mlx5_wqe_raddr_seg: raddr, rkey, reserved.
func fzRaddrSeg(raddr uint64, rkey uint32) []byte {
	return append(append(fzBE64(raddr), fzBE32(rkey)...), 0, 0, 0, 0)
}

func (r *fzRig) openData(w *fzWQEState, op uint8) {
	w.opcode = op
	lim := w.ds + r.cfg.MaxSGE
	w.limit, w.limitErr = lim, fzSGE
	if lim > r.maxDS {
		w.limit, w.limitErr = r.maxDS, fzTooLarge
	}
}

func (r *fzRig) sge(w *fzWQEState, addr uint64, length, lkey uint32) {
	// A byte count with bit 31 set would be an inline segment to the
	// device: refused, and reported even after a data-segment limit; a
	// full queue is still reported first.
	if length >= 1<<31 && (w.err == fzOK || w.err == fzSGE || w.err == fzTooLarge) {
		w.err = fzSGELength
	}
	if length == 0 || w.err != fzOK {
		return
	}
	if w.ds >= w.limit {
		w.err = w.limitErr
		return
	}
	w.seg(fzDataSeg(addr, length, lkey))
}

func fzInlineDS(n uint32) uint32 {
	if n == 0 {
		return 0
	}
	return (4 + n + 15) / 16
}

func (r *fzRig) inline(w *fzWQEState, p []byte) {
	if len(p) == 0 || w.err != fzOK {
		return
	}
	n := uint32(len(p))
	if w.inlineSize+n > r.cfg.MaxInline {
		w.err = fzInline
		return
	}
	ds := w.ds - fzInlineDS(w.inlineSize) + fzInlineDS(w.inlineSize+n)
	if ds > r.maxDS {
		w.err = fzTooLarge
		return
	}
	w.img.put(w.inlineHdr, fzBE32(0x80000000|(w.inlineSize+n)))
	w.img.put(w.inlineHdr+4+int(w.inlineSize), p)
	w.inlineSize += n
	w.ds = ds
}

// post builds one WQE through the stages, mirrors it in the reference and
// finishes it in one of three ways.
func (r *fzRig) post(in *fzInput) {
	t := r.t
	t.Helper()
	r.wrid++
	wrid := r.wrid
	flags := in.byte()
	tr := in.byte() % 4 // RC, UD, DC, DC with a stream id
	opSel := in.byte()
	w := &fzWQEState{ds: 1}
	if r.pi-r.ci > r.cfg.WQECnt-r.cfg.MaxWQEBBs {
		w.err = fzFull
	}
	// Control segment bytes 8..15: signature, DCI stream id, fm_ce_se,
	// immediate (the first 8 bytes come with Finish).
	ctrlHi := []byte{0, 0, 0, flags & 0xea, 0, 0, 0, 0}

	st := r.q.Begin(wrid, wqebuilder.Flags(flags))
	var op wqebuilder.OpStage
	var av [48]byte
	for i := range av {
		av[i] = byte(r.rnd.next())
	}
	dqp := uint32(r.rnd.next()) & 0xffffff
	switch tr {
	case 0:
		op = st.OpStage
	case 1:
		qkey := uint32(r.rnd.next())
		dg := st.UD(&av, dqp, qkey)
		w.seg(append(append(append(fzBE32(qkey), 0, 0, 0, 0), fzBE32(0x80000000|dqp)...), av[12:]...))
		var data wqebuilder.DataStage
		if opSel%2 == 0 {
			data = dg.Send()
			r.openData(w, fzSend)
		} else {
			imm := uint32(r.rnd.next())
			data = dg.SendImm(imm)
			copy(ctrlHi[4:], fzBE32(imm))
			r.openData(w, fzSendImm)
		}
		r.finishData(in, w, ctrlHi, data, wrid)
		return
	default:
		key := r.rnd.next()
		if tr == 2 {
			op = st.DC(&av, dqp, key)
		} else {
			stream := uint16(r.rnd.next())
			op = st.DCStream(&av, dqp, key, stream)
			ctrlHi[1], ctrlHi[2] = byte(stream>>8), byte(stream)
		}
		w.seg(append(append(fzBE64(key), fzBE32(0x80000000|dqp)...), av[12:]...))
	}

	raddr, rkey := r.rnd.next(), uint32(r.rnd.next())
	imm := uint32(r.rnd.next())
	a, b, c, d := r.rnd.next(), r.rnd.next(), r.rnd.next(), r.rnd.next()
	switch opSel % 13 {
	case 0:
		w.opcode = fzNop
		r.finish(in, w, ctrlHi, op.Nop().Finish, op.Nop().FinishBlueFlame, wrid)
	case 1:
		r.openData(w, fzSend)
		r.finishData(in, w, ctrlHi, op.Send(), wrid)
	case 2:
		copy(ctrlHi[4:], fzBE32(imm))
		r.openData(w, fzSendImm)
		r.finishData(in, w, ctrlHi, op.SendImm(imm), wrid)
	case 3:
		copy(ctrlHi[4:], fzBE32(imm))
		r.openData(w, fzSendInv)
		r.finishData(in, w, ctrlHi, op.SendInv(imm), wrid)
	case 4:
		w.seg(fzRaddrSeg(raddr, rkey))
		r.openData(w, fzWrite)
		r.finishData(in, w, ctrlHi, op.RdmaWrite(raddr, rkey), wrid)
	case 5:
		copy(ctrlHi[4:], fzBE32(imm))
		w.seg(fzRaddrSeg(raddr, rkey))
		r.openData(w, fzWriteImm)
		r.finishData(in, w, ctrlHi, op.RdmaWriteImm(raddr, rkey, imm), wrid)
	case 6:
		w.seg(fzRaddrSeg(raddr, rkey))
		r.openData(w, fzRead)
		sc := op.RdmaRead(raddr, rkey)
		for n := in.byte() % 6; n > 0; n-- {
			addr, length, lkey := r.sgeArgs(in)
			sc = sc.SGE(addr, length, lkey)
			r.sge(w, addr, length, lkey)
		}
		r.finish(in, w, ctrlHi, sc.Finish, sc.FinishBlueFlame, wrid)
	default:
		var as wqebuilder.AtomicStage
		var opmod uint8
		size := uint32(8)
		w.seg(fzRaddrSeg(raddr, rkey))
		switch opSel % 13 {
		case 7:
			w.opcode = fzCS
			as = op.AtomicCS(raddr, rkey, a, b)
			w.seg(append(fzBE64(b), fzBE64(a)...)) // swap_add, then compare
		case 8:
			w.opcode = fzFA
			as = op.AtomicFA(raddr, rkey, a)
			w.seg(append(fzBE64(a), fzBE64(0)...))
		case 9:
			w.opcode, opmod, size = fzMaskedCS, fzOpmodMask4, 4
			as = op.MaskedCS32(raddr, rkey, uint32(a), uint32(b), uint32(c), uint32(d))
			// swap, compare, swap mask, compare mask (4 bytes each)
			w.seg(append(append(append(fzBE32(uint32(b)), fzBE32(uint32(a))...), fzBE32(uint32(d))...), fzBE32(uint32(c))...))
		case 10:
			w.opcode, opmod, size = fzMaskedFA, fzOpmodMask4, 4
			as = op.MaskedFA32(raddr, rkey, uint32(a), uint32(b))
			// add, field boundary, then 8 unused bytes written as zero
			w.seg(append(append(fzBE32(uint32(a)), fzBE32(uint32(b))...), fzBE64(0)...))
		case 11:
			w.opcode, opmod = fzMaskedCS, fzOpmodMask8
			as = op.MaskedCS64(raddr, rkey, a, b, c, d)
			w.seg(append(fzBE64(b), fzBE64(a)...)) // swap, compare
			w.seg(append(fzBE64(d), fzBE64(c)...)) // swap mask, compare mask
		default:
			w.opcode, opmod = fzMaskedFA, fzOpmodMask8
			as = op.MaskedFA64(raddr, rkey, a, b)
			w.seg(append(fzBE64(a), fzBE64(b)...)) // add, field boundary
		}
		resAddr, resKey := r.rnd.next(), uint32(r.rnd.next())
		fs := as.Result(resAddr, resKey)
		w.seg(fzDataSeg(resAddr, size, resKey))
		r.finishOpmod(in, w, ctrlHi, opmod, fs.Finish, fs.FinishBlueFlame, wrid)
	}
}

// sgeArgs picks an SGE: zero lengths (skipped) now and then, and rarely
// one of 2^31 bytes or more (refused).
func (r *fzRig) sgeArgs(in *fzInput) (uint64, uint32, uint32) {
	l := in.byte()
	length := uint32(0)
	if l%5 != 0 {
		length = uint32(l)<<8 | uint32(r.rnd.next()&0xff)
	}
	if l == 0xff {
		length = 1<<31 | uint32(r.rnd.next())
	}
	return r.rnd.next(), length, uint32(r.rnd.next())
}

// finishData adds SGEs and inline pieces to a data stage, then finishes.
func (r *fzRig) finishData(in *fzInput, w *fzWQEState, ctrlHi []byte, ds wqebuilder.DataStage, wrid uint64) {
	for n := in.byte() % 5; n > 0; n-- {
		addr, length, lkey := r.sgeArgs(in)
		ds = ds.SGE(addr, length, lkey)
		r.sge(w, addr, length, lkey)
	}
	pieces := in.byte() % 4
	if pieces == 0 {
		r.finish(in, w, ctrlHi, ds.Finish, ds.FinishBlueFlame, wrid)
		return
	}
	// Inline: the segment opens where the next segment would go.
	w.inlineHdr = int(w.ds) * 16
	var is wqebuilder.InlineStage
	for i := byte(0); i < pieces; i++ {
		p := make([]byte, int(in.byte())%(int(r.cfg.MaxInline)/2+24))
		for j := range p {
			p[j] = byte(r.rnd.next())
		}
		if i == 0 {
			is = ds.Inline(p)
		} else {
			is = is.Inline(p)
		}
		r.inline(w, p)
	}
	r.finish(in, w, ctrlHi, is.Finish, is.FinishBlueFlame, wrid)
}

func (r *fzRig) finish(in *fzInput, w *fzWQEState, ctrlHi []byte, fin, finBF func() error, wrid uint64) {
	r.finishOpmod(in, w, ctrlHi, 0, fin, finBF, wrid)
}

// finishOpmod finishes the WQE in the way the input picks and checks the
// outcome against the reference.
func (r *fzRig) finishOpmod(in *fzInput, w *fzWQEState, ctrlHi []byte, opmod uint8, fin, finBF func() error, wrid uint64) {
	t := r.t
	t.Helper()
	how := in.byte() % 3 // Finish, FinishBlueFlame, Finish twice
	alone := r.rung == r.pi
	var err error
	if how == 1 {
		err = finBF()
	} else {
		err = fin()
	}
	if w.err != fzOK {
		want := w.err.sentinel()
		var pe *wqebuilder.PostError
		if !errors.Is(err, want) || !errors.As(err, &pe) || uint8(pe.Opcode) != w.opcode {
			t.Fatalf("WQE %d: Finish returned %v, want a PostError for opcode %#x wrapping %v", wrid, err, w.opcode, want)
		}
		if w.err != fzFull {
			// Only the WQEBBs the WQE was given may have changed.
			window := uint32(r.cfg.MaxWQEBBs) * 64
			for i := uint32(0); i < window; i++ {
				o := r.ringOff(r.pi*64 + i)
				r.refRing[o] = r.ringPages[o]
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("WQE %d: Finish: %v, the reference expects success", wrid, err)
	}
	if w.ds > 63 || (w.ds+3)/4 > r.cfg.MaxWQEBBs {
		t.Fatalf("reference error: ds %d accepted with max WQEBBs %d", w.ds, r.cfg.MaxWQEBBs)
	}
	// Control segment: opmod | wqe index | opcode, qpn | ds, then bytes 8..15.
	ctrl := append(fzBE32(uint32(opmod)<<24|(r.pi&0xffff)<<8|uint32(w.opcode)), fzBE32(r.cfg.QPN<<8|w.ds)...)
	w.img.put(0, append(ctrl, ctrlHi...))
	start := r.pi * 64
	for i, ok := range w.img.written {
		if ok {
			r.refRing[r.ringOff(start+uint32(i))] = w.img.b[i]
		}
	}
	copy(r.lastDB[:], ctrl)
	bbs := (w.ds + 3) / 4
	r.inflight = append(r.inflight, fzWQE{start: r.pi, bbs: bbs, wrid: wrid})
	r.pi += bbs
	switch how {
	case 1:
		chunks := uint32(0)
		if alone && w.ds > 1 {
			chunks = (w.ds*16 + 63) / 64
		}
		dst := len(r.bfPages) - len(r.reg) + int(r.bfOff)
		if chunks == 0 || chunks*64 > r.cfg.BlueFlameSize {
			copy(r.refBF[dst:], ctrl)
		} else {
			for i := uint32(0); i < chunks*64; i++ {
				r.refBF[dst+int(i)] = r.refRing[r.ringOff(start+i)]
			}
		}
		r.publish()
	case 2:
		r.check()
		if err := fin(); !errors.Is(err, wqebuilder.ErrStaleStage) {
			t.Fatalf("WQE %d (%d WQEBBs in a ring of %d) finished a second time: %v, want ErrStaleStage", wrid, bbs, r.cfg.WQECnt, err)
		}
	}
}

// publish records a doorbell: the record holds the producer index and the
// register buffers toggle.
func (r *fzRig) publish() {
	copy(r.refDB[len(r.refDB)-4:], fzBE32(r.pi&0xffff))
	r.bfOff ^= r.cfg.BlueFlameSize
	r.rung = r.pi
}

func (r *fzRig) ringDoorbell() {
	r.q.RingDoorbell()
	if r.rung == r.pi {
		return
	}
	copy(r.refBF[len(r.bfPages)-len(r.reg)+int(r.bfOff):], r.lastDB[:])
	r.publish()
}

// complete calls Complete with the counter of a WQE in flight, or with an
// arbitrary counter.
func (r *fzRig) complete(in *fzInput) {
	t := r.t
	t.Helper()
	sel := in.byte()
	var counter uint16
	if len(r.inflight) > 0 && sel%4 != 0 {
		counter = uint16(r.inflight[int(sel)%len(r.inflight)].start)
	} else {
		counter = in.u16()
		if sel%8 == 4 && r.pi != r.ci {
			// A WQEBB in flight, often not the first of its WQE.
			counter = uint16(r.ci + uint32(counter)%(r.pi-r.ci))
		}
	}
	wrid, ok := r.q.Complete(counter)
	for i, w := range r.inflight {
		if uint16(w.start) == counter {
			if !ok || wrid != w.wrid {
				t.Fatalf("Complete(%d) = %d, %v; want wrid %d", counter, wrid, ok, w.wrid)
			}
			r.ci = w.start + w.bbs
			r.inflight = r.inflight[i+1:]
			return
		}
	}
	if ok {
		t.Fatalf("Complete(%d) = %d, true; no WQE in flight starts there (pi %d, ci %d)", counter, wrid, r.pi, r.ci)
	}
}
