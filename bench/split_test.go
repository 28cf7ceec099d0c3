package bench

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/blueflame"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
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
	c := newCompleter(m)
	return &handCQ{cq: m.cq, mask: c.mask, logCnt: c.logCnt, dbrec: m.cqDBRec}
}

// poll returns the CQE at the consumer index if software owns it, or nil.
func (p *handCQ) poll() unsafe.Pointer {
	c := unsafe.Add(p.cq, uintptr(p.ci&p.mask)*prm.CQE64Size)
	op := prm.LoadOpOwn(c)
	if op>>prm.CQEOpcodeShift == uint8(prm.CQEInvalid) || (op^uint8(p.ci>>p.logCnt))&prm.CQEOwnerMask != 0 {
		return nil
	}
	blueflame.OwnershipBarrier()
	p.ci++
	return c
}

// release writes the consumer index to the doorbell record.
func (p *handCQ) release() { prm.Store32(p.dbrec, p.ci&prm.CQConsumerIndexMask) }

// splitLoop is one of the four combinations of a post (the builder, or the
// hand-written stores) and a poll (monocq, or the hand-written poll).
func splitLoop(tb testing.TB, builder, mono bool) loop {
	m := newTestMemory(tb)
	g := newGoQueue(tb, m)
	h := newHandQueue(tb, m)
	p := newHandCQ(m)
	var next uint64
	return func(n int) bool {
		for i := 0; i < n; i++ {
			if builder {
				err := g.sq.Begin(next, wqebuilder.Signaled).
					RdmaWriteImm(benchRAddr, benchRKey, benchImm).
					SGE(g.laddr, benchLen, benchLKey).
					FinishBlueFlame()
				if err != nil {
					return false
				}
			} else if !h.post(next) {
				return false
			}
			g.comp.complete()
			var id uint64
			ok := false
			if mono {
				g.cq.Poll(1, func(c *monocq.CQE) {
					ok = c.Opcode() == prm.CQEReq
					if builder {
						id, ok = g.sq.Complete(c.WQECounter())
					} else {
						id = h.complete(c.WQECounter())
					}
				})
			} else if c := p.poll(); c != nil && *(*uint8)(unsafe.Add(c, prm.CQEOpOwn))>>prm.CQEOpcodeShift == uint8(prm.CQEReq) {
				counter := prm.Load16(unsafe.Add(c, prm.CQEWQECounter))
				ok = true
				if builder {
					id, ok = g.sq.Complete(counter)
				} else {
					id = h.complete(counter)
				}
				p.release()
			}
			if !ok || id != next {
				return false
			}
			next++
		}
		return true
	}
}

func TestSplitLoops(t *testing.T) {
	for _, builder := range []bool{false, true} {
		for _, mono := range []bool{false, true} {
			l := splitLoop(t, builder, mono)
			require.True(t, l(1000), "builder=%t monocq=%t", builder, mono)
		}
	}
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
		{name: "handpost+monocq-cycles", run: splitLoop(b, false, true), cycles: true},
		{name: "builder+handpoll-cycles", run: splitLoop(b, true, false), cycles: true},
		{name: "handpost+handpoll-cycles", run: splitLoop(b, false, false), cycles: true},
	}
	if c := cFloorLoop(b); c != nil {
		bl = append(bl, baseline{name: "C-cycles", run: c, cycles: true},
			baseline{name: "C-post-call-cycles", run: cFloorPostCallLoop(b), cycles: true})
	}
	runWithBaselines(b, splitLoop(b, true, true), bl...)
}
