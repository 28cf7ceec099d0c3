package bench

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/affinity"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/histogram"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// pingSizes are the payloads of the latency benchmarks.
var pingSizes = []int{8, 64, 256, 1024, 4096}

// pingMaxInline is the inline capacity asked for: payloads up to it go
// inline, larger ones through one SGE.
const pingMaxInline = 256

// Offsets in each side's buffer: the ping lands at pingOff of the receiver,
// the pong at pongOff; the sender's source is srcOff.
const (
	srcOff  = 0
	pingOff = 1 << 20
	pongOff = 2 << 20
)

// rtStats accumulates what a ping-pong benchmark reports per round trip.
type rtStats struct {
	hist       *histogram.Histogram
	postCycles uint64
	pollCycles uint64
	overhead   uint64 // one Now-to-Now interval, subtracted from each span
	spins      uint64 // empty polls, to yield on a shared CPU
}

func newRTStats() *rtStats {
	return &rtStats{hist: new(histogram.Histogram), overhead: counterOverhead()}
}

// counterOverhead is the median interval between two consecutive reads of
// the counter: what timing a span adds to it.
func counterOverhead() uint64 {
	var d [101]uint64
	for i := range d {
		a := cycles.Now()
		d[i] = cycles.Now() - a
	}
	slices.Sort(d[:])
	return d[len(d)/2]
}

// span returns the ticks from t0 to now, less the counter's own cost.
func (s *rtStats) span(t0 uint64) uint64 {
	d := cycles.Now() - t0
	if d < s.overhead {
		return 0
	}
	return d - s.overhead
}

// report sets the benchmark's metrics: cycles and percentiles per round
// trip, and the software cost of posting and of the polls that found a
// completion.
func (s *rtStats) report(b *testing.B) {
	f := cycles.Frequency()
	h := s.hist
	n := float64(h.Count())
	if n == 0 {
		return
	}
	b.ReportMetric(h.Mean(), "cycles/op")
	b.ReportMetric(f.Nanoseconds(float64(h.Percentile(50))), "p50-ns")
	b.ReportMetric(f.Nanoseconds(float64(h.Percentile(99))), "p99-ns")
	b.ReportMetric(f.Nanoseconds(float64(h.Percentile(99.9))), "p99.9-ns")
	b.ReportMetric(float64(s.postCycles)/n, "post-cycles/op")
	b.ReportMetric(float64(s.pollCycles)/n, "poll-cycles/op")
}

// pin binds the benchmark goroutine to the first CPU of MLX5KIT_CPUS (or of
// the allowed set) for the duration of the benchmark, when there is more
// than one CPU: with only one, a spinning poller would starve the software
// HCA's engine.
func pin(b *testing.B) {
	cpus, err := affinity.CPUs()
	if err != nil {
		b.Fatal(err)
	}
	if len(cpus) < 2 || runtime.GOMAXPROCS(0) < 2 {
		b.Logf("not pinned: %d CPUs, GOMAXPROCS %d", len(cpus), runtime.GOMAXPROCS(0))
		return
	}
	p, err := affinity.Pin(cpus[0])
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := p.Release(); err != nil {
			b.Error(err)
		}
	})
}

// yieldEvery is the number of empty polls after which a waiting loop
// yields the processor, so that on an oversubscribed machine the software
// HCA's engine still gets to run.
const yieldEvery = 1 << 12

// rcPair is two connected RC queue pairs, one per side, each with a CQ for
// its sends and receives and a poller.
type rcPair struct {
	e  *pingEnv
	qp [2]*rc.QP
	cq [2]*ctx.CompletionQueue
	p  [2]*rc.Poller
	// inline reports whether the payload goes inline.
	inline bool
}

func newRCPair(tb testing.TB, e *pingEnv, depth uint32, size int) *rcPair {
	x := &rcPair{e: e}
	for i := range 2 {
		cq, err := e.s[i].c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 2*depth + 2})
		require.NoError(tb, err)
		x.cq[i] = cq
		x.p[i], err = rc.NewPoller(cq)
		require.NoError(tb, err)
		qp, err := rc.New(e.s[i].pd, cq, nil, rc.Config{SendDepth: depth, RecvDepth: depth, MaxInline: pingMaxInline})
		require.NoError(tb, err)
		require.NoError(tb, x.p[i].Add(&qp.Queue))
		x.qp[i] = qp
	}
	require.NoError(tb, x.qp[0].Connect(x.qp[1].Endpoint()))
	require.NoError(tb, x.qp[1].Connect(x.qp[0].Endpoint()))
	x.inline = size <= int(x.qp[0].Limits().MaxInline)
	tb.Cleanup(func() {
		for i := range 2 {
			require.NoError(tb, x.qp[i].Close())
			require.NoError(tb, x.cq[i].Close())
		}
	})
	return x
}

// writeImm posts an RDMA_WRITE_IMM of size bytes from side i to side 1-i at
// dst, inline when the pair allows it, signaled, with BlueFlame.
func (x *rcPair) writeImm(i int, wrid uint64, size, dst int) error {
	src, peer := &x.e.s[i], &x.e.s[1-i]
	s, err := x.qp[i].Post(wrid, wqebuilder.Signaled)
	if err != nil {
		return err
	}
	d := s.RdmaWriteImm(peer.addr(dst), peer.mr.RKey(), uint32(wrid))
	if x.inline {
		return d.Inline(src.buf.Bytes()[srcOff : srcOff+size]).FinishBlueFlame()
	}
	return d.SGE(src.addr(srcOff), uint32(size), src.mr.LKey()).FinishBlueFlame()
}

// waitRecv polls side i until a receive completion arrives, taking the send
// completions it meets on the way. It returns false on an error completion.
func (x *rcPair) waitRecv(i int, st *rtStats) bool {
	p := x.p[i]
	ok, got := true, false
	for !got {
		t0 := cycles.Now()
		n := p.Poll(4, func(c *rc.Completion) {
			if c.Status != rc.StatusOK {
				ok = false
			}
			if !c.IsSend() {
				got = true
			}
		})
		if n == 0 {
			if st.spins++; st.spins%yieldEvery == 0 {
				runtime.Gosched()
			}
			continue
		}
		st.pollCycles += st.span(t0)
		if !ok {
			return false
		}
	}
	return true
}

// rcWriteImmRoundTrip is one round trip: side 0 writes with immediate to
// side 1, side 1 sees the receive completion, reposts the receive and writes
// back, side 0 sees the receive completion.
func (x *rcPair) rcWriteImmRoundTrip(id uint64, size int, st *rtStats) bool {
	t0 := cycles.Now()
	if x.writeImm(0, id, size, pingOff) != nil {
		return false
	}
	st.postCycles += st.span(t0)
	if !x.waitRecv(1, st) {
		return false
	}
	t1 := cycles.Now()
	if x.qp[1].PostRecv(id, 0, 0, 0) != nil || x.writeImm(1, id, size, pongOff) != nil {
		return false
	}
	st.postCycles += st.span(t1)
	if !x.waitRecv(0, st) {
		return false
	}
	t2 := cycles.Now()
	if x.qp[0].PostRecv(id, 0, 0, 0) != nil {
		return false
	}
	st.postCycles += st.span(t2)
	st.hist.Record(cycles.Now() - t0)
	return true
}

func sizeName(n int) string {
	if n >= 1024 {
		return fmt.Sprintf("%dKiB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkPingpong is the latency ping-pong at queue depth 1, signaled,
// with BlueFlame, inline up to pingMaxInline bytes: one op is one round
// trip. It runs on the first mlx5 device when there is one and on the
// software HCA otherwise (the "provider:" line says which).
func BenchmarkPingpong(b *testing.B) {
	e := sharedEnv(b)
	for _, size := range pingSizes {
		b.Run("rc-write-imm/"+sizeName(size), func(b *testing.B) {
			x := newRCPair(b, e, 16, size)
			for i := range 2 {
				require.NoError(b, x.qp[i].PostRecv(0, 0, 0, 0))
			}
			st := newRTStats()
			pin(b)
			// Warm up outside the measurement: the first round trips
			// fault in pages and wake the engine.
			for i := 0; i < 100; i++ {
				require.True(b, x.rcWriteImmRoundTrip(uint64(i), size, st))
			}
			st = newRTStats()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if !x.rcWriteImmRoundTrip(uint64(i), size, st) {
					b.Fatalf("round trip %d failed", i)
				}
			}
			b.StopTimer()
			st.report(b)
		})
	}
}
