package ctx_test

import (
	"testing"

	"github.com/stretchr/testify/require"
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
	w.qp1.OnClose(hook("qp1"))
	w.qp1.OnClose(func() { require.True(t, w.qp1.Closed()); ran = append(ran, "qp1 again") })
	w.qp2.OnClose(hook("qp2"))
	w.srq.OnClose(hook("srq"))

	require.NoError(t, w.qp1.Close())
	require.Equal(t, []string{"qp1 before start", "qp1 again"}, ran)
	require.NoError(t, w.qp1.Close())
	require.Len(t, ran, 2, "a hook runs once")

	// The Context takes the DCT down, then its SRQ.
	require.NoError(t, c.Close())
	require.Equal(t, []string{"qp2 before close QP6", "srq before close QP7"}, ran[2:])

	// Closed already: the hook runs at once.
	w.qp2.OnClose(func() { ran = append(ran, "late") })
	require.Equal(t, "late", ran[len(ran)-1])
}
