package histogram

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// nearestRank is the reference percentile on sorted data, its rank
// ceil(p/100*n) computed exactly on p's decimal text.
func nearestRank(sorted []uint64, p float64) uint64 {
	if p <= 0 {
		return sorted[0]
	}
	x, _ := new(big.Rat).SetString(strconv.FormatFloat(p, 'f', -1, 64))
	x.Mul(x, big.NewRat(int64(len(sorted)), 100))
	q, r := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	rank := int(q.Int64())
	if r.Sign() != 0 {
		rank++
	}
	rank = max(rank, 1)
	rank = min(rank, len(sorted))
	return sorted[rank-1]
}

// tolerance is the resolution of the bucket holding v.
func tolerance(v uint64) uint64 {
	_, w := bucketRange(index(v))
	return w
}

func TestBucketsTileTheRange(t *testing.T) {
	// Every bucket starts one past the end of the previous one, and index
	// maps both ends of every bucket back to it.
	var next uint64
	for i := 0; i < Buckets; i++ {
		lo, w := bucketRange(i)
		require.Equal(t, next, lo, "bucket %d", i)
		require.Equal(t, i, index(lo), "low end of bucket %d", i)
		require.Equal(t, i, index(lo+w-1), "high end of bucket %d", i)
		next = lo + w
	}
	require.Zero(t, next, "the last bucket must end at 2^64-1 exactly")
	require.Equal(t, Buckets-1, index(math.MaxUint64))
}

func TestRelativeErrorBound(t *testing.T) {
	for i := 2 * SubBuckets; i < Buckets; i++ {
		lo, w := bucketRange(i)
		require.LessOrEqual(t, float64(w)/float64(lo), 1.0/SubBuckets, "bucket %d", i)
	}
}

func TestPercentilesMatchSortedReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	dists := map[string]func() uint64{
		"uniform-small": func() uint64 { return r.Uint64N(200) },
		"exponential":   func() uint64 { return uint64(r.ExpFloat64() * 3000) },
		"lognormal":     func() uint64 { return uint64(math.Exp(r.NormFloat64()*1.5 + 8)) },
		"bimodal-tail": func() uint64 {
			if r.IntN(1000) == 0 {
				return 1e6 + r.Uint64N(1e6)
			}
			return 800 + r.Uint64N(100)
		},
		"huge": func() uint64 { return r.Uint64() },
	}
	for name, gen := range dists {
		t.Run(name, func(t *testing.T) {
			var h Histogram
			data := make([]uint64, 20000+r.IntN(5000))
			for i := range data {
				data[i] = gen()
				h.Record(data[i])
			}
			slices.Sort(data)
			require.Equal(t, uint64(len(data)), h.Count())
			require.Equal(t, data[0], h.Min())
			require.Equal(t, data[len(data)-1], h.Max())
			for _, p := range []float64{0, 0.1, 1, 10, 25, 50, 75, 90, 99, 99.9, 99.99, 100} {
				want := nearestRank(data, p)
				got := h.Percentile(p)
				diff := max(got, want) - min(got, want)
				require.LessOrEqual(t, diff, tolerance(want), "p%v: got %d want %d", p, got, want)
			}
			var sum float64
			for _, v := range data {
				sum += float64(v)
			}
			require.InEpsilon(t, sum/float64(len(data)), h.Mean(), 1e-9)
		})
	}
}

func TestExactBelowTwiceSubBuckets(t *testing.T) {
	var h Histogram
	for v := uint64(0); v < 2*SubBuckets; v++ {
		h.Record(v)
	}
	n := float64(2 * SubBuckets)
	for k := 1; k <= 2*SubBuckets; k++ {
		p := 100 * float64(k) / n
		require.Equal(t, uint64(k-1), h.Percentile(p), "p%v", p)
	}
}

func TestEmpty(t *testing.T) {
	var h Histogram
	require.Zero(t, h.Count())
	require.Zero(t, h.Percentile(50))
	require.True(t, math.IsNaN(h.Mean()))
	require.Equal(t, "n=0\n", h.String())
	n := 0
	h.Each(func(Bucket) { n++ })
	require.Zero(t, n)
}

func TestMergeEqualsRecordingEverything(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var a, b, all Histogram
	for i := 0; i < 10000; i++ {
		v := uint64(r.ExpFloat64() * 5000)
		all.Record(v)
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	var empty Histogram
	a.Merge(&empty)
	a.Merge(&b)
	require.Equal(t, all.counts, a.counts)
	require.Equal(t, all.Count(), a.Count())
	require.Equal(t, all.Min(), a.Min())
	require.Equal(t, all.Max(), a.Max())
	require.InEpsilon(t, all.Mean(), a.Mean(), 1e-12)

	empty.Merge(&all)
	require.Equal(t, all.Min(), empty.Min())
	require.Equal(t, all.Percentile(99.9), empty.Percentile(99.9))

	a.Reset()
	require.Zero(t, a.Count())
}

func TestRecordDoesNotAllocate(t *testing.T) {
	h := new(Histogram)
	v := uint64(1)
	allocs := testing.AllocsPerRun(1000, func() {
		h.Record(v)
		v = v*7 + 13
	})
	require.Zero(t, allocs)
}

func TestEachAndText(t *testing.T) {
	var h Histogram
	for i := 0; i < 90; i++ {
		h.Record(1000)
	}
	for i := 0; i < 10; i++ {
		h.Record(64000)
	}
	var total uint64
	var buckets []Bucket
	h.Each(func(b Bucket) { total += b.Count; buckets = append(buckets, b) })
	require.Equal(t, uint64(100), total)
	require.Len(t, buckets, 2)
	require.LessOrEqual(t, buckets[0].Low, uint64(1000))
	require.GreaterOrEqual(t, buckets[0].High, uint64(1000))

	out := new(strings.Builder)
	require.NoError(t, h.WriteText(out, Scale{Factor: 0.5, Unit: "ns"}))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Contains(t, lines[0], "n=100")
	require.Contains(t, lines[0], "min=500ns")
	require.InDelta(t, 1000, float64(h.Percentile(50)), float64(tolerance(1000)))
	require.Contains(t, lines[0], fmt.Sprintf("p50=%.4gns", 0.5*float64(h.Percentile(50))))
	require.Contains(t, lines[0], "max=32000ns")
	// 1000 and 64000 are six octaves apart: 4 rows per octave, first and
	// last rows hold the data, the rows between are empty.
	rows := lines[1:]
	require.Len(t, rows, 6*rowsPerOctave+1)
	require.Contains(t, rows[0], "| 90 90.000%")
	require.Contains(t, rows[len(rows)-1], "| 10 100.000%")
	require.Contains(t, rows[1], "| 0 90.000%")
}

func BenchmarkRecord(b *testing.B) {
	h := new(Histogram)
	v := uint64(1)
	for b.Loop() {
		h.Record(v & 0xffff)
		v = v*6364136223846793005 + 1442695040888963407
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[float64]string{
		0:        "0",
		1.5:      "1.5",
		2407.4:   "2407",
		9999:     "9999",
		132700.4: "132700",
		5.786e7:  "57860000",
		1e16:     "1e+16",
		0.000123: "0.000123",
	} {
		require.Equal(t, want, formatValue(v), "%v", v)
	}
}

// TestPercentileRankOfDecimalPercent: p/100 of a decimal percentile is
// rarely exact in binary (99.9/100 is 0.9990000000000001), and the rank of
// the 99.9th percentile of 1000 values is the 999th, not the 1000th.
func TestPercentileRankOfDecimalPercent(t *testing.T) {
	for _, c := range []struct {
		p float64
		n int
	}{{99.9, 1000}, {99.9, 2000}, {99.9, 10000}, {99, 100}, {99.99, 10000}, {50, 2}, {0.1, 1000}} {
		rank := int(math.Round(c.p * float64(c.n) / 100))
		var h Histogram
		for i := 0; i < c.n; i++ {
			v := uint64(10)
			if i >= rank {
				v = 100
			}
			h.Record(v)
		}
		require.Equal(t, uint64(10), h.Percentile(c.p), "p%v of %d values: the %d-th is 10", c.p, c.n, rank)
	}
}
