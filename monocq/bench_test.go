package monocq

import (
	"math/bits"
	"testing"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/blueflame"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// The poll benchmarks share one setup: a 256-slot ring of 64-byte CQEs whose
// fields are written once; before each batch the producer only writes the
// op_own bytes of the next 64 slots (opcode REQ, this lap's owner bit), which
// is all a poller reads to find them. Every variant does the same work per
// CQE: look the QPN up in a Table, count the completion and add byte_cnt.
// One benchmark op is one CQE. BenchmarkPollProducerOnly is the cost of the
// op_own writes alone.

const (
	benchSlots      = 256
	benchBatch      = 64
	benchQueuePairs = 4
)

type benchQueue struct {
	completions uint64
	bytes       uint64
}

type benchRing struct {
	r     *ring
	cq    *CQ
	table *Table[benchQueue]
	base  unsafe.Pointer // the hand-written loops' view of the ring
}

func newBenchRing(b *testing.B) *benchRing {
	r := newRing(b, benchSlots, 64)
	for i := uint32(0); i < benchSlots; i++ {
		f := cqeFields{opcode: prm.CQEReq, sendOp: prm.OpRdmaWriteImm, qpn: 0x100 + i%benchQueuePairs,
			wqeCounter: uint16(i), byteCnt: 64}
		f.encode(r.cqe64(i), 1) // owner 1: not software's on lap 0
	}
	br := &benchRing{r: r, cq: r.newCQ(b), table: new(Table[benchQueue]), base: unsafe.Pointer(&r.buf[0])}
	for i := uint32(0); i < benchQueuePairs; i++ {
		if err := br.table.Register(0x100+i, new(benchQueue)); err != nil {
			b.Fatal(err)
		}
	}
	return br
}

// produce hands the next n slots to software.
func (br *benchRing) produce(n int) {
	r := br.r
	for ; n > 0; n-- {
		off := (r.pi&(benchSlots-1))*64 + 63
		r.buf[off] = uint8(r.pi/benchSlots) & 1 // REQ, owner of this lap
		r.pi++
	}
}

// handle is the per-CQE work every variant does.
func (br *benchRing) handle(c *CQE) {
	if q := br.table.Lookup(c.QPN()); q != nil {
		q.completions++
		q.bytes += uint64(c.ByteCount())
	}
}

func (br *benchRing) check(b *testing.B, n int) {
	var total uint64
	for i := uint32(0); i < benchQueuePairs; i++ {
		total += br.table.Lookup(0x100 + i).completions
	}
	if total < uint64(n) {
		b.Fatalf("handled %d CQEs, want at least %d", total, n)
	}
}

func BenchmarkPollProducerOnly(b *testing.B) {
	br := newBenchRing(b)
	for n := 0; n < b.N; n += benchBatch {
		br.produce(benchBatch)
	}
}

// geometry is what a hand-written loop reads from struct mlx5dv_cq once and
// keeps in registers.
type geometry struct {
	base   unsafe.Pointer
	mask   uint32
	shift  uint32
	logCnt uint32
	dbrec  unsafe.Pointer
}

func (br *benchRing) geometry() geometry {
	return geometry{base: br.base, mask: br.r.cnt - 1, shift: uint32(bits.TrailingZeros32(br.r.size)),
		logCnt: uint32(bits.TrailingZeros32(br.r.cnt)), dbrec: br.cq.dbrec}
}

// BenchmarkPollHandWritten is the loop a C programmer writes after
// rdma-core's get_sw_cqe: owner test, rdma-core's read barrier
// (blueflame.ReadBarrier: lfence on amd64), fields, per CQE; the consumer
// index once per batch. The ring geometry and the consumer index
// live in local variables.
func BenchmarkPollHandWritten(b *testing.B) {
	br := newBenchRing(b)
	g := br.geometry()
	base, mask, shift, logCnt := g.base, g.mask, g.shift&63, g.logCnt&31
	table := br.table
	ci := uint32(0)
	for n := 0; n < b.N; {
		br.produce(benchBatch)
		for {
			c := unsafe.Add(base, uintptr(ci&mask)<<shift)
			op := *(*uint8)(unsafe.Add(c, 63))
			if op>>4 == 15 || (op^uint8(ci>>logCnt))&1 != 0 {
				break
			}
			blueflame.ReadBarrier()
			qpn := prm.Load32(unsafe.Add(c, prm.CQESopDropQPN)) & 0xffffff
			if q := table.Lookup(qpn); q != nil {
				q.completions++
				q.bytes += uint64(prm.Load32(unsafe.Add(c, prm.CQEByteCnt)))
			}
			ci++
			n++
		}
		prm.Store32(g.dbrec, ci&0xffffff)
	}
	br.check(b, b.N)
}

// BenchmarkPollHandWrittenBatch is the same loop with monocq's barrier
// placement and kind: scan the owner words of the batch with atomic loads,
// one blueflame.OwnershipBarrier, then the fields.
func BenchmarkPollHandWrittenBatch(b *testing.B) {
	br := newBenchRing(b)
	g := br.geometry()
	base, mask, shift, logCnt := g.base, g.mask, g.shift&63, g.logCnt&31
	table := br.table
	ci := uint32(0)
	for n := 0; n < b.N; {
		br.produce(benchBatch)
		end := ci
		for ; end-ci < benchBatch; end++ {
			op := prm.LoadOpOwn(unsafe.Add(base, uintptr(end&mask)<<shift))
			if op>>4 == 15 || (op^uint8(end>>logCnt))&1 != 0 {
				break
			}
		}
		blueflame.OwnershipBarrier()
		for ; ci != end; ci++ {
			c := unsafe.Add(base, uintptr(ci&mask)<<shift)
			qpn := prm.Load32(unsafe.Add(c, prm.CQESopDropQPN)) & 0xffffff
			if q := table.Lookup(qpn); q != nil {
				q.completions++
				q.bytes += uint64(prm.Load32(unsafe.Add(c, prm.CQEByteCnt)))
			}
			n++
		}
		prm.Store32(g.dbrec, ci&0xffffff)
	}
	br.check(b, b.N)
}

func BenchmarkPollCursor(b *testing.B) {
	br := newBenchRing(b)
	cq, table := br.cq, br.table
	for n := 0; n < b.N; {
		br.produce(benchBatch)
		cq.Ready(benchBatch)
		for c := cq.Next(); c != nil; c = cq.Next() {
			if q := table.Lookup(c.QPN()); q != nil {
				q.completions++
				q.bytes += uint64(c.ByteCount())
			}
			n++
		}
		cq.Release()
	}
	br.check(b, b.N)
}

func BenchmarkPollFuncLiteral(b *testing.B) {
	br := newBenchRing(b)
	cq, table := br.cq, br.table
	for n := 0; n < b.N; {
		br.produce(benchBatch)
		n += cq.Poll(benchBatch, func(c *CQE) {
			if q := table.Lookup(c.QPN()); q != nil {
				q.completions++
				q.bytes += uint64(c.ByteCount())
			}
		})
	}
	br.check(b, b.N)
}

func BenchmarkPollRange(b *testing.B) {
	br := newBenchRing(b)
	cq, table := br.cq, br.table
	for n := 0; n < b.N; {
		br.produce(benchBatch)
		for c := range cq.All(benchBatch) {
			if q := table.Lookup(c.QPN()); q != nil {
				q.completions++
				q.bytes += uint64(c.ByteCount())
			}
			n++
		}
	}
	br.check(b, b.N)
}

// benchHandler is a func value the compiler cannot see through.
var benchHandler func(*CQE)

// BenchmarkPollFuncValue passes Poll a function value instead of a literal:
// Poll is still inlined, but each CQE is an indirect call.
func BenchmarkPollFuncValue(b *testing.B) {
	br := newBenchRing(b)
	benchHandler = br.handle
	cq := br.cq
	for n := 0; n < b.N; {
		br.produce(benchBatch)
		n += cq.Poll(benchBatch, benchHandler)
	}
	br.check(b, b.N)
}

// Handler is the interface a callback-object design would use.
type handler interface{ OnCompletion(c *CQE) }

type benchObject struct{ br *benchRing }

func (h *benchObject) OnCompletion(c *CQE) { h.br.handle(c) }

//go:noinline
func pollInterface(cq *CQ, max int, h handler) int {
	n := 0
	cq.Ready(max)
	for c := cq.Next(); c != nil; c = cq.Next() {
		h.OnCompletion(c)
		n++
	}
	cq.Release()
	return n
}

// BenchmarkPollInterface dispatches each CQE through an interface method.
func BenchmarkPollInterface(b *testing.B) {
	br := newBenchRing(b)
	h := &benchObject{br: br}
	for n := 0; n < b.N; {
		br.produce(benchBatch)
		n += pollInterface(br.cq, benchBatch, h)
	}
	br.check(b, b.N)
}

// pollGeneric is the CQ[H Handler] design: a method called on a type
// parameter, which Go compiles through the instantiation's dictionary.
//
//go:noinline
func pollGeneric[H handler](cq *CQ, max int, h H) int {
	n := 0
	cq.Ready(max)
	for c := cq.Next(); c != nil; c = cq.Next() {
		h.OnCompletion(c)
		n++
	}
	cq.Release()
	return n
}

// BenchmarkPollGeneric dispatches each CQE through a type parameter.
func BenchmarkPollGeneric(b *testing.B) {
	br := newBenchRing(b)
	h := &benchObject{br: br}
	for n := 0; n < b.N; {
		br.produce(benchBatch)
		n += pollGeneric(br.cq, benchBatch, h)
	}
	br.check(b, b.N)
}

// BenchmarkPollCompressed measures expansion: each batch is one responder
// session of 64 mini-CQEs.
func BenchmarkPollCompressed(b *testing.B) {
	r := newRing(b, benchSlots, 64)
	cq := r.newCQ(b)
	minis := make([]mini, benchBatch)
	for i := range minis {
		minis[i] = respMini(uint32(i), 64)
	}
	title := cqeFields{opcode: prm.CQERespSend, qpn: 0x100}
	var sum uint64
	b.ResetTimer()
	for n := 0; n < b.N; {
		r.putSession(title, minis)
		n += cq.Poll(benchBatch, func(c *CQE) { sum += uint64(c.ByteCount()) })
	}
	if sum < 64*uint64(b.N) {
		b.Fatal("CQEs missing")
	}
}

// The empty-poll benchmarks measure one look at an empty ring, the common
// case of a busy-polling loop. One op is one poll.

func BenchmarkPollEmptyHandWritten(b *testing.B) {
	br := newBenchRing(b)
	g := br.geometry()
	base, mask, shift, logCnt := g.base, g.mask, g.shift&63, g.logCnt&31
	ci, found := uint32(0), 0
	for i := 0; i < b.N; i++ {
		op := *(*uint8)(unsafe.Add(base, uintptr(ci&mask)<<shift+63))
		if op>>4 != 15 && (op^uint8(ci>>logCnt))&1 == 0 {
			found++
		}
	}
	if found != 0 {
		b.Fatal("CQE in an empty ring")
	}
}

func BenchmarkPollEmptyPoll(b *testing.B) {
	br := newBenchRing(b)
	cq, found := br.cq, 0
	for i := 0; i < b.N; i++ {
		found += cq.Poll(benchBatch, func(*CQE) {})
	}
	if found != 0 {
		b.Fatal("CQE in an empty ring")
	}
}

func BenchmarkPollEmptyRange(b *testing.B) {
	br := newBenchRing(b)
	cq, found := br.cq, 0
	for i := 0; i < b.N; i++ {
		for range cq.All(benchBatch) {
			found++
		}
	}
	if found != 0 {
		b.Fatal("CQE in an empty ring")
	}
}

func BenchmarkPollEmptyCursor(b *testing.B) {
	br := newBenchRing(b)
	cq, found := br.cq, 0
	for i := 0; i < b.N; i++ {
		found += cq.Ready(benchBatch)
		cq.Release()
	}
	if found != 0 {
		b.Fatal("CQE in an empty ring")
	}
}

// The Sum benchmarks do the least work per CQE (add byte_cnt to a local),
// so that the cost of handing a CQE over is what they measure.

func BenchmarkPollSumHandWrittenBatch(b *testing.B) {
	br := newBenchRing(b)
	g := br.geometry()
	base, mask, shift, logCnt := g.base, g.mask, g.shift&63, g.logCnt&31
	ci, sum := uint32(0), uint64(0)
	for n := 0; n < b.N; {
		br.produce(benchBatch)
		end := ci
		for ; end-ci < benchBatch; end++ {
			op := prm.LoadOpOwn(unsafe.Add(base, uintptr(end&mask)<<shift))
			if op>>4 == 15 || (op^uint8(end>>logCnt))&1 != 0 {
				break
			}
		}
		blueflame.OwnershipBarrier()
		for ; ci != end; ci++ {
			sum += uint64(prm.Load32(unsafe.Add(base, uintptr(ci&mask)<<shift+prm.CQEByteCnt)))
			n++
		}
		prm.Store32(g.dbrec, ci&0xffffff)
	}
	sumCheck(b, sum)
}

func sumCheck(b *testing.B, sum uint64) {
	if sum < 64*uint64(b.N) {
		b.Fatalf("sum %d: CQEs missing", sum)
	}
}

func BenchmarkPollSumCursor(b *testing.B) {
	br := newBenchRing(b)
	cq, sum := br.cq, uint64(0)
	for n := 0; n < b.N; {
		br.produce(benchBatch)
		cq.Ready(benchBatch)
		for c := cq.Next(); c != nil; c = cq.Next() {
			sum += uint64(c.ByteCount())
			n++
		}
		cq.Release()
	}
	sumCheck(b, sum)
}

func BenchmarkPollSumFuncLiteral(b *testing.B) {
	br := newBenchRing(b)
	cq, sum := br.cq, uint64(0)
	for n := 0; n < b.N; {
		br.produce(benchBatch)
		n += cq.Poll(benchBatch, func(c *CQE) { sum += uint64(c.ByteCount()) })
	}
	sumCheck(b, sum)
}

func BenchmarkPollSumRange(b *testing.B) {
	br := newBenchRing(b)
	cq, sum := br.cq, uint64(0)
	for n := 0; n < b.N; {
		br.produce(benchBatch)
		for c := range cq.All(benchBatch) {
			sum += uint64(c.ByteCount())
			n++
		}
	}
	sumCheck(b, sum)
}

type sumObject struct{ sum uint64 }

func (h *sumObject) OnCompletion(c *CQE) { h.sum += uint64(c.ByteCount()) }

func BenchmarkPollSumInterface(b *testing.B) {
	br := newBenchRing(b)
	h := new(sumObject)
	for n := 0; n < b.N; {
		br.produce(benchBatch)
		n += pollInterface(br.cq, benchBatch, h)
	}
	sumCheck(b, h.sum)
}

func BenchmarkPollSumGeneric(b *testing.B) {
	br := newBenchRing(b)
	h := new(sumObject)
	for n := 0; n < b.N; {
		br.produce(benchBatch)
		n += pollGeneric(br.cq, benchBatch, h)
	}
	sumCheck(b, h.sum)
}
