package bench

import (
	"math/bits"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/blueflame"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// handCQ polls one CQE at a time, statement for statement like
// floor_poll_cqe in cfloor.c: the owner test of rdma-core's get_sw_cqe (the
// owner word read as monocq reads it), the ownership barrier, the consumer
// index to the doorbell record. No batches, no
// compressed CQEs, no overrun check.
type handCQ struct {
	cq     unsafe.Pointer
	mask   uint32
	logCnt uint32
	ci     uint32
	dbrec  unsafe.Pointer
}

func newHandCQ(m *queueMemory) *handCQ {
	return &handCQ{cq: m.cq, mask: m.cqeCnt - 1, logCnt: uint32(bits.TrailingZeros32(m.cqeCnt)), dbrec: m.cqDBRec}
}

// poll takes the CQE at the consumer index if software owns it and it is a
// requester CQE, and returns its WQE counter; false otherwise.
func (p *handCQ) poll() (uint16, bool) {
	c := unsafe.Add(p.cq, uintptr(p.ci&p.mask)*prm.CQE64Size)
	op := prm.LoadOpOwn(c)
	if op>>prm.CQEOpcodeShift != uint8(prm.CQEReq) || (op^uint8(p.ci>>p.logCnt))&prm.CQEOwnerMask != 0 {
		return 0, false
	}
	blueflame.OwnershipBarrier()
	p.ci++
	return prm.Load16(unsafe.Add(c, prm.CQEWQECounter)), true
}

// release writes the consumer index to the doorbell record.
func (p *handCQ) release() { prm.Store32(p.dbrec, p.ci&prm.CQConsumerIndexMask) }

// The split loops are the two combinations of a post (the builder, or the
// hand-written stores) and a poll (monocq, or the hand-written poll) that
// BenchmarkPostPoll and BenchmarkPostPollHandWritten do not already run,
// each a function of its own as those are, so that none pays for code it
// does not run.

// builderHandPollLoop posts with the builder and polls by hand.
func builderHandPollLoop(tb testing.TB) loop {
	m := newTestMemory(tb)
	g := newGoQueue(tb, m)
	p := newHandCQ(m)
	return func(n int) bool {
		sq, next := g.sq, g.next
		for i := 0; i < n; i++ {
			err := sq.Begin(next, wqebuilder.Signaled).
				RdmaWriteImm(benchRAddr, benchRKey, benchImm).
				SGE(g.laddr, benchLen, benchLKey).
				FinishBlueFlame()
			if err != nil {
				return false
			}
			g.comp.complete()
			counter, ok := p.poll()
			if !ok {
				return false
			}
			id, ok := sq.Complete(counter)
			p.release()
			if !ok || id != next {
				return false
			}
			next++
		}
		g.next = next
		return true
	}
}

// handHandLoop posts and polls by hand: Go written statement for statement
// like the C floor, with the call into the BlueFlame assembly.
func handHandLoop(tb testing.TB) loop {
	m := newTestMemory(tb)
	h := newHandQueue(tb, m)
	comp := newCompleter(m)
	p := newHandCQ(m)
	return func(n int) bool {
		for i := 0; i < n; i++ {
			if !h.post(uint64(i)) {
				return false
			}
			comp.complete()
			counter, ok := p.poll()
			if !ok {
				return false
			}
			p.release()
			if h.complete(counter) != uint64(i) {
				return false
			}
		}
		return true
	}
}

// handMonocqLoop is BenchmarkPostPollHandWritten's loop: hand-written
// post, monocq's Poll(1).
func handMonocqLoop(tb testing.TB) loop {
	m := newTestMemory(tb)
	q := newHandQueue(tb, m)
	comp := newCompleter(m)
	cq := newBenchCQ(tb, m)
	return func(n int) bool {
		_, ok := handLoop(q, &comp, cq, n)
		return ok
	}
}

func TestSplitLoops(t *testing.T) {
	for name, l := range map[string]loop{
		"builder+handpoll":  builderHandPollLoop(t),
		"handpost+handpoll": handHandLoop(t),
		"handpost+monocq":   handMonocqLoop(t),
	} {
		require.True(t, l(1000), name)
		require.Zero(t, testing.AllocsPerRun(10, func() { l(10) }), name)
	}
	// A ring with no CQE fails the hand-written poll.
	p := newHandCQ(newTestMemory(t))
	_, ok := p.poll()
	require.False(t, ok)
}

// BenchmarkPostPollSplit places the Go loop's cost: the full loop (builder
// and monocq) is timed, and beside it, block for block, the hand-written
// post with monocq, the builder with the hand-written poll, both
// hand-written, the C floor, and the C floor with its post called out of
// line as Go calls its BlueFlame assembly, each reported as its fastest
// block in cycles per iteration. The builder's cost is the difference
// between the rows that differ only in the post, the poller's between those
// that differ only in the poll.
func BenchmarkPostPollSplit(b *testing.B) {
	bl := []baseline{
		{name: "handpost+monocq-cycles", run: handMonocqLoop(b), cycles: true},
		{name: "builder+handpoll-cycles", run: builderHandPollLoop(b), cycles: true},
		{name: "handpost+handpoll-cycles", run: handHandLoop(b), cycles: true},
	}
	if c := cFloorLoop(b); c != nil {
		bl = append(bl, baseline{name: "C-cycles", run: c, cycles: true},
			baseline{name: "C-post-call-cycles", run: cFloorPostCallLoop(b), cycles: true})
	}
	g := newGoQueue(b, newTestMemory(b))
	runWithBaselines(b, func(n int) bool { return postPoll(g, n) }, bl...)
}
