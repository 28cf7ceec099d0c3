package completion_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// Completions with a nil Notifier (or a nil Poller) yields an error
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
	for name, seq := range map[string]func(func(*transport.Completion, error) bool){
		"nil notifier": completion.Completions[*transport.Completion](cx, nil, p),
		"nil poller":   completion.Completions[*transport.Completion](cx, n, nil),
	} {
		var got error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panic: %v", name, r)
				}
			}()
			for _, err := range seq {
				got = err
				break
			}
		}()
		if !errors.Is(got, ctx.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ctx.ErrInvalidArgument", name, got)
		}
	}
}
