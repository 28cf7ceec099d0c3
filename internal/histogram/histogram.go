// Package histogram records latencies into a fixed array of log-linear
// buckets without allocating, and reports percentiles, for the benchmarks
// and tools of mlx5kit.
//
// Values are unsigned integers in whatever unit the caller records (counter
// ticks, nanoseconds). Values below 2*SubBuckets are kept exactly; above
// that every power of two is split into SubBuckets equal buckets, so a
// reported percentile is within 1/SubBuckets (1.6%) of the recorded value
// it stands for, over the whole uint64 range. A Histogram is about 30 KiB;
// allocate it once, outside the measured loop, and Record into it there.
//
// A Histogram is not safe for concurrent use: give each goroutine its own
// and Merge them afterwards.
package histogram

import (
	"math"
	"math/bits"
)

const (
	// subBits is log2 of twice the number of buckets per power of two.
	subBits = 7
	half    = 1 << (subBits - 1)
	// SubBuckets is the number of buckets each power of two is divided
	// into; it bounds the relative error of a percentile to 1/SubBuckets.
	SubBuckets = half
	// Buckets is the number of counters in a Histogram.
	Buckets = (64-subBits)*half + 2*half
)

// Histogram counts recorded values in log-linear buckets. The zero value is
// an empty histogram ready to use.
type Histogram struct {
	counts [Buckets]uint64
	total  uint64
	min    uint64 // valid when total > 0
	max    uint64
	sum    float64
}

// index is the bucket of v: exact below 2*half, then half buckets per power
// of two. It has no branches.
func index(v uint64) int {
	shift := bits.Len64(v|(2*half-1)) - subBits
	return shift*half + int(v>>uint(shift))
}

// bucketRange returns the smallest value of bucket i and the bucket's width.
func bucketRange(i int) (lo, width uint64) {
	if i < 2*half {
		return uint64(i), 1
	}
	shift := i/half - 1
	return uint64(i-shift*half) << uint(shift), 1 << uint(shift)
}

// Record adds one value. It does not allocate and is safe to call in a
// measured loop.
func (h *Histogram) Record(v uint64) {
	h.counts[index(v)]++
	if h.total == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.total++
	h.sum += float64(v)
}

// Count returns the number of recorded values.
func (h *Histogram) Count() uint64 { return h.total }

// Min returns the smallest recorded value, 0 when empty.
func (h *Histogram) Min() uint64 { return h.min }

// Max returns the largest recorded value, 0 when empty.
func (h *Histogram) Max() uint64 { return h.max }

// Mean returns the arithmetic mean of the recorded values, NaN when empty.
func (h *Histogram) Mean() float64 {
	if h.total == 0 {
		return math.NaN()
	}
	return h.sum / float64(h.total)
}

// Percentile returns the value below or at which p percent of the recorded
// values lie (the nearest-rank definition: the ceil(p/100*n)-th smallest
// value), within the resolution of its bucket. p is clamped to [0, 100];
// an empty histogram returns 0. Percentile(0) is Min and Percentile(100) is
// Max, exactly.
func (h *Histogram) Percentile(p float64) uint64 {
	if h.total == 0 {
		return 0
	}
	if p <= 0 || math.IsNaN(p) {
		return h.min
	}
	if p >= 100 {
		return h.max
	}
	// p/100 is rarely exact in binary (99.9/100 is 0.9990000000000001):
	// a product a rounding error above a whole rank is that rank.
	x := p / 100 * float64(h.total)
	rank := uint64(math.Ceil(x - x*rankSlack))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i]
		if seen >= rank {
			lo, w := bucketRange(i)
			v := lo + (w-1)/2
			return min(max(v, h.min), h.max)
		}
	}
	return h.max
}

// rankSlack is the relative rounding error of p/100*n that Percentile
// forgives: a few units in the last place of a float64, the error of p
// itself, the division and the product.
const rankSlack = 1e-15

// Merge adds every value recorded in o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.total == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.total += o.total
	h.sum += o.sum
}

// Reset empties the histogram.
func (h *Histogram) Reset() { *h = Histogram{} }

// Bucket is one non-empty bucket: Count values lay in [Low, High].
type Bucket struct {
	Low, High uint64
	Count     uint64
}

// Each calls fn for every non-empty bucket in ascending order of value.
func (h *Histogram) Each(fn func(Bucket)) {
	if h.total == 0 {
		return
	}
	for i := index(h.min); i <= index(h.max); i++ {
		if c := h.counts[i]; c != 0 {
			lo, w := bucketRange(i)
			fn(Bucket{Low: lo, High: lo + (w - 1), Count: c})
		}
	}
}
