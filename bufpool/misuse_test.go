package bufpool_test

import (
	"errors"
	"testing"

	"github.com/mlx5kit/mlx5kit/bufpool"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// A closed pool hands out no buffer: a buffer pushed back after Close is
// refused, Pop finds none, and PostReceives posts no receive over the
// unmapped, deregistered memory.
func TestClosedPoolHandsOutNothing(t *testing.T) {
	f := sim.New(sim.Options{})
	defer f.Close()
	pd := newPD(t, f, "")
	cq, err := pd.Context().CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := rc.New(pd, cq, rc.Config{SendDepth: 1, RecvDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	p, err := bufpool.New(pd, 2, 64, 0)
	if err != nil {
		t.Fatal(err)
	}
	i, ok := p.Pop()
	if !ok {
		t.Fatal("pop")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Push(i); err == nil {
		t.Error("Push after Close accepted")
	}
	if n, err := bufpool.PostReceives(p, &qp.Queue, 1); n != 0 || !errors.Is(err, ctx.ErrClosed) {
		t.Errorf("PostReceives after Close: %d posted, %v; want 0, ctx.ErrClosed", n, err)
	}
	if got := qp.RecvOutstanding(); got != 0 {
		t.Errorf("%d receives posted from a closed pool", got)
	}
	if j, ok := p.Pop(); ok {
		t.Errorf("Pop after Close handed out buffer %d (at %#x, unmapped)", j, p.Addr(j))
	}
}

// Repost of an index that names no buffer says so (ErrBadIndex), rather
// than that the buffer is not in use; and a nil pool or receiver is
// refused, not dereferenced.
func TestRepostBadIndexAndNilPool(t *testing.T) {
	f := sim.New(sim.Options{})
	defer f.Close()
	pd := newPD(t, f, "")
	cq, err := pd.Context().CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := rc.New(pd, cq, rc.Config{SendDepth: 1, RecvDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	p, err := bufpool.New(pd, 2, 64, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, i := range []int{-1, 2, 99} {
		if err := bufpool.Repost(p, &qp.Queue, i); !errors.Is(err, bufpool.ErrBadIndex) {
			t.Errorf("Repost of buffer %d: %v, want ErrBadIndex", i, err)
		}
	}
	if err := bufpool.Repost(p, &qp.Queue, 1); !errors.Is(err, bufpool.ErrNotInUse) {
		t.Errorf("Repost of a free buffer: %v, want ErrNotInUse", err)
	}
	if n, err := bufpool.PostReceives(nil, &qp.Queue, 1); n != 0 || !errors.Is(err, ctx.ErrInvalidArgument) {
		t.Errorf("PostReceives of a nil pool: %d, %v; want 0, ctx.ErrInvalidArgument", n, err)
	}
	if err := bufpool.Repost(nil, &qp.Queue, 0); !errors.Is(err, ctx.ErrInvalidArgument) {
		t.Errorf("Repost of a nil pool: %v, want ctx.ErrInvalidArgument", err)
	}
	// A nil receiver of a receiver type is refused, and takes no buffer.
	if n, err := bufpool.PostReceives(p, (*transport.Queue)(nil), 1); n != 0 || !errors.Is(err, ctx.ErrInvalidArgument) {
		t.Errorf("PostReceives on a nil *transport.Queue: %d, %v; want 0, ctx.ErrInvalidArgument", n, err)
	}
	if n, err := bufpool.PostReceives(p, (*transport.SharedReceiveQueue)(nil), 1); n != 0 || !errors.Is(err, ctx.ErrInvalidArgument) {
		t.Errorf("PostReceives on a nil *transport.SharedReceiveQueue: %d, %v; want 0, ctx.ErrInvalidArgument", n, err)
	}
	if p.Free() != 2 {
		t.Errorf("%d buffers free after refused posts, want 2", p.Free())
	}
	i, ok := p.Pop()
	if !ok {
		t.Fatal("pop from a pool of 2")
	}
	if err := bufpool.Repost(p, (*transport.Queue)(nil), i); !errors.Is(err, ctx.ErrInvalidArgument) {
		t.Errorf("Repost on a nil *transport.Queue: %v, want ctx.ErrInvalidArgument", err)
	}
}

// TestSGENegativeLength checks that SGE refuses a negative byte count by
// panicking, as it refuses an index out of range (and as a slice
// expression does), rather than handing out the whole buffer.
func TestSGENegativeLength(t *testing.T) {
	f := sim.New(sim.Options{})
	defer f.Close()
	pd := newPD(t, f, "")
	p, err := bufpool.New(pd, 2, 64, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, n := range []int{-1, -64, -1 << 40} {
		func() {
			defer func() {
				if r := recover(); r != "bufpool: negative length" {
					t.Errorf("SGE(0, %d): recovered %v, want panic \"bufpool: negative length\"", n, r)
				}
			}()
			addr, length, _ := p.SGE(0, n)
			t.Errorf("SGE(0, %d) = %#x, %d; want a panic", n, addr, length)
		}()
	}
	if _, length, _ := p.SGE(1, 0); length != 0 {
		t.Errorf("SGE(1, 0) length %d, want 0", length)
	}
}
