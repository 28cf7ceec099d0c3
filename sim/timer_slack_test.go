package sim

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	tsc "github.com/mlx5kit/mlx5kit/internal/cycles"
)

// calibratedFabric returns an Engine-mode Fabric with its engine held off
// and its lock held (until the test's cleanup), whose round clock it read
// until the time-stamp counter's rate was measured (clockRead); it fails
// after 5 s, and skips the test where the counter is not trusted (every
// timer reads the clock there).
func calibratedFabric(t *testing.T) *Fabric {
	t.Helper()
	f := newEnv(t, Options{Mode: Engine}).f
	holdEngine(t, f)
	f.mu.Lock()
	t.Cleanup(f.mu.Unlock) // before the env's, which closes f
	if !f.useTicks {
		t.Skip("the time-stamp counter is not trusted here: every timer reads the clock")
	}
	for end := time.Now().Add(5 * time.Second); f.slackTicks == 0; {
		require.True(t, time.Now().Before(end), "the counter's rate is never measured")
		f.roundTimed = false
		f.readRoundClock()
		time.Sleep(time.Millisecond)
	}
	return f
}

// TestTimerSlackBounds: a deadline set without a clock read (deadlineAfter)
// is never earlier than the clock says and at most timerSlack later, and
// the time a timer is compared with (timerNow) is never later than the
// clock and at most half timerSlack older. A pause longer than timerSlack
// makes both read the clock again.
func TestTimerSlackBounds(t *testing.T) {
	f := calibratedFabric(t)
	const d = int64(time.Millisecond)
	slack := int64(timerSlack)
	cached := 0
	// Plain comparisons: an assertion call takes longer than the slack.
	for i := 0; i < 20000; i++ {
		f.roundTimed = false // a new round, which has not read the clock
		before := f.now()
		x := f.deadlineAfter(d)
		n := f.timerNow()
		after := f.now()
		switch {
		case x < before+d:
			t.Fatalf("a deadline set early: %d, the clock %d before", x-d, before)
		case n > after:
			t.Fatalf("a time later than the clock: %d, the clock %d after", n, after)
		// A read within half the slack, the counter's rate measured to a
		// few percent: a microsecond of margin.
		case x > after+d+slack+int64(time.Microsecond):
			t.Fatalf("a deadline more than timerSlack late: %d, the clock %d after", x-d, after)
		case n < before-slack/2-int64(time.Microsecond):
			t.Fatalf("a time more than half timerSlack old: %d, the clock %d before", n, before)
		}
		if !f.roundTimed {
			cached++
		}
	}
	if os.Getenv("MLX5KIT_EMULATED") == "" {
		// Under an emulated CPU (qemu-user) a round of this loop takes
		// about as long as the slack.
		require.Greater(t, cached, 10000, "most rounds within the slack read no clock (slackTicks %d)", f.slackTicks)
	}

	f.roundTimed = false
	before := f.now()
	time.Sleep(10 * timerSlack)
	require.GreaterOrEqual(t, f.timerNow(), before+10*slack, "after a pause the clock is read again")
	f.roundTimed = false
	before = f.now()
	time.Sleep(10 * timerSlack)
	require.GreaterOrEqual(t, f.deadlineAfter(d), before+10*slack+d, "after a pause the clock is read again")
}

// TestSharedRNRDelayAfterQuietPeriod is TestRNRDelayAfterQuietPeriod
// between processes: the requester's RNR wait (deadlineAfter) after its
// polling loop paused must last one RNR delay from the post.
func TestSharedRNRDelayAfterQuietPeriod(t *testing.T) {
	e1, e2 := sharedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	e1.connectRC(a, b, 1, 22) // rnr_retry 1, timer code 22 = 20.48 ms; b has no receive
	rnrDelayAfterQuietPeriod(t, e1, a)
}

// TestTimerSlackPauseInsideClockRead: a goroutine paused between the
// counter and the clock reads of readRoundClock (before the clock read,
// or after it) leaves no deadline set early: the time's age is counted
// from the counter read before the clock. (Counted from one read after
// it, a 200 µs pause before that read set a 1 ms timer 0.2 ms early.)
func TestTimerSlackPauseInsideClockRead(t *testing.T) {
	f := calibratedFabric(t)
	const d = int64(time.Millisecond)
	for _, pauseAfterClock := range []bool{false, true} {
		t0 := tsc.Now()
		if !pauseAfterClock {
			time.Sleep(200 * time.Microsecond)
		}
		f.roundAt = f.now()
		if pauseAfterClock {
			time.Sleep(200 * time.Microsecond)
		}
		f.clockRead(t0, tsc.Now())
		f.roundTimed = false
		before := f.now()
		require.GreaterOrEqual(t, f.deadlineAfter(d), before+d, "a deadline set early (pause after the clock read: %v)", pauseAfterClock)
		require.LessOrEqual(t, f.timerNow(), f.now())
	}
}
