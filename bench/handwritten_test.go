package bench

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/blueflame"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// handQueue is a send queue written by hand, statement for statement like
// floor_post_wqe in cfloor.c: no builder, no stage types, no error
// bookkeeping beyond the full check. It separates what the builder costs
// from what Go costs.
type handQueue struct {
	sq, sqEnd unsafe.Pointer
	mask      uint32
	pi        uint32
	tail      uint32
	qpn       uint32
	bf        blueflame.SendDoorbell
	wrid      []uint64
	laddr     uint64
}

func newHandQueue(tb testing.TB, m *queueMemory) *handQueue {
	reg, err := blueflame.NewRegister(m.bf, m.bfSize)
	if err != nil {
		tb.Fatal(err)
	}
	bf, err := blueflame.NewSendDoorbell(reg, m.qpDBRec, m.sq, m.sqEnd)
	if err != nil {
		tb.Fatal(err)
	}
	return &handQueue{sq: m.sq, sqEnd: m.sqEnd, mask: m.wqeCnt - 1, qpn: m.qpn,
		bf: bf, wrid: make([]uint64, m.wqeCnt), laddr: uint64(uintptr(m.payload))}
}

// post writes the benchmark WQE and publishes it with BlueFlame.
func (q *handQueue) post(wrID uint64) bool {
	if q.pi-q.tail > q.mask {
		return false
	}
	idx := q.pi & q.mask
	w := unsafe.Add(q.sq, uintptr(idx)<<prm.WQEBBShift)
	r := unsafe.Add(w, prm.CtrlSize)
	prm.Store64(unsafe.Add(r, prm.RaddrAddr), benchRAddr)
	prm.Store32(unsafe.Add(r, prm.RaddrRkey), benchRKey)
	prm.Store32(unsafe.Add(r, prm.RaddrResvd), 0)
	d := unsafe.Add(r, prm.RaddrSize)
	prm.Store32(unsafe.Add(d, prm.DataByteCount), benchLen)
	prm.Store32(unsafe.Add(d, prm.DataLKey), benchLKey)
	prm.Store64(unsafe.Add(d, prm.DataAddr), q.laddr)
	prm.Store32(w, prm.CtrlOpmodIdxOpcodeWord(0, uint16(q.pi), prm.OpRdmaWriteImm))
	prm.Store32(unsafe.Add(w, prm.CtrlQPNDS), prm.CtrlQPNDSWord(q.qpn, 3))
	*(*uint32)(unsafe.Add(w, prm.CtrlSignature)) = uint32(prm.FlagCQUpdate) << 24
	prm.Store32(unsafe.Add(w, prm.CtrlImm), benchImm)
	q.wrid[idx] = wrID
	q.pi++
	q.bf.Post(q.pi, w, prm.WQEBBSize)
	return true
}

// complete retires the send queue up to the WQE a CQE names and returns
// that WQE's wr_id.
func (q *handQueue) complete(wqeCounter uint16) uint64 {
	q.tail += uint32(uint16(wqeCounter + 1 - uint16(q.tail)))
	return q.wrid[uint32(wqeCounter)&q.mask]
}

func newBenchCQ(tb testing.TB, m *queueMemory) *monocq.CQ {
	cq, err := monocq.New(monocq.Config{Buf: m.cq, CQECnt: m.cqeCnt, CQESize: prm.CQE64Size, DBRec: m.cqDBRec, CQN: 1})
	if err != nil {
		tb.Fatal(err)
	}
	return cq
}

// handLoop runs n iterations of the hand-written post, the completer and a
// monocq Poll(1), as postPoll polls; it returns the sum of the polled
// wr_ids, or false at the first thing that went wrong.
func handLoop(q *handQueue, comp *completer, cq *monocq.CQ, n int) (uint64, bool) {
	var sum uint64
	for i := 0; i < n; i++ {
		if !q.post(uint64(i)) {
			return sum, false
		}
		comp.complete()
		ok := false
		got := cq.Poll(1, func(c *monocq.CQE) {
			id := q.complete(c.WQECounter())
			ok = c.Opcode() == prm.CQEReq && id == uint64(i)
			sum += id
		})
		if got != 1 || !ok {
			return sum, false
		}
	}
	return sum, true
}

func TestHandWrittenLoop(t *testing.T) {
	m := newTestMemory(t)
	q := newHandQueue(t, m)
	comp := newCompleter(m)
	cq := newBenchCQ(t, m)
	const n = 1000
	sum, ok := handLoop(q, &comp, cq, n)
	require.True(t, ok)
	require.Equal(t, uint64(n*(n-1)/2), sum)
	requireAfter(t, m, n)
	require.Zero(t, testing.AllocsPerRun(100, func() { handLoop(q, &comp, cq, 10) }))
}

// BenchmarkPostPollHandWritten is the Go loop without the builder: the WQE
// written with prm stores as the C floor writes it, the BlueFlame copy of
// package blueflame, and monocq's Poll(1), as BenchmarkPostPoll polls.
func BenchmarkPostPollHandWritten(b *testing.B) {
	m := newTestMemory(b)
	q := newHandQueue(b, m)
	comp := newCompleter(m)
	cq := newBenchCQ(b, m)
	var next int
	runWithBaselines(b, func(n int) bool {
		// handLoop numbers its wr_ids from 0; the queue does not care.
		_, ok := handLoop(q, &comp, cq, n)
		next += n
		return ok
	}, cBaselines(b)...)
}
