package histogram

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Scale converts recorded values to the unit a rendering shows: a value v
// is shown as v*Factor Unit. The zero Scale shows raw values with no unit.
type Scale struct {
	Factor float64
	Unit   string
}

func (s Scale) apply(v float64) float64 {
	if s.Factor == 0 {
		return v
	}
	return v * s.Factor
}

// formatValue prints a scaled value with four significant digits, without
// an exponent up to 10^15 (large values print as integers).
func formatValue(v float64) string {
	if math.Abs(v) >= 1e4 && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// Summary is the one-line digest of a histogram: count, min, p50, p99,
// p99.9, max and mean, scaled.
func (h *Histogram) Summary(s Scale) string {
	if h.total == 0 {
		return "n=0"
	}
	f := func(v float64) string { return formatValue(s.apply(v)) + s.Unit }
	return fmt.Sprintf("n=%d min=%s p50=%s p99=%s p99.9=%s max=%s mean=%s",
		h.total, f(float64(h.min)), f(float64(h.Percentile(50))), f(float64(h.Percentile(99))),
		f(float64(h.Percentile(99.9))), f(float64(h.max)), f(h.Mean()))
}

// rowsPerOctave is how many rows a power of two takes in the text
// rendering.
const rowsPerOctave = 4

// row is one line of the text rendering: values in [low, high].
type row struct {
	low, high uint64
	count     uint64
}

// rows coalesces the buckets into rowsPerOctave rows per power of two, from
// the row of the smallest value to the row of the largest, empty rows
// included so the shape reads true.
func (h *Histogram) rows() []row {
	var out []row
	group := SubBuckets / rowsPerOctave
	h.Each(func(b Bucket) {
		i := index(b.Low) / group
		lo, _ := bucketRange(i * group)
		loEnd, w := bucketRange(i*group + group - 1)
		hi := loEnd + w - 1
		if n := len(out); n > 0 && out[n-1].low == lo {
			out[n-1].count += b.Count
			return
		}
		if n := len(out); n > 0 {
			// Fill the empty rows between the previous row and this one.
			for j := index(out[n-1].low)/group + 1; j < i; j++ {
				l, _ := bucketRange(j * group)
				le, lw := bucketRange(j*group + group - 1)
				out = append(out, row{low: l, high: le + lw - 1})
			}
		}
		out = append(out, row{low: lo, high: hi, count: b.Count})
	})
	return out
}

// WriteText writes the summary line and a bar chart with rowsPerOctave rows
// per power of two: each row shows its value range, a bar proportional to
// its count, the count and the cumulative percentage.
func (h *Histogram) WriteText(w io.Writer, s Scale) error {
	if _, err := fmt.Fprintln(w, h.Summary(s)); err != nil {
		return err
	}
	rows := h.rows()
	var peak uint64
	for _, r := range rows {
		peak = max(peak, r.count)
	}
	const barWidth = 40
	var cum uint64
	for _, r := range rows {
		cum += r.count
		bar := 0
		if peak > 0 {
			bar = int((r.count*barWidth + peak - 1) / peak)
		}
		lo := formatValue(s.apply(float64(r.low)))
		hi := formatValue(s.apply(float64(r.high))) + s.Unit
		_, err := fmt.Fprintf(w, "%10s - %-12s |%-*s| %d %.3f%%\n", lo, hi, barWidth, strings.Repeat("#", bar), r.count, 100*float64(cum)/float64(h.total))
		if err != nil {
			return err
		}
	}
	return nil
}

// String returns the text rendering with raw values.
func (h *Histogram) String() string {
	var b strings.Builder
	_ = h.WriteText(&b, Scale{})
	return b.String()
}
