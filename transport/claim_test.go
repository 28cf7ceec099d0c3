package transport_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/seam"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// openCQs opens a Context on a Fabric of its own with n completion queues,
// made in order (a Context closes the last made first). It closes them
// when the test ends unless the test failed: a deadlocked test leaves the
// Context's lock held.
func openCQs(t *testing.T, n int) (*ctx.Context, []*ctx.CompletionQueue) {
	t.Helper()
	f := sim.New(sim.Options{})
	c, err := f.Open("sim0")
	require.NoError(t, err)
	cqs := make([]*ctx.CompletionQueue, n)
	for i := range cqs {
		cqs[i], err = c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16})
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			require.NoError(t, c.Close())
			require.NoError(t, f.Close())
		}
	})
	return c, cqs
}

// within runs f on a goroutine of its own and fails the test if it has not
// returned after a while.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: deadlocked", what)
	}
}

// TestNewCQWhileItsContextCloses: a CQ that closes after NewCQ found it
// open and before NewCQ registered the hook that forgets its ring poller
// gets the hook run at once (seam.OnClose on a closed object), on NewCQ's
// goroutine; the hook takes the lock of the claims, which NewCQ held
// across seam.OnClose, and NewCQ deadlocked with it (and every NewCQ and
// NewPoller after it). NewCQ returns, and the closed CQ is not claimed.
func TestNewCQWhileItsContextCloses(t *testing.T) {
	c, cqs := openCQs(t, 2)
	// The Context closes cqs[1] first; its hook holds the Context's lock
	// while NewCQ looks at cqs[0], still open.
	inHook := make(chan struct{})
	seam.OnClose(cqs[1], func() {
		close(inHook)
		time.Sleep(100 * time.Millisecond)
	})
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	<-inHook
	within(t, "NewCQ while its Context closes", func() {
		_, _ = transport.NewCQ(cqs[0])
	})
	require.NoError(t, <-closed)
	_, err := transport.NewCQ(cqs[0])
	require.ErrorIs(t, err, ctx.ErrClosed)
	_, err = transport.NewPoller(cqs[0])
	require.ErrorIs(t, err, ctx.ErrClosed)
}

// TestNewCQWhileAnotherCQCloses: NewCQ for one CQ while another CQ of the
// same Context, with a ring poller, closes. The closing CQ runs its hook
// with the Context's lock held, and the hook takes the lock of the claims;
// NewCQ held that lock and waited for the Context's in seam.OnClose: the
// two deadlocked.
func TestNewCQWhileAnotherCQCloses(t *testing.T) {
	_, cqs := openCQs(t, 2)
	// Hooks run in order: this one, with the Context's lock held, then
	// the one NewCQ registers on cqs[0].
	inHook := make(chan struct{})
	seam.OnClose(cqs[0], func() {
		close(inHook)
		time.Sleep(100 * time.Millisecond)
	})
	_, err := transport.NewCQ(cqs[0])
	require.NoError(t, err)
	closed := make(chan error, 1)
	go func() { closed <- cqs[0].Close() }()
	<-inHook
	within(t, "NewPoller while another CQ closes", func() {
		p, err := transport.NewPoller(cqs[1])
		require.NoError(t, err)
		require.NoError(t, p.Close())
	})
	require.NoError(t, <-closed)
	_, err = transport.NewPoller(cqs[0])
	require.ErrorIs(t, err, ctx.ErrClosed)
}
