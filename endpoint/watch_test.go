package endpoint_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

func tcpConns(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		got <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	b = <-got
	require.NotNil(t, b)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a, b
}

// TestWatchConn: the context ends, with ErrPeerGone as its cause, once the
// peer closes; bytes the peer sends are not a close and stay unread.
func TestWatchConn(t *testing.T) {
	a, b := tcpConns(t)
	c, cancel, err := endpoint.WatchConn(context.Background(), a, time.Millisecond)
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
	require.ErrorIs(t, context.Cause(c), endpoint.ErrPeerGone)
	require.ErrorIs(t, c.Err(), context.Canceled)
}

// TestWatchConnReset: a reset is the peer gone too.
func TestWatchConnReset(t *testing.T) {
	a, b := tcpConns(t)
	c, cancel, err := endpoint.WatchConn(context.Background(), a, time.Millisecond)
	require.NoError(t, err)
	defer cancel()
	require.NoError(t, b.(*net.TCPConn).SetLinger(0))
	require.NoError(t, b.Close())
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the peer's reset did not end the context")
	}
	require.ErrorIs(t, context.Cause(c), endpoint.ErrPeerGone)
}

// TestWatchConnCancelAndParent: the cancel function and the parent end it
// with their own causes, and a conn that is not a socket is refused.
func TestWatchConnCancelAndParent(t *testing.T) {
	a, _ := tcpConns(t)
	c, cancel, err := endpoint.WatchConn(context.Background(), a, 0)
	require.NoError(t, err)
	cancel()
	require.ErrorIs(t, context.Cause(c), context.Canceled)
	require.False(t, errors.Is(context.Cause(c), endpoint.ErrPeerGone))

	parent, stop := context.WithTimeout(context.Background(), time.Millisecond)
	defer stop()
	c, cancel, err = endpoint.WatchConn(parent, a, 0)
	require.NoError(t, err)
	defer cancel()
	<-c.Done()
	require.ErrorIs(t, c.Err(), context.DeadlineExceeded)

	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	_, _, err = endpoint.WatchConn(context.Background(), p, 0)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}

// A peer that has gone ends the wait of a context from WatchConn: here
// the peer closes the connection, as the kernel does for a process that
// exits or is killed.
func ExampleWatchConn() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	go func() {
		peer, err := ln.Accept()
		if err == nil {
			peer.Close()
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	watched, stop, err := endpoint.WatchConn(context.Background(), conn, 10*time.Millisecond)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	<-watched.Done() // a channel's Receive(watched, …) ends here too
	fmt.Println(errors.Is(context.Cause(watched), endpoint.ErrPeerGone))
	// Output: true
}
