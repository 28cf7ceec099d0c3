package connpeek

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/toolproc"
)

func TestPeek(t *testing.T) {
	a, b := toolproc.TCPPair(t)
	s, _ := Peek(a)
	require.Equal(t, Open, s)

	_, err := b.Write([]byte{7, 8})
	require.NoError(t, err)
	require.Eventually(t, func() bool { s, _ := Peek(a); return s == Data }, 5*time.Second, time.Millisecond)
	s, first := Peek(a)
	require.Equal(t, Data, s)
	require.Equal(t, byte(7), first)
	buf := make([]byte, 2)
	_, err = a.Read(buf)
	require.NoError(t, err)
	require.Equal(t, []byte{7, 8}, buf, "Peek read nothing")

	require.NoError(t, b.Close())
	require.Eventually(t, func() bool { s, _ := Peek(a); return s == Closed }, 5*time.Second, time.Millisecond)
}

func TestPeekReset(t *testing.T) {
	a, b := toolproc.TCPPair(t)
	// A close with unread data, or with SO_LINGER 0, resets.
	require.NoError(t, b.(*net.TCPConn).SetLinger(0))
	require.NoError(t, b.Close())
	require.Eventually(t, func() bool { s, _ := Peek(a); return s == Reset }, 5*time.Second, time.Millisecond)
}

func TestPeekNotASocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	require.NoError(t, b.Close())
	s, _ := Peek(a)
	require.Equal(t, Open, s, "a pipe cannot be looked at")
	c, _ := toolproc.TCPPair(t)
	require.NoError(t, c.Close())
	s, _ = Peek(c)
	require.Equal(t, Open, s, "closed here")
}

// TestPeekLeavesTheReset: a reset seen by Peek stays for the reader, as
// bytes do: a second Peek sees it again, and a Read returns ECONNRESET, not
// end of file.
func TestPeekLeavesTheReset(t *testing.T) {
	a, b := toolproc.TCPPair(t)
	require.NoError(t, b.(*net.TCPConn).SetLinger(0))
	require.NoError(t, b.Close())
	require.Eventually(t, func() bool { s, _ := Peek(a); return s == Reset }, 5*time.Second, time.Millisecond)
	s, _ := Peek(a)
	require.Equal(t, Reset, s, "a second look")
	_, err := a.Read(make([]byte, 1))
	require.ErrorIs(t, err, syscall.ECONNRESET)
}
