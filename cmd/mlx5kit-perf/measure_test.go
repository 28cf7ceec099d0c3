package main

import (
	"testing"
	"time"

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
		st.done[i] = i + 1
	}
	bw := rates(st, n, size, 1, cycles.Info{Counter: "rdtsc", Hz: 1e9})
	avg := bw.bytes / bw.seconds
	require.InDelta(t, float64(n*size)/10990e-9, avg, 1)
	require.GreaterOrEqual(t, bw.peakBytesSec, avg)
}

// TestPeakCountsOnlyCompletedMessages: over two queue pairs the batches
// complete out of the order they were posted (here batch 2, the short last
// one, before batch 1); a window counts the messages completed by its end,
// not every batch numbered up to the one completed last.
func TestPeakCountsOnlyCompletedMessages(t *testing.T) {
	const n, batch, size = 10, 4, 1 // batches of 4, 4 and 2 messages
	st := newStamps(n, batch)
	copy(st.posted, []uint64{0, 1, 2})
	// Completions in the order polled: batch 0 at 10, batch 2 at 12,
	// batch 1 at 1000.
	copy(st.completed, []uint64{10, 12, 1000})
	copy(st.done, []int{4, 6, 10})
	bw := rates(st, n, size, batch, cycles.Info{Counter: "rdtsc", Hz: 1e9})
	// The best window is [0, 12]: 6 messages (batches 0 and 2) in 12 ns.
	require.InDelta(t, 6/12e-9, bw.peakBytesSec, 1)
	require.InDelta(t, 1e-6, bw.seconds, 1e-12, "the stream ends with its last completion")
}

// TestMeasureRounds: the rounds of a timed ping-pong against a peer in
// another process (measureRounds) stop once the time is up: a round
// starts only while less than the time has passed since the first round
// began, each after next(true), and next(false) ends them. Steps of at
// least 1 ms in rounds of 4, marks of 50 ms and 200 ms of time leave room
// for 4 rounds at most (a loaded machine makes them longer, so fewer). The first
// step of each round, which meets the peer coming from the round mark,
// is not measured, and the time of the marks (next) is not counted:
// before, a round mark's TCP wake-up went into the average.
func TestMeasureRounds(t *testing.T) {
	counter := cycles.Frequency()
	const iters = 4
	var l latency
	var marks []bool
	steps := 0
	const markTime = 50 * time.Millisecond
	next := func(more bool) error {
		marks = append(marks, more)
		time.Sleep(markTime) // a round mark's TCP wake-up, say
		return nil
	}
	tooMany := func() bool { return len(marks) > 50 } // a loop that ignored the time ends here
	ran, n, total, err := measureRounds(&l, 3, iters, uint64(counter.Ticks(200*time.Millisecond)), tooMany, next, func(uint32) error {
		steps++
		time.Sleep(time.Millisecond)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, steps-3, ran, "the warmup is not counted")
	require.Zero(t, (steps-3)%iters, "whole rounds")
	rounds := (steps - 3) / iters
	require.Equal(t, rounds*(iters-1), n, "the warmup and each round's first step are not measured")
	require.Equal(t, uint64(n), l.H.Count())
	require.GreaterOrEqual(t, rounds, 1)
	require.LessOrEqual(t, rounds, 4, "rounds went on after the time was up")
	require.Len(t, marks, rounds+1)
	for i, m := range marks {
		require.Equal(t, i < rounds, m, "mark %d", i)
	}
	took := time.Duration(counter.Nanoseconds(float64(total)))
	require.GreaterOrEqual(t, took, time.Duration(n)*time.Millisecond, "each measured step's time is counted")
	require.Less(t, took, time.Duration(rounds)*markTime, "the marks' time is not counted (%d rounds, %v)", rounds, took)

	// stop ends the rounds after the first, which always runs.
	marks = nil
	_, n, _, err = measureRounds(&latency{}, 0, iters, 1<<62, func() bool { return true }, next, func(uint32) error { return nil })
	require.NoError(t, err)
	require.Equal(t, iters-1, n)
	require.Equal(t, []bool{true, false}, marks)

	// Rounds of one iteration measure it (none would be left).
	marks = nil
	_, n, _, err = measureRounds(&latency{}, 0, 1, 1<<62, func() bool { return len(marks) >= 3 }, next, func(uint32) error { return nil })
	require.NoError(t, err)
	require.Equal(t, 3, n)
}
