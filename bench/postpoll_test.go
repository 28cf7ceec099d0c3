package bench

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// goQueue is the Go data path over one queueMemory: the send queue of
// package wqebuilder, the completer, and the poller of package monocq.
type goQueue struct {
	sq    *wqebuilder.SendQueue
	comp  completer
	cq    *monocq.CQ
	laddr uint64
	next  uint64 // wr_id of the next post
}

func newGoQueue(tb testing.TB, m *queueMemory) *goQueue {
	sq, err := wqebuilder.New(wqebuilder.Config{
		Buf: m.sq, WQECnt: m.wqeCnt, QPN: m.qpn, DBRec: m.qpDBRec,
		BlueFlame: m.bf, BlueFlameSize: m.bfSize, MaxInline: 64, MaxSGE: 1,
	})
	require.NoError(tb, err)
	return &goQueue{sq: sq, comp: newCompleter(m), cq: newBenchCQ(tb, m), laddr: uint64(uintptr(m.payload))}
}

// postPoll runs n iterations: post RDMA_WRITE_IMM with one SGE through the
// builder and BlueFlame, let the completer write the CQE, poll it, retire
// the WQE. It reports false at the first thing that went wrong.
func postPoll(g *goQueue, n int) bool {
	sq, cq, next := g.sq, g.cq, g.next
	for i := 0; i < n; i++ {
		err := sq.Begin(next, wqebuilder.Signaled).
			RdmaWriteImm(benchRAddr, benchRKey, benchImm).
			SGE(g.laddr, benchLen, benchLKey).
			FinishBlueFlame()
		if err != nil {
			return false
		}
		g.comp.complete()
		ok := false
		cq.Poll(1, func(c *monocq.CQE) {
			id, found := sq.Complete(c.WQECounter())
			ok = found && id == next && c.Opcode() == prm.CQEReq
		})
		if !ok {
			return false
		}
		next++
	}
	g.next = next
	return true
}

func TestPostPollLoop(t *testing.T) {
	m := newTestMemory(t)
	g := newGoQueue(t, m)
	const n = 1000
	require.True(t, postPoll(g, n))
	requireAfter(t, m, n)
	for pi := uint32(n - benchWQECnt); pi < n; pi++ {
		requireBenchWQE(t, m, pi)
		requireBenchCQE(t, m, pi)
	}
	require.Equal(t, uint32(n), g.sq.ProducerIndex())
	require.Equal(t, uint32(n), g.sq.ConsumerIndex())
	require.Equal(t, uint32(n), g.cq.ConsumerIndex())
	require.Zero(t, testing.AllocsPerRun(100, func() { postPoll(g, 10) }))
	require.NoError(t, g.cq.Err())
}

// The Go loop and the C floor leave byte-identical rings behind.
func TestPostPollMatchesCFloor(t *testing.T) {
	mg := newTestMemory(t)
	mc := newTestMemory(t)
	f := newTestFloor(t, mc)
	// The payload addresses differ between the two mappings; give the C
	// floor the Go side's so the data segments compare equal.
	f.setLocalAddress(uint64(uintptr(mg.payload)))
	g := newGoQueue(t, mg)
	const n = 700
	require.True(t, postPoll(g, n))
	_, err := f.run(n)
	require.NoError(t, err)
	for _, r := range []struct {
		name string
		a, b []byte
	}{
		{"send ring", mg.bytes(mg.sq, benchWQECnt*prm.WQEBBSize), mc.bytes(mc.sq, benchWQECnt*prm.WQEBBSize)},
		{"completion ring", mg.bytes(mg.cq, benchCQECnt*prm.CQE64Size), mc.bytes(mc.cq, benchCQECnt*prm.CQE64Size)},
		{"doorbell records", mg.bytes(mg.qpDBRec, 128), mc.bytes(mc.qpDBRec, 128)},
		{"BlueFlame register", mg.bytes(mg.bf, 2*benchBlueFlame), mc.bytes(mc.bf, 2*benchBlueFlame)},
	} {
		require.Equal(t, r.b, r.a, r.name)
	}
}

// BenchmarkPostPoll is the Go data path: post RDMA_WRITE_IMM with one SGE
// through the wqebuilder stages and FinishBlueFlame, the completer writes
// the CQE, monocq polls it with an inlined callback, the send queue retires
// the WQE. The C floor and cgo per operation run block for block beside it:
// xC-floor is Go's fastest block over C's (target at most 1.2),
// x-faster-than-cgo cgo's over Go's (target at least 3).
func BenchmarkPostPoll(b *testing.B) {
	g := newGoQueue(b, newTestMemory(b))
	runWithBaselines(b, func(n int) bool { return postPoll(g, n) }, cBaselines(b)...)
}

// bytes returns n bytes of the mapping from p.
func (m *queueMemory) bytes(p unsafe.Pointer, n int) []byte { return unsafe.Slice((*byte)(p), n) }
