package ctx_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/seam"
)

// TestOnClose runs the close hooks of QPs and SRQs once, when the object
// closes directly or with a parent, before the provider destroys it, and
// at once for an object closed already.
func TestOnClose(t *testing.T) {
	f, c := openFake(t)
	w := build(t, c)
	var ran []string
	hook := func(name string) func() {
		return func() {
			// The provider has not destroyed the object yet, and Closed
			// says it is closed.
			ran = append(ran, name+" before "+f.log[len(f.log)-1])
		}
	}
	f.log = append(f.log, "start")
	seam.OnClose(w.qp1, hook("qp1"))
	seam.OnClose(w.qp1, func() { require.True(t, w.qp1.Closed()); ran = append(ran, "qp1 again") })
	seam.OnClose(w.qp2, hook("qp2"))
	seam.OnClose(w.srq, hook("srq"))

	require.NoError(t, w.qp1.Close())
	require.Equal(t, []string{"qp1 before start", "qp1 again"}, ran)
	require.NoError(t, w.qp1.Close())
	require.Len(t, ran, 2, "a hook runs once")

	// The Context takes the DCT down, then its SRQ.
	require.NoError(t, c.Close())
	require.Equal(t, []string{"qp2 before close QP6", "srq before close QP7"}, ran[2:])

	// Closed already: the hook runs at once.
	seam.OnClose(w.qp2, func() { ran = append(ran, "late") })
	require.Equal(t, "late", ran[len(ran)-1])
}

// TestOnCloseOtherType refuses a close hook for an object that has none.
func TestOnCloseOtherType(t *testing.T) {
	_, c := openFake(t)
	require.Panics(t, func() { seam.OnClose(c, func() {}) })
}

// TestOnCloseRemove: a removed hook does not run and is not kept; removing
// it again, or after the close, does nothing.
func TestOnCloseRemove(t *testing.T) {
	_, c := openFake(t)
	w := build(t, c)
	var ran []string
	keep := seam.OnClose(w.cq1, func() { ran = append(ran, "kept") })
	for range 1000 {
		seam.OnClose(w.cq1, func() { ran = append(ran, "removed") })()
	}
	require.Equal(t, 1, ctx.CloseHooks(w.cq1), "the removed hooks are not kept")
	gone := seam.OnClose(w.cq1, func() { ran = append(ran, "removed") })
	gone()
	gone()
	require.NoError(t, w.qp1.Close())
	require.NoError(t, w.cq1.Close())
	require.Equal(t, []string{"kept"}, ran)
	keep()
	require.Equal(t, 0, ctx.CloseHooks(w.cq1))
}
