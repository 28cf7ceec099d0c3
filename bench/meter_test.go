package bench

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/mlx5kit/mlx5kit/internal/cycles"
)

// TestMain prints, before any benchmark line, what the cycle counts are
// counted in. The lines have the "key: value" form that benchstat keeps as
// configuration.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		info := cycles.Frequency()
		fmt.Printf("counter: %s\n", info.Counter)
		fmt.Printf("counter-hz: %.0f (%s)\n", info.Hz, info.Source)
		fmt.Printf("counter-invariant: %t\n", info.Invariant)
	}
	os.Exit(m.Run())
}

// meter measures a benchmark loop in counter ticks as well as in time.
type meter struct {
	b  *testing.B
	c0 uint64
}

// startMeter resets the benchmark timer and reads the counter; call it
// right before the measured loop.
func startMeter(b *testing.B) meter {
	b.ReportAllocs()
	b.ResetTimer()
	return meter{b: b, c0: cycles.Start()}
}

// stop reads the counter, stops the timer and reports cycles/op. It
// returns the ticks per iteration.
func (m meter) stop() float64 {
	c1 := cycles.Stop()
	m.b.StopTimer()
	per := float64(c1-m.c0) / float64(m.b.N)
	m.b.ReportMetric(per, "cycles/op")
	return per
}
