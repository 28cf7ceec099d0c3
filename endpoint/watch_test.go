package endpoint

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
)

// TestWatchConn: the context ends, with ErrPeerGone as its cause, once the
// peer closes; bytes the peer sends are not a close and stay unread.
func TestWatchConn(t *testing.T) {
	a, b := toolproc.TCPPair(t)
	c, cancel, err := WatchConn(context.Background(), a, time.Millisecond)
	require.NoError(t, err)
	defer cancel()
	_, err = b.Write([]byte("hi"))
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, c.Err(), "bytes from the peer")
	buf := make([]byte, 2)
	_, err = a.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "hi", string(buf), "the watch read nothing")

	require.NoError(t, b.Close())
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the peer's close did not end the context")
	}
	require.ErrorIs(t, context.Cause(c), ErrPeerGone)
	require.ErrorIs(t, c.Err(), context.Canceled)
}

// TestWatchConnReset: a reset is the peer gone too.
func TestWatchConnReset(t *testing.T) {
	a, b := toolproc.TCPPair(t)
	c, cancel, err := WatchConn(context.Background(), a, time.Millisecond)
	require.NoError(t, err)
	defer cancel()
	require.NoError(t, b.(*net.TCPConn).SetLinger(0))
	require.NoError(t, b.Close())
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the peer's reset did not end the context")
	}
	require.ErrorIs(t, context.Cause(c), ErrPeerGone)
}

// TestWatchConnCancelAndParent: the cancel function and the parent end it
// with their own causes, and a conn that is not a socket is refused.
func TestWatchConnCancelAndParent(t *testing.T) {
	a, _ := toolproc.TCPPair(t)
	c, cancel, err := WatchConn(context.Background(), a, 0)
	require.NoError(t, err)
	cancel()
	require.ErrorIs(t, context.Cause(c), context.Canceled)
	require.False(t, errors.Is(context.Cause(c), ErrPeerGone))

	parent, stop := context.WithTimeout(context.Background(), time.Millisecond)
	defer stop()
	c, cancel, err = WatchConn(parent, a, 0)
	require.NoError(t, err)
	defer cancel()
	<-c.Done()
	require.ErrorIs(t, c.Err(), context.DeadlineExceeded)

	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	_, _, err = WatchConn(context.Background(), p, 0)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}
