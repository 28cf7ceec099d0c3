package wqebuilder_test

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

const (
	pageSize = 4096
	bfSize   = 256
	testQPN  = 0xabcdef
)

// fixture is a send queue over mmap'd memory: the ring sits between two
// PROT_NONE guard pages (a write outside it kills the test), and the
// doorbell record and BlueFlame page are separate mappings.
type fixture struct {
	t     testing.TB
	ring  []byte
	pre   []byte // the bytes of the ring's first page before the ring (canary)
	dbrec []byte
	bf    []byte
	q     *wqebuilder.SendQueue
	cfg   wqebuilder.Config
}

type fixtureOpts struct {
	wqeCnt    uint32
	maxSGE    uint32
	maxInline uint32
	maxWQEBBs uint32
	bfSize    uint32
}

func defaultOpts() fixtureOpts {
	return fixtureOpts{wqeCnt: 64, maxSGE: 4, maxInline: 220, bfSize: bfSize}
}

func mmap(t testing.TB, n int, prot int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, prot, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, unix.Munmap(b)) })
	return b
}

func newFixture(t testing.TB, o fixtureOpts) *fixture {
	t.Helper()
	ringBytes := int(o.wqeCnt) * prm.WQEBBSize
	pages := (ringBytes + pageSize - 1) / pageSize
	all := mmap(t, (pages+2)*pageSize, unix.PROT_NONE)
	rw := all[pageSize : (pages+1)*pageSize]
	require.NoError(t, unix.Mprotect(rw, unix.PROT_READ|unix.PROT_WRITE))
	// The ring ends where the trailing guard page begins.
	start := len(rw) - ringBytes
	f := &fixture{
		t:     t,
		ring:  rw[start:],
		pre:   rw[:start],
		dbrec: mmap(t, pageSize, unix.PROT_READ|unix.PROT_WRITE)[:8],
		bf:    mmap(t, pageSize, unix.PROT_READ|unix.PROT_WRITE),
	}
	r := rand.New(rand.NewPCG(uint64(o.wqeCnt), 99))
	for i := range rw {
		rw[i] = byte(r.Uint32())
	}
	f.cfg = wqebuilder.Config{
		Buf:           unsafe.Pointer(&f.ring[0]),
		WQECnt:        o.wqeCnt,
		QPN:           testQPN,
		DBRec:         unsafe.Pointer(&f.dbrec[0]),
		BlueFlame:     unsafe.Pointer(&f.bf[0]),
		BlueFlameSize: o.bfSize,
		MaxInline:     o.maxInline,
		MaxSGE:        o.maxSGE,
		MaxWQEBBs:     o.maxWQEBBs,
	}
	q, err := wqebuilder.New(f.cfg)
	require.NoError(t, err)
	f.q = q
	f.cfg = q.Config()
	return f
}

func (f *fixture) snapshot() []byte { return append([]byte(nil), f.ring...) }

func (f *fixture) dbrecSend() uint32 { return binary.BigEndian.Uint32(f.dbrec[4:]) }

// The reference encoder: an independent description of a work request and
// the bytes rdma-core would put in the ring for it, written with
// encoding/binary and nothing from the package under test.

type transport int

const (
	rc transport = iota
	dc
	ud
)

type sge struct {
	addr   uint64
	length uint32
	lkey   uint32
}

type request struct {
	tr      transport
	av      [prm.AVSize]byte
	dqp     uint32 // DCT number or remote QPN
	dcKey   uint64
	qkey    uint32
	stream  uint16
	useStrm bool
	op      string
	wrid    uint64
	flags   wqebuilder.Flags
	imm     uint32
	raddr   uint64
	rkey    uint32
	a, b    uint64 // compare/swap, add/boundary (masked 32-bit: low halves)
	c, d    uint64 // compare mask, swap mask
	sges    []sge
	inline  [][]byte
	resAddr uint64
	resLKey uint32
}

var opcodes = map[string]struct {
	op    prm.Opcode
	opmod uint8
}{
	"NOP":            {prm.OpNop, 0},
	"SEND":           {prm.OpSend, 0},
	"SEND_IMM":       {prm.OpSendImm, 0},
	"SEND_INV":       {prm.OpSendInval, 0},
	"RDMA_WRITE":     {prm.OpRdmaWrite, 0},
	"RDMA_WRITE_IMM": {prm.OpRdmaWriteImm, 0},
	"RDMA_READ":      {prm.OpRdmaRead, 0},
	"ATOMIC_CS":      {prm.OpAtomicCS, 0},
	"ATOMIC_FA":      {prm.OpAtomicFA, 0},
	"MASKED_CS32":    {prm.OpAtomicMaskedCS, 0x08},
	"MASKED_FA32":    {prm.OpAtomicMaskedFA, 0x08},
	"MASKED_CS64":    {prm.OpAtomicMaskedCS, 0x09},
	"MASKED_FA64":    {prm.OpAtomicMaskedFA, 0x09},
}

// write is a run of bytes at an offset from the WQE start.
type write struct {
	off int
	b   []byte
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// encode returns the writes of the WQE at WQE index idx and its ds.
func (r request) encode(idx uint16) (writes []write, ds int) {
	oc := opcodes[r.op]
	off := 16
	seg := func(b []byte) {
		writes = append(writes, write{off, b})
		off += len(b)
	}
	imm := uint32(0)
	switch r.op {
	case "SEND_IMM", "RDMA_WRITE_IMM":
		imm = r.imm
	case "SEND_INV":
		imm = r.rkey
	}
	var stream uint16
	if r.useStrm {
		stream = r.stream
	}
	switch r.tr {
	case dc:
		seg(cat(be64(r.dcKey), be32(r.dqp|0x80000000), r.av[12:]))
	case ud:
		seg(cat(be32(r.qkey), make([]byte, 4), be32(r.dqp|0x80000000), r.av[12:]))
	}
	raddr := func() { seg(cat(be64(r.raddr), be32(r.rkey), make([]byte, 4))) }
	result := func(n uint32) { seg(cat(be32(n), be32(r.resLKey), be64(r.resAddr))) }
	payload := func() {
		for _, s := range r.sges {
			if s.length != 0 {
				seg(cat(be32(s.length), be32(s.lkey), be64(s.addr)))
			}
		}
		total := 0
		for _, b := range r.inline {
			total += len(b)
		}
		if total > 0 {
			seg(cat(be32(uint32(total)|0x80000000), cat(r.inline...)))
			off = (off + 15) &^ 15
		}
	}
	switch r.op {
	case "NOP":
	case "SEND", "SEND_IMM", "SEND_INV":
		payload()
	case "RDMA_WRITE", "RDMA_WRITE_IMM", "RDMA_READ":
		raddr()
		payload()
	case "ATOMIC_CS":
		raddr()
		seg(cat(be64(r.b), be64(r.a))) // swap, compare
		result(8)
	case "ATOMIC_FA":
		raddr()
		seg(cat(be64(r.a), make([]byte, 8)))
		result(8)
	case "MASKED_CS32":
		raddr()
		seg(cat(be32(uint32(r.b)), be32(uint32(r.a)), be32(uint32(r.d)), be32(uint32(r.c))))
		result(4)
	case "MASKED_FA32":
		raddr()
		seg(cat(be32(uint32(r.a)), be32(uint32(r.b)), make([]byte, 8)))
		result(4)
	case "MASKED_CS64":
		raddr()
		seg(cat(be64(r.b), be64(r.a), be64(r.d), be64(r.c)))
		result(8)
	case "MASKED_FA64":
		raddr()
		seg(cat(be64(r.a), be64(r.b)))
		result(8)
	default:
		panic(r.op)
	}
	ds = off / 16
	ctrl := cat(be32(uint32(oc.opmod)<<24|uint32(idx)<<8|uint32(oc.op)),
		be32(testQPN<<8|uint32(ds)), []byte{0}, be16(stream), []byte{byte(r.flags)}, be32(imm))
	writes = append([]write{{0, ctrl}}, writes...)
	return writes, ds
}

// apply writes the WQE's bytes into a model ring at slot, wrapping.
func apply(ring []byte, slot int, writes []write) {
	base := slot * prm.WQEBBSize
	for _, w := range writes {
		for i, c := range w.b {
			ring[(base+w.off+i)%len(ring)] = c
		}
	}
}

// build posts the request through the stages and returns Finish's error
// (FinishBlueFlame when bf is set).
func (r request) build(q *wqebuilder.SendQueue, bf bool) error {
	c := q.Begin(r.wrid, r.flags)
	var o wqebuilder.OpStage
	switch r.tr {
	case rc:
		o = c.OpStage
	case dc:
		if r.useStrm {
			o = c.DCStream(&r.av, r.dqp, r.dcKey, r.stream)
		} else {
			o = c.DC(&r.av, r.dqp, r.dcKey)
		}
	case ud:
		g := c.UD(&r.av, r.dqp, r.qkey)
		switch r.op {
		case "SEND":
			return finish(r.payload(g.Send()), bf)
		case "SEND_IMM":
			return finish(r.payload(g.SendImm(r.imm)), bf)
		}
		panic("UD " + r.op)
	}
	var d wqebuilder.DataStage
	var a wqebuilder.AtomicStage
	switch r.op {
	case "NOP":
		return finish(o.Nop(), bf)
	case "SEND":
		d = o.Send()
	case "SEND_IMM":
		d = o.SendImm(r.imm)
	case "SEND_INV":
		d = o.SendInv(r.rkey)
	case "RDMA_WRITE":
		d = o.RdmaWrite(r.raddr, r.rkey)
	case "RDMA_WRITE_IMM":
		d = o.RdmaWriteImm(r.raddr, r.rkey, r.imm)
	case "RDMA_READ":
		s := o.RdmaRead(r.raddr, r.rkey)
		for _, g := range r.sges {
			s = s.SGE(g.addr, g.length, g.lkey)
		}
		return finish(s, bf)
	case "ATOMIC_CS":
		a = o.AtomicCS(r.raddr, r.rkey, r.a, r.b)
	case "ATOMIC_FA":
		a = o.AtomicFA(r.raddr, r.rkey, r.a)
	case "MASKED_CS32":
		a = o.MaskedCS32(r.raddr, r.rkey, uint32(r.a), uint32(r.b), uint32(r.c), uint32(r.d))
	case "MASKED_FA32":
		a = o.MaskedFA32(r.raddr, r.rkey, uint32(r.a), uint32(r.b))
	case "MASKED_CS64":
		a = o.MaskedCS64(r.raddr, r.rkey, r.a, r.b, r.c, r.d)
	case "MASKED_FA64":
		a = o.MaskedFA64(r.raddr, r.rkey, r.a, r.b)
	default:
		panic(r.op)
	}
	if r.op[0] == 'A' || r.op[0] == 'M' {
		return finish(a.Result(r.resAddr, r.resLKey), bf)
	}
	return finish(r.payload(d), bf)
}

type finisher interface {
	Finish() error
	FinishBlueFlame() error
}

func finish(f finisher, bf bool) error {
	if bf {
		return f.FinishBlueFlame()
	}
	return f.Finish()
}

func (r request) payload(d wqebuilder.DataStage) finisher {
	for _, g := range r.sges {
		d = d.SGE(g.addr, g.length, g.lkey)
	}
	if len(r.inline) == 0 {
		return d
	}
	in := d.Inline(r.inline[0])
	for _, b := range r.inline[1:] {
		in = in.Inline(b)
	}
	return in
}

var allOps = []string{"NOP", "SEND", "SEND_IMM", "SEND_INV", "RDMA_WRITE", "RDMA_WRITE_IMM", "RDMA_READ",
	"ATOMIC_CS", "ATOMIC_FA", "MASKED_CS32", "MASKED_FA32", "MASKED_CS64", "MASKED_FA64"}

func hasPayload(op string) bool {
	switch op {
	case "SEND", "SEND_IMM", "SEND_INV", "RDMA_WRITE", "RDMA_WRITE_IMM", "RDMA_READ":
		return true
	}
	return false
}

// randomRequest returns a request of op on tr with random fields and a
// payload that fits maxSGE and maxInline (and, with maxDS, the WQE size).
func randomRequest(r *rand.Rand, tr transport, op string, maxSGE, maxInline int, maxDS int) request {
	q := request{tr: tr, op: op, wrid: r.Uint64(), raddr: r.Uint64(), rkey: r.Uint32(), imm: r.Uint32(),
		a: r.Uint64(), b: r.Uint64(), c: r.Uint64(), d: r.Uint64(), resAddr: r.Uint64(), resLKey: r.Uint32(),
		dqp: r.Uint32() & 0xffffff, dcKey: r.Uint64(), qkey: r.Uint32(), stream: uint16(r.Uint32()), useStrm: tr == dc && r.IntN(3) == 0}
	q.flags = wqebuilder.Flags([]uint8{0, prm.FlagCQUpdate, prm.FlagSolicited, prm.FlagFence,
		prm.FlagCQUpdate | prm.FlagSolicited | prm.FlagInitiatorSmallFence}[r.IntN(5)])
	for i := range q.av {
		q.av[i] = byte(r.Uint32())
	}
	if !hasPayload(op) {
		return q
	}
	overhead := 1
	if tr != rc {
		overhead += 3
	}
	if op[0] == 'R' {
		overhead++
	}
	room := maxDS - overhead
	nsge := r.IntN(min(maxSGE, room) + 1)
	for range nsge {
		g := sge{addr: r.Uint64(), length: 1 + r.Uint32N(1<<31-1), lkey: r.Uint32()}
		if r.IntN(6) == 0 {
			g.length = 0 // skipped, does not count
		}
		q.sges = append(q.sges, g)
	}
	used := 0
	for _, g := range q.sges {
		if g.length != 0 {
			used++
		}
	}
	if op != "RDMA_READ" && r.IntN(2) == 0 {
		// Inline data in up to three pieces, within both limits.
		maxBytes := min(maxInline, (room-used)*16-4)
		if maxBytes > 0 {
			total := r.IntN(maxBytes + 1)
			for total > 0 {
				n := 1 + r.IntN(total)
				b := make([]byte, n)
				for i := range b {
					b[i] = byte(r.Uint32())
				}
				q.inline = append(q.inline, b)
				total -= n
			}
		}
	}
	return q
}
