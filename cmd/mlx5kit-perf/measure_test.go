package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/cycles"
)

// TestPeakNotBelowAverage: a steady stream of more batches than BW peak's
// windows, each message completing a fixed latency after it was posted:
// every window pays that latency over fewer messages than the whole
// stream, yet the peak reported is not below the average.
func TestPeakNotBelowAverage(t *testing.T) {
	const n, size = 1000, 8
	st := newStamps(n, 1)
	for i := range st.posted {
		st.posted[i] = uint64(i) * 10
		st.completed[i] = uint64(i)*10 + 1000
	}
	bw := rates(st, n, size, 1, cycles.Info{Counter: "rdtsc", Hz: 1e9})
	avg := bw.bytes / bw.seconds
	require.InDelta(t, float64(n*size)/10990e-9, avg, 1)
	require.GreaterOrEqual(t, bw.peakBytesSec, avg)
}
