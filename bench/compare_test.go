package bench

import (
	"math"
	"slices"
	"testing"

	"github.com/mlx5kit/mlx5kit/internal/cycles"
)

// loop runs n iterations of one benchmarked loop and reports whether all
// of them succeeded.
type loop func(n int) bool

// baseline is a loop measured alongside a benchmark, block for block.
type baseline struct {
	// name is the metric the ratio is reported under.
	name string
	run  loop
	// faster reports the ratio as baseline/main (how many times faster the
	// benchmarked loop is) instead of main/baseline.
	faster bool
	// cycles reports the baseline's fastest block in cycles per iteration
	// instead of a ratio.
	cycles bool
}

// blockSize is the number of iterations a loop runs between switches. A
// block takes some tens of microseconds: short enough that a block often
// runs with no interruption on a busy machine, long enough that reading the
// counter around it costs nothing.
const blockSize = 1000

// blockStats collects the per-iteration ticks of full blocks.
type blockStats struct{ perOp []float64 }

func (s *blockStats) add(ticks uint64, n int) {
	if n == blockSize {
		s.perOp = append(s.perOp, float64(ticks)/float64(n))
	}
}

// min is the fastest block: the loop's cost when nothing else ran on the
// CPU. Comparing minimums keeps a neighbour's load on a shared machine out
// of the ratios.
func (s *blockStats) min() float64 {
	if len(s.perOp) == 0 {
		return math.NaN()
	}
	return slices.Min(s.perOp)
}

// runWithBaselines times main over b.N iterations in blocks of blockSize
// and, after every block with the timer stopped, runs each baseline for a
// block too. ns/op and cycles/op are main's alone. It also reports
// min-cycles/op (main's fastest block) and, per baseline, the ratio of the
// fastest blocks (or the baseline's own fastest block in cycles).
func runWithBaselines(b *testing.B, main loop, baselines ...baseline) {
	mainStats := new(blockStats)
	stats := make([]blockStats, len(baselines))
	b.ReportAllocs()
	b.ResetTimer()
	var total uint64
	for done := 0; done < b.N; {
		n := min(blockSize, b.N-done)
		c0 := cycles.Start()
		ok := main(n)
		c1 := cycles.Stop()
		if !ok {
			b.Fatalf("iteration in [%d, %d) failed", done, done+n)
		}
		total += c1 - c0
		mainStats.add(c1-c0, n)
		done += n
		if n < blockSize || len(baselines) == 0 {
			continue
		}
		b.StopTimer()
		for i, bl := range baselines {
			c0 := cycles.Start()
			ok := bl.run(blockSize)
			c1 := cycles.Stop()
			if !ok {
				b.Fatalf("baseline %s failed", bl.name)
			}
			stats[i].add(c1-c0, blockSize)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(total)/float64(b.N), "cycles/op")
	m := mainStats.min()
	if math.IsNaN(m) {
		return
	}
	b.ReportMetric(m, "min-cycles/op")
	for i, bl := range baselines {
		if r := stats[i].min(); !math.IsNaN(r) {
			if bl.cycles {
				b.ReportMetric(r, bl.name)
			} else if bl.faster {
				b.ReportMetric(r/m, bl.name)
			} else {
				b.ReportMetric(m/r, bl.name)
			}
		}
	}
}

func TestBlockStats(t *testing.T) {
	var s blockStats
	if !math.IsNaN(s.min()) {
		t.Fatal("empty stats must have no minimum")
	}
	s.add(5000, blockSize)
	s.add(100, 10) // a partial block does not count
	s.add(3000, blockSize)
	if got := s.min(); got != 3 {
		t.Fatalf("min = %v, want 3", got)
	}
}
