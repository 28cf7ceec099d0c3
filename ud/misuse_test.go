package ud_test

import (
	"errors"
	"testing"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// A send to a nil Remote is refused with an error, at Post and at Finish;
// it does not crash and rings nothing.
func TestPostNilRemote(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	pd, cq := e.PD[0], e.CQ(0, 8)
	q, err := ud.New(pd, cq, ud.Config{SendDepth: 4, MaxInline: 16, QKey: 0x11})
	if err != nil {
		t.Fatal(err)
	}
	st, err := q.Post(1, wqebuilder.Signaled, nil)
	if !errors.Is(err, ctx.ErrInvalidArgument) {
		t.Errorf("post to a nil remote: %v, want ctx.ErrInvalidArgument", err)
	}
	if err := st.Send().Inline([]byte("x")).Finish(); !errors.Is(err, ctx.ErrInvalidArgument) {
		t.Errorf("finish of a post to a nil remote: %v", err)
	}
	if pi := q.SendQueue().ProducerIndex(); pi != 0 {
		t.Errorf("producer index %d after a refused post", pi)
	}
}
