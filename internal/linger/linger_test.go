package linger

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/toolproc"
)

// TestCloseDoesNotReset: an end that closes with the peer's bytes unread
// still has its last bytes read by the peer, and the peer then reads the
// end of the stream, not a reset; Close returns once the peer hangs up.
func TestCloseDoesNotReset(t *testing.T) {
	a, b := toolproc.TCPPair(t)
	_, err := b.Write(make([]byte, 100)) // left unread by a
	require.NoError(t, err)
	time.Sleep(10 * time.Millisecond) // in a's receive queue
	_, err = a.Write([]byte("bye"))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- Close(a, 5*time.Second, 1<<20) }()
	got, err := io.ReadAll(b)
	require.NoError(t, err, "the end of the stream, not a reset")
	require.Equal(t, "bye", string(got))
	require.NoError(t, b.Close())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(2 * time.Second):
		t.Fatal("Close waited past the peer's hang-up")
	}
}

// TestCloseBounded: a peer that neither sends nor hangs up holds Close
// for d, no longer.
func TestCloseBounded(t *testing.T) {
	a, _ := toolproc.TCPPair(t)
	start := time.Now()
	require.NoError(t, Close(a, 50*time.Millisecond, 1<<20))
	require.Less(t, time.Since(start), 2*time.Second)
}
