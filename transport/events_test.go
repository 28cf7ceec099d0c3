package transport_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// TestQueueWatchEvents: a queue pair's watcher gets the events of that QP
// only; a cancelled watcher gets nothing more.
func TestQueueWatchEvents(t *testing.T) {
	f := sim.New(sim.Options{})
	defer f.Close()
	c, err := f.Open("sim0")
	require.NoError(t, err)
	defer c.Close()
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64})
	require.NoError(t, err)
	a, err := rc.New(pd, cq, rc.Config{SendDepth: 8, RecvDepth: 8})
	require.NoError(t, err)
	b, err := rc.New(pd, cq, rc.Config{SendDepth: 8, RecvDepth: 8})
	require.NoError(t, err)
	srq, err := transport.NewSharedReceiveQueue(pd, ctx.SRQConfig{Depth: 8})
	require.NoError(t, err)

	var mu sync.Mutex
	var gotA, gotB []ctx.AsyncEvent
	subA, err := a.WatchEvents(func(ev ctx.AsyncEvent) { mu.Lock(); gotA = append(gotA, ev); mu.Unlock() })
	require.NoError(t, err)
	_, err = b.WatchEvents(func(ev ctx.AsyncEvent) { mu.Lock(); gotB = append(gotB, ev); mu.Unlock() })
	require.NoError(t, err)
	_, err = a.WatchEvents(nil)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = srq.WatchEvents(func(ctx.AsyncEvent) {})
	require.NoError(t, err)

	require.NoError(t, f.FailQP(a.QPN()))
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(gotA) == 1 }, 5*time.Second, time.Millisecond)
	mu.Lock()
	require.Equal(t, ctx.EventQPFatal, gotA[0].Type)
	require.Equal(t, a.QPN(), gotA[0].QPN)
	require.Empty(t, gotB)
	mu.Unlock()

	subA.Cancel()
	require.NoError(t, f.FailQP(b.QPN()))
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(gotB) == 1 }, 5*time.Second, time.Millisecond)
	mu.Lock()
	require.Len(t, gotA, 1)
	require.Equal(t, b.QPN(), gotB[0].QPN)
	mu.Unlock()
}

// newWatched returns an RC queue pair and an SRQ on a fresh software HCA,
// closed with it at the end of the test.
func newWatched(t *testing.T) (*rc.QP, *transport.SharedReceiveQueue) {
	t.Helper()
	f := sim.New(sim.Options{})
	t.Cleanup(func() { _ = f.Close() })
	c, err := f.Open("sim0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64})
	require.NoError(t, err)
	a, err := rc.New(pd, cq, rc.Config{SendDepth: 8, RecvDepth: 8})
	require.NoError(t, err)
	srq, err := transport.NewSharedReceiveQueue(pd, ctx.SRQConfig{Depth: 8})
	require.NoError(t, err)
	return a, srq
}

// TestWatchEventsClosed: WatchEvents refuses a closed queue pair or SRQ
// with ctx.ErrClosed.
func TestWatchEventsClosed(t *testing.T) {
	a, srq := newWatched(t)
	require.NoError(t, a.Close())
	require.NoError(t, srq.Close())

	sub, err := a.WatchEvents(func(ctx.AsyncEvent) {})
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.Nil(t, sub)
	sub, err = srq.WatchEvents(func(ctx.AsyncEvent) {})
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.Nil(t, sub)
}

// TestWatchEventsEndsWithClose: closing a queue pair (or SRQ) ends its
// subscriptions, so the router holds their functions no more; a
// subscription cancelled before the close is not held either.
func TestWatchEventsEndsWithClose(t *testing.T) {
	a, srq := newWatched(t)

	// watched subscribes a function holding an object with a finalizer,
	// and returns the channel the finalizer closes.
	watched := func(watch func(func(ctx.AsyncEvent)) (*ctx.EventSubscription, error), cancel bool) chan struct{} {
		gone := make(chan struct{})
		held := new([64]byte)
		runtime.SetFinalizer(held, func(*[64]byte) { close(gone) })
		sub, err := watch(func(ctx.AsyncEvent) { _ = held[0] })
		require.NoError(t, err)
		if cancel {
			sub.Cancel()
		}
		return gone
	}
	// collected collects up to tries times, 5 ms apart, and says whether
	// the finalizer ran: a finding that it did waits up to 1,000 tries
	// (the finalizer's goroutine may be kept from running on a loaded
	// machine), one that it did not looks 20 times.
	collected := func(gone chan struct{}, tries int) bool {
		for range tries {
			runtime.GC()
			select {
			case <-gone:
				return true
			case <-time.After(5 * time.Millisecond):
			}
		}
		return false
	}

	// Cancelled while the queue pair is open: nothing holds it.
	require.True(t, collected(watched(a.WatchEvents, true), 1000), "a cancelled subscription is still held")
	// Not cancelled: held until the close.
	goneQP := watched(a.WatchEvents, false)
	goneSRQ := watched(srq.WatchEvents, false)
	require.False(t, collected(goneQP, 20))
	require.NoError(t, a.Close())
	require.NoError(t, srq.Close())
	require.True(t, collected(goneQP, 1000), "the subscription of a closed queue pair is still held")
	require.True(t, collected(goneSRQ, 1000), "the subscription of a closed SRQ is still held")
}
