package perftool

import (
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/histogram"
)

// Latency is what a latency test recorded, in counter ticks.
type Latency struct {
	H          histogram.Histogram
	sum, sumSq float64
	// samples keeps each measurement while it has room (Reserve).
	samples []uint64
	// unsampled counts iterations that ran without a sample of their own:
	// the first Posted one, which has no earlier post to be timed from.
	unsampled uint64
	posted    bool
	lastPost  uint64
}

// Reserve makes room for n measurements, so that Record keeps each of the
// next n without allocating and PerftestSummary can sort them.
func (l *Latency) Reserve(n int) {
	if cap(l.samples) < n {
		l.samples = make([]uint64, 0, n)
	}
	l.samples = l.samples[:0]
	l.unsampled, l.posted = 0, false
}

// Posted times a loop as perftest's latency loops are timed
// (print_report_lat): called where an iteration posts its message (perftest
// reads the counter into tposted there), it records the time since the
// previous call. n iterations make n-1 samples, each the time from one post
// to the next; the first iteration counts in PerftestSummary's Count
// (perftest's #iterations) with no sample of its own.
func (l *Latency) Posted() {
	t := cycles.Start()
	if l.posted {
		l.Record(t - l.lastPost)
	} else {
		l.unsampled++
	}
	l.posted, l.lastPost = true, t
}

// Record adds one measurement.
func (l *Latency) Record(ticks uint64) {
	l.H.Record(ticks)
	if len(l.samples) < cap(l.samples) {
		l.samples = append(l.samples, ticks)
	}
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

// MeasureFor runs warmup iterations of step, then more until ticks
// counter ticks have passed since the first measured one, recording each
// measured one, and returns how many it measured and the ticks they took in
// all. stop, when not nil, ends the run early once it is set.
func (l *Latency) MeasureFor(warmup int, ticks uint64, stop func() bool, step func(seq uint32) error) (n int, total uint64, err error) {
	seq := uint32(0)
	for ; int(seq) < warmup; seq++ {
		if err := step(seq); err != nil {
			return 0, 0, err
		}
	}
	begin := cycles.Now()
	for {
		t0 := cycles.Start()
		if err := step(seq); err != nil {
			return n, 0, err
		}
		t1 := cycles.Stop()
		seq++
		n++
		l.Record(t1 - t0)
		if t1-begin >= ticks || (n%1024 == 0 && stop != nil && stop()) {
			return n, t1 - begin, nil
		}
	}
}

// DroppedTail is how many of the largest samples perftest's latency report
// leaves out (LAT_MEASURE_TAIL in perftest's src/perftest_parameters.c).
const DroppedTail = 2

// PerftestSummary summarizes the measurements Reserve kept by perftest's
// rules (print_report_lat): the samples sorted and the DroppedTail largest
// left out of the median (t_typical: the middle one, or the mean of the two
// middle ones), the mean and the standard deviation; t_min is the smallest
// sample and t_max the first one left out; the 99th and 99.9th percentiles
// are the samples at ceil(0.99 m) and ceil(0.999 m) of the m kept; Count
// is the samples and the iterations Posted left without one. Each
// value is divided by div (2 for half a round trip) and given in
// microseconds. It sorts the kept samples in place and needs at least
// DroppedTail+1 of them.
func (l *Latency) PerftestSummary(counter cycles.Info, div float64) (Summary, error) {
	s := l.samples
	if len(s) < DroppedTail+1 {
		return Summary{}, fmt.Errorf("%d latency samples kept: perftest's rules need at least %d", len(s), DroppedTail+1)
	}
	slices.Sort(s)
	us := func(ticks float64) float64 { return counter.Nanoseconds(ticks) / div / 1000 }
	m := len(s) - DroppedTail
	median := float64(s[m/2])
	if m%2 == 0 {
		median = (float64(s[m/2]) + float64(s[m/2-1])) / 2
	}
	var sum float64
	for _, v := range s[:m] {
		sum += us(float64(v))
	}
	avg := sum / float64(m)
	var sq float64
	for _, v := range s[:m] {
		d := us(float64(v)) - avg
		sq += d * d
	}
	at := func(p float64) float64 { return us(float64(s[min(int(math.Ceil(float64(m)*p)), len(s)-1)])) }
	return Summary{
		Count:         uint64(len(s)) + l.unsampled,
		Min:           us(float64(s[0])),
		Max:           us(float64(s[m])),
		Typical:       us(median),
		Avg:           avg,
		Stdev:         math.Sqrt(sq / float64(m)),
		Percentile99:  at(0.99),
		Percentile999: at(0.999),
	}, nil
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
