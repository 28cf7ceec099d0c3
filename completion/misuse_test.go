package completion_test

import (
	"context"
	"errors"
	"iter"
	"testing"
	"time"

	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// Completions with a nil or zero Notifier (or a nil Poller, also a nil
// pointer of a Poller type) yields an error
// wrapping ctx.ErrInvalidArgument, as NewNotifier and NewPoller refuse nil,
// instead of crashing in the loop.
func TestCompletionsNilArguments(t *testing.T) {
	f := sim.New(sim.Options{})
	t.Cleanup(func() { _ = f.Close() })
	c, err := f.Open("sim0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 4, EventChannel: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := transport.NewPoller(cq)
	if err != nil {
		t.Fatal(err)
	}
	n, err := completion.NewNotifier(cq, p.CQ())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// A deadline: with a nil poller the loop would otherwise wait for a
	// completion that never comes.
	cx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for name, run := range map[string]func() (any, error){
		"nil notifier":          firstError(completion.Completions[*transport.Completion](cx, nil, p)),
		"nil poller":            firstError(completion.Completions[*transport.Completion](cx, n, nil)),
		"nil *transport.Poller": firstError(completion.Completions[*transport.Completion](cx, n, (*transport.Poller)(nil))),
		"nil *monocq.CQ":        firstError(completion.Completions[*monocq.CQE](cx, n, (*monocq.CQ)(nil))),
		// A transport Poller not made by NewPoller has no ring: it was
		// refused as a nil one is, rather than panicking while its ring
		// was named in ErrMismatch's message.
		"zero *transport.Poller": firstError(completion.Completions[*transport.Completion](cx, n, &transport.Poller{})),
		// A zero Notifier (not made by NewNotifier), as Wait on it
		// returns: it has no ring to pair the poller with.
		"zero notifier, transport poller": firstError(completion.Completions[*transport.Completion](cx, &completion.Notifier{}, p)),
		"zero notifier, monocq ring":      firstError(completion.Completions[*monocq.CQE](cx, &completion.Notifier{}, p.CQ())),
	} {
		panicked, got := run()
		if panicked != nil {
			t.Errorf("%s: panic: %v", name, panicked)
		}
		if !errors.Is(got, ctx.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ctx.ErrInvalidArgument", name, got)
		}
	}
}

// firstError returns a function that runs seq to its first element and
// returns what it panicked with, or its first element's error.
func firstError[C any](seq iter.Seq2[C, error]) func() (any, error) {
	return func() (panicked any, got error) {
		defer func() { panicked = recover() }()
		for _, err := range seq {
			got = err
			break
		}
		return nil, got
	}
}

// NewNotifier of a zero CompletionQueue (not made by CreateCompletionQueue)
// is refused with ctx.ErrInvalidArgument, as of a nil one; it asked the
// zero CQ's missing provider handle for its event channel and panicked.
func TestNewNotifierZeroCQ(t *testing.T) {
	n, err := completion.NewNotifier(&ctx.CompletionQueue{}, &monocq.CQ{})
	if !errors.Is(err, ctx.ErrInvalidArgument) {
		t.Fatalf("NewNotifier of a zero CQ: %v, want ctx.ErrInvalidArgument", err)
	}
	if n != nil {
		t.Fatal("a Notifier with the error")
	}
}
