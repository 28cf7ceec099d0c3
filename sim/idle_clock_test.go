package sim

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestRNRDelayAfterQuietPeriod: a SEND posted after the polling loop that
// drives the model did something else for a while meets an empty RQ; with
// rnr_retry 1 and a 20.48 ms RNR timer its error completion must not come
// before one RNR delay has passed since the post. A round that took its
// time from an earlier round (before the pause) would set the timer in
// the past.
func TestRNRDelayAfterQuietPeriod(t *testing.T) {
	e := newEnv(t, Options{Mode: Engine})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	e.connectRC(a, b, 1, 22) // rnr_retry 1, timer code 22 = 20.48 ms
	rnrDelayAfterQuietPeriod(t, e, a)
}

// rnrDelayAfterQuietPeriod runs the rounds of e (its engine held off) on
// this goroutine, pauses, posts a SEND on a (whose peer has no receive,
// rnr_retry 1, RNR timer code 22) and asserts that its RNR_RETRY_EXC
// completion comes one RNR delay after the post or later.
func rnrDelayAfterQuietPeriod(t *testing.T, e *env, a *testQP) {
	t.Helper()
	holdEngine(t, e.f)
	for i := 0; i < 100; i++ { // empty rounds, run by this loop
		e.c.Idle()
		e.f.drivenAt.Store(math.MaxInt64 / 2)
	}
	time.Sleep(100 * time.Millisecond) // the loop did something else
	posted := time.Now()
	i := a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("nobody listens")))
	for end := time.Now().Add(10 * time.Second); ; {
		if c, ok := a.scq.poll(); ok {
			took := time.Since(posted)
			requireErr(t, c, prm.CQEReqErr, prm.SyndromeRNRRetryExc, i)
			require.GreaterOrEqual(t, took, ctx.RNRTimerDuration(22),
				"RNR retries exceeded %v after the post, before one RNR delay", took)
			return
		}
		require.True(t, time.Now().Before(end), "no completion")
		e.c.Idle()
		e.f.drivenAt.Store(math.MaxInt64 / 2)
	}
}
