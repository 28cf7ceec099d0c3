package wqebuilder

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestClosedFlagSharesTheIndexLine keeps the flag Finish tests for Close in
// the first 64 bytes of the queue, with the producer index and the QPN
// word that commit reads anyway, and the queue no larger for it: the flag
// fills the padding after mask.
func TestClosedFlagSharesTheIndexLine(t *testing.T) {
	var q SendQueue
	for _, off := range []uintptr{unsafe.Offsetof(q.pi), unsafe.Offsetof(q.qpn8), unsafe.Offsetof(q.closed)} {
		require.Less(t, off, uintptr(64))
	}
	require.Equal(t, unsafe.Offsetof(q.mask)+4, unsafe.Offsetof(q.closed))
	require.Equal(t, unsafe.Offsetof(q.closed)+4, unsafe.Offsetof(q.qpn8))
}
