package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mlx5kit/mlx5kit/internal/affinity"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/histogram"
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
	// step, when set, is what a poll that finds nothing does in place
	// of yielding: a round of a manual-mode model (tests), or
	// Context.Idle on the software HCA (the polling goroutine runs a
	// round of the model's engine mode).
	step func()
}

func newRTStats() *rtStats {
	return &rtStats{hist: new(histogram.Histogram), overhead: counterOverhead()}
}

// counterOverhead is the median interval from cycles.Start to cycles.Stop
// with nothing between them: what timing a span adds to it.
func counterOverhead() uint64 {
	var d [101]uint64
	for i := range d {
		a := cycles.Start()
		d[i] = cycles.Stop() - a
	}
	slices.Sort(d[:])
	return d[len(d)/2]
}

// span returns the ticks from t0, read with cycles.Start, to now, less
// the counter's own cost. The reads are fenced: a post of a few dozen
// cycles would otherwise overlap the unordered counter reads around it
// and come out near zero.
func (s *rtStats) span(t0 uint64) uint64 {
	d := cycles.Stop() - t0
	if d < s.overhead {
		return 0
	}
	return d - s.overhead
}

// EnvHistDir names a directory where each ping-pong benchmark writes its
// round-trip histogram, as text (name.txt) and as an SVG picture
// (name.svg), when it ends.
const EnvHistDir = "MLX5KIT_HIST_DIR"

// writeHistogram writes the histogram files for the benchmark named name
// when MLX5KIT_HIST_DIR is set.
func (s *rtStats) writeHistogram(b *testing.B, provider string) {
	dir := os.Getenv(EnvHistDir)
	if dir == "" || s.hist.Count() == 0 {
		return
	}
	f := cycles.Frequency()
	scale := histogram.Scale{Factor: 1e6 / f.Hz, Unit: "µs"}
	name := strings.NewReplacer("/", "-", "Benchmark", "").Replace(strings.TrimSuffix(b.Name(), fmt.Sprintf("-%d", runtime.GOMAXPROCS(0))))
	var txt, svg bytes.Buffer
	fmt.Fprintf(&txt, "%s on %s, %s\n", b.Name(), provider, f)
	if err := s.hist.WriteText(&txt, scale); err != nil {
		b.Fatal(err)
	}
	title := fmt.Sprintf("%s round trip on %s (%d round trips)", name, provider, s.hist.Count())
	if err := s.hist.WriteSVG(&svg, scale, title); err != nil {
		b.Fatal(err)
	}
	for file, data := range map[string][]byte{name + ".txt": txt.Bytes(), name + ".svg": svg.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
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

// pin binds the benchmark goroutine to the first CPU of MLX5KIT_CPUS for
// the duration of the benchmark. Without MLX5KIT_CPUS nothing is pinned:
// on a machine shared with other work the operating system then keeps the
// benchmark and the software HCA's engine apart better than a fixed CPU
// does. With fewer than two CPUs it does not pin either: a spinning poller
// would share its CPU with the engine.
func pin(b *testing.B) {
	if os.Getenv(affinity.EnvCPUs) == "" {
		return
	}
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

func sizeName(n int) string {
	if n >= 1024 {
		return fmt.Sprintf("%dKiB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}
