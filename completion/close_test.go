package completion_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// notifierOnSim opens a device of a new software HCA in Engine mode and
// returns it with a CQ that has an event channel, the CQ's Poller and a
// Notifier over it; the device and its fabric close when the test ends.
func notifierOnSim(t *testing.T) (*ctx.Context, *ctx.CompletionQueue, *transport.Poller, *completion.Notifier) {
	t.Helper()
	f := sim.New(sim.Options{Mode: sim.Engine})
	t.Cleanup(func() { _ = f.Close() })
	c, err := f.Open("sim0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8, EventChannel: true})
	require.NoError(t, err)
	p, err := transport.NewPoller(cq)
	require.NoError(t, err)
	n, err := completion.NewNotifier(cq, p.CQ())
	require.NoError(t, err)
	return c, cq, p, n
}

// TestWaitEndsWhenCQCloses closes the completion queue (directly, or with
// its Context) on another goroutine while the owner sleeps in Wait or in
// the Completions iterator with a context that never ends, as a program
// stops its loop by closing from elsewhere: the wait must end with an
// error wrapping ctx.ErrClosed instead of sleeping forever.
func TestWaitEndsWhenCQCloses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close func(c *ctx.Context, cq *ctx.CompletionQueue) error
		iter  bool
	}{
		{"CQ", func(_ *ctx.Context, cq *ctx.CompletionQueue) error { return cq.Close() }, false},
		{"Context", func(c *ctx.Context, _ *ctx.CompletionQueue) error { return c.Close() }, false},
		{"CQ under Completions", func(_ *ctx.Context, cq *ctx.CompletionQueue) error { return cq.Close() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, cq, p, n := notifierOnSim(t)
			defer n.Close()

			done := make(chan error, 1)
			go func() {
				if !tc.iter {
					done <- n.Wait(context.Background())
					return
				}
				for _, err := range completion.Completions(context.Background(), n, p) {
					if err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			time.Sleep(50 * time.Millisecond) // let it go to sleep
			require.NoError(t, tc.close(c, cq))
			select {
			case err := <-done:
				require.ErrorIs(t, err, ctx.ErrClosed)
			case <-time.After(5 * time.Second):
				t.Fatal("the wait did not end when its CQ closed")
			}
		})
	}
}

// TestNotifierCloseEndsWait closes the Notifier (twice at once) on other
// goroutines while its owner sleeps in Wait with a context that never
// ends: the wait must end with an error wrapping ctx.ErrClosed that says
// the notifier closed, not the descriptor's "use of closed file", and the
// race detector must find nothing between Close and the sleeping Wait.
func TestNotifierCloseEndsWait(t *testing.T) {
	_, cq, _, n := notifierOnSim(t)

	done := make(chan error, 1)
	go func() { done <- n.Wait(context.Background()) }()
	time.Sleep(20 * time.Millisecond) // let it go to sleep (or not: the result is the same)
	closed := make(chan error, 2)
	for range 2 {
		go func() { closed <- n.Close() }()
	}
	for range 2 {
		require.NoError(t, <-closed)
	}
	select {
	case err := <-done:
		require.ErrorIs(t, err, ctx.ErrClosed)
		require.ErrorContains(t, err, "notifier")
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not end when its Notifier closed")
	}
	// The owner's next Wait says the same at once, and the CQ, still
	// open, closes without waking anything that is gone.
	require.ErrorIs(t, n.Wait(context.Background()), ctx.ErrClosed)
	require.NoError(t, cq.Close())
}

// TestCompletionsEndsWhenPollerCloses closes the transport Poller while a
// completion of its CQ waits in the ring: the CQ is open and the Notifier
// finds the completion ready, but the closed Poller takes none, so the
// iterator must end with an error wrapping ctx.ErrClosed instead of
// spinning between Wait and Poll for ever.
func TestCompletionsEndsWhenPollerCloses(t *testing.T) {
	p := newRCPair(t, 8)
	poller, err := transport.NewPoller(p.cqA)
	require.NoError(t, err)
	require.NoError(t, poller.Add(p.a))
	n, err := completion.NewNotifier(p.cqA, poller.CQ())
	require.NoError(t, err)
	defer n.Close()
	st, err := p.a.Post(1, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, st.RdmaWrite(uint64(p.mr.Addr()), p.mr.RKey()).Inline([]byte{1}).FinishBlueFlame())
	require.NoError(t, n.WaitTimeout(5*time.Second))
	require.NoError(t, poller.Close())

	done := make(chan error, 1)
	go func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for wc, err := range completion.Completions(c, n, poller) {
			if wc != nil {
				done <- errors.New("a closed Poller handed a completion over")
				return
			}
			done <- err
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, ctx.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Completions over a closed Poller did not end")
	}
	require.Equal(t, 1, poller.CQ().Ready(8), "the completion stays in the ring")
}

// TestWaitDoesNotArmClosedCQ: Wait on a closed CQ returns an error
// wrapping ctx.ErrClosed without arming it: the arm word would go to the
// doorbell record and the UAR doorbell of a destroyed CQ, whose number the
// device may have given to another CQ of the Context.
func TestWaitDoesNotArmClosedCQ(t *testing.T) {
	_, cq, p, n := notifierOnSim(t)
	defer n.Close()
	d := provider.CQDescriptor(cq)
	arm := (*uint32)(unsafe.Add(d.DBRec, prm.CQDoorbellRecordArm*4))
	before := *arm
	n.SolicitedOnly(true) // an arm word other than the record's first (0)
	require.NoError(t, cq.Close())
	require.ErrorIs(t, n.WaitTimeout(time.Second), ctx.ErrClosed)
	require.Equal(t, before, *arm, "the closed CQ was armed")
	runtime.KeepAlive(p)
}

// TestCompletionsOverAClosedPollerWithAnEmptyRing: Completions over a
// transport Poller closed before it started, with no completion in the
// ring, ends with an error wrapping ctx.ErrClosed at once, as it does when
// a completion waits in the ring; before, it slept until a completion
// came or the context ended (with context.Background, for ever).
func TestCompletionsOverAClosedPollerWithAnEmptyRing(t *testing.T) {
	_, _, p, n := notifierOnSim(t)
	defer n.Close()
	require.NoError(t, p.Close())
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []error
	for wc, err := range completion.Completions(c, n, p) {
		require.Nil(t, wc)
		got = append(got, err)
	}
	require.Len(t, got, 1)
	require.ErrorIs(t, got[0], ctx.ErrClosed)
	require.NoError(t, c.Err(), "it waited for the context to end")
}
