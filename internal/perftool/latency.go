package perftool

import (
	"fmt"
	"io"
	"math"

	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/histogram"
)

// Latency is what a latency test recorded, in counter ticks.
type Latency struct {
	H          histogram.Histogram
	sum, sumSq float64
}

// Record adds one measurement.
func (l *Latency) Record(ticks uint64) {
	l.H.Record(ticks)
	f := float64(ticks)
	l.sum += f
	l.sumSq += f * f
}

// Stdev is the standard deviation of the recorded values.
func (l *Latency) Stdev() float64 {
	n := float64(l.H.Count())
	if n < 2 {
		return 0
	}
	mean := l.sum / n
	return math.Sqrt(max(l.sumSq/n-mean*mean, 0))
}

// Measure runs warmup+iters iterations of step (given the iteration's
// sequence number) and records each measured one in ticks of the cycle
// counter.
func (l *Latency) Measure(warmup, iters int, step func(seq uint32) error) error {
	for i := 0; i < warmup+iters; i++ {
		t0 := cycles.Start()
		if err := step(uint32(i)); err != nil {
			return err
		}
		t1 := cycles.Stop()
		if i >= warmup {
			l.Record(t1 - t0)
		}
	}
	return nil
}

// Summary is a latency table line's numbers, in microseconds.
type Summary struct {
	Count                         uint64
	Min, Max, Typical, Avg, Stdev float64
	Percentile99, Percentile999   float64
}

// Summarize converts what l recorded to microseconds with counter, each
// value divided by div (2 for half a round trip).
func (l *Latency) Summarize(counter cycles.Info, div float64) Summary {
	us := func(ticks float64) float64 { return counter.Nanoseconds(ticks) / div / 1000 }
	h := &l.H
	return Summary{
		Count:         h.Count(),
		Min:           us(float64(h.Min())),
		Max:           us(float64(h.Max())),
		Typical:       us(float64(h.Percentile(50))),
		Avg:           us(h.Mean()),
		Stdev:         us(l.Stdev()),
		Percentile99:  us(float64(h.Percentile(99))),
		Percentile999: us(float64(h.Percentile(99.9))),
	}
}

// WriteSetting prints the lines of a report's header every command has:
// the device, how the ends ran and the cycle counter.
func WriteSetting(w io.Writer, device, ends string, counter cycles.Info) {
	fmt.Fprintf(w, "device:  %s\n", device)
	fmt.Fprintf(w, "ends:    %s\n", ends)
	fmt.Fprintf(w, "counter: %v\n", counter)
}
