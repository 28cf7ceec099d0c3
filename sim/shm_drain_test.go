package sim

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestDrainNewSenderWhileActiveStreams: process a reads the records of b,
// which keeps sending; c sends its first record. drain reads the rings of
// processes that sent before first, so c's record waits for a full scan:
// it must come within shmRescan rounds although b's ring has a record
// every time the wake word moves.
func TestDrainNewSenderWhileActiveStreams(t *testing.T) {
	name := testFabricName(t)
	join := func() *shmFabric {
		s, err := joinShared(name, ctx.LinkLayerInfiniBand)
		require.NoError(t, err)
		t.Cleanup(s.leave)
		return s
	}
	a, b, c := join(), join(), join()
	pad := func(h *wireHdr, _ []byte) {} // Kind wirePad: drain skips it
	require.True(t, b.send(a.slot, 0, pad))
	require.True(t, a.drain(nil, 0)) // b is active now
	require.True(t, c.send(a.slot, 0, pad))
	pending := func() bool {
		return atomic.LoadUint64(a.in.tail(c.slot)) != atomic.LoadUint64(a.in.head(c.slot))
	}
	for i := 0; i < shmRescan+1; i++ {
		require.True(t, b.send(a.slot, 0, pad))
		a.drain(nil, 0)
		if !pending() {
			return
		}
	}
	t.Fatalf("c's record still unread after %d rounds while b sends", shmRescan+1)
}
