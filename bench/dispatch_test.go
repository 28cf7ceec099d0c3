package bench

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/blueflame"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// pollBatch is the number of CQEs the completer writes before each poll
// in the dispatch benchmarks.
const pollBatch = 64

// cqeSink is what the dispatch benchmarks do with a CQE: add its WQE
// counter to a sum.
type cqeSink struct{ sum uint64 }

// completionHandler is the interface a callback-by-interface poller calls.
type completionHandler interface{ OnCompletion(c *monocq.CQE) }

// OnCompletion adds the CQE's WQE counter to the sum.
func (s *cqeSink) OnCompletion(c *monocq.CQE) { s.sum += uint64(c.WQECounter()) }

// pollRing is a completion ring with its completer for the dispatch
// benchmarks.
type pollRing struct {
	comp completer
	cq   *monocq.CQ
	hand *handCQ
	sink cqeSink
	h    completionHandler
}

func newPollRing(tb testing.TB) *pollRing {
	m := newTestMemory(tb)
	r := &pollRing{comp: newCompleter(m), cq: newBenchCQ(tb, m), hand: newHandCQ(m)}
	r.h = &r.sink
	return r
}

// fill has the completer write k CQEs.
func (r *pollRing) fill(k int) {
	for j := 0; j < k; j++ {
		r.comp.complete()
	}
}

// inlined polls n CQEs through monocq with a function literal.
func (r *pollRing) inlined(n int) bool {
	for done := 0; done < n; done += pollBatch {
		k := min(pollBatch, n-done)
		r.fill(k)
		sum := r.sink.sum
		if r.cq.Poll(k, func(c *monocq.CQE) { sum += uint64(c.WQECounter()) }) != k {
			return false
		}
		r.sink.sum = sum
	}
	return true
}

// viaInterface polls n CQEs through monocq, calling a handler through an
// interface for each.
func (r *pollRing) viaInterface(n int) bool {
	for done := 0; done < n; done += pollBatch {
		k := min(pollBatch, n-done)
		r.fill(k)
		got := 0
		for c := range r.cq.All(k) {
			r.h.OnCompletion(c)
			got++
		}
		if got != k {
			return false
		}
	}
	return true
}

// handWritten polls n CQEs with a loop written for this ring: the owner
// test per CQE (the owner word read as monocq reads it), one ownership
// barrier per batch, the consumer index once.
func (r *pollRing) handWritten(n int) bool {
	p := r.hand
	for done := 0; done < n; done += pollBatch {
		want := uint32(min(pollBatch, n-done))
		r.fill(int(want))
		ci := p.ci
		k := uint32(0)
		for ; k < want; k++ {
			i := ci + k
			op := prm.LoadOpOwn(unsafe.Add(p.cq, uintptr(i&p.mask)*prm.CQE64Size))
			if op>>prm.CQEOpcodeShift == uint8(prm.CQEInvalid) || (op^uint8(i>>p.logCnt))&prm.CQEOwnerMask != 0 {
				break
			}
		}
		if k != want {
			return false
		}
		blueflame.OwnershipBarrier()
		sum := r.sink.sum
		for i := ci; i != ci+k; i++ {
			sum += uint64(prm.Load16(unsafe.Add(p.cq, uintptr(i&p.mask)*prm.CQE64Size+prm.CQEWQECounter)))
		}
		r.sink.sum = sum
		p.ci = ci + k
		p.release()
	}
	return true
}

func TestDispatchLoopsAgree(t *testing.T) {
	// 1000 CQEs: batches of 64 and a short one, twice round the ring of
	// 256 and more, so the owner bit flips. The doorbell record stays 0,
	// so each CQE names WQE 0xffff: every form must see the same CQEs.
	const n = 1000
	var sums []uint64
	for _, run := range []func(*pollRing, int) bool{(*pollRing).inlined, (*pollRing).viaInterface, (*pollRing).handWritten} {
		r := newPollRing(t)
		require.True(t, run(r, n))
		require.True(t, run(r, n), "a second pass")
		sums = append(sums, r.sink.sum)
	}
	require.Equal(t, uint64(2*n*0xffff), sums[0])
	require.Equal(t, sums[0], sums[1])
	require.Equal(t, sums[0], sums[2])
	r := newPollRing(t)
	require.Zero(t, testing.AllocsPerRun(20, func() { r.inlined(100); r.viaInterface(100) }))
}

// BenchmarkPollDispatch is the per-CQE cost of monocq's inlined poll with a
// function literal (one op is one CQE, polled in batches of 64 that the
// completer writes first). Beside it, block for block: a loop hand-written
// for this ring ("x-hand-written": inlined over hand-written, target at
// most 1.3) and monocq with the callback called through an interface
// ("x-interface": interface over inlined).
func BenchmarkPollDispatch(b *testing.B) {
	r := newPollRing(b)
	hand := newPollRing(b)
	iface := newPollRing(b)
	runWithBaselines(b, r.inlined,
		baseline{name: "x-hand-written", run: hand.handWritten},
		baseline{name: "x-interface", run: iface.viaInterface, faster: true},
	)
}
