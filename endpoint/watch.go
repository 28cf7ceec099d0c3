package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/connpeek"
	"github.com/mlx5kit/mlx5kit/internal/nilness"
)

// ErrPeerGone is the cause of a WatchConn context that the peer's end of
// the connection ended: the peer closed or reset it, as the kernel does
// for a process that exits or is killed. The contexts of a MeshWatch end
// with an error matching it that names the rank gone.
var ErrPeerGone = errors.New("the peer closed its connection: it exited or was killed")

// WatchConn returns a context, derived from parent, that ends once the
// peer of conn closes or resets the connection; context.Cause then
// returns an error matching ErrPeerGone. A queue pair with nothing in
// flight learns nothing of a peer that is gone, on a NIC as on the
// software HCA, so a program that handshook over conn (Exchange,
// channel's HandshakeConn) and keeps it open can give this context to its
// waits: a Receive whose sender died then ends instead of waiting for
// good.
//
// WatchConn looks at conn every interval (100 ms when interval is 0 or
// less) from a goroutine of its own, without reading from it: bytes the
// peer sends stay for the caller, and a close that follows bytes not yet
// read is seen once they are read. conn must be a socket (a *net.TCPConn
// or *net.UnixConn, or another net.Conn that is a syscall.Conn), else the
// error matches ctx.ErrInvalidArgument; a conn closed here tells nothing
// more. The cancel function ends the context and the goroutine; call it
// when done.
func WatchConn(parent context.Context, conn net.Conn, interval time.Duration) (context.Context, context.CancelFunc, error) {
	if _, ok := conn.(syscall.Conn); !ok || nilness.Is(conn) {
		return nil, nil, fmt.Errorf("endpoint: watch connection: a %T cannot be looked at without reading it (want a socket, such as a *net.TCPConn): %w", conn, ctx.ErrInvalidArgument)
	}
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	c, cancel := context.WithCancelCause(parent)
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-c.Done():
				return
			case <-t.C:
			}
			switch s, _ := connpeek.Peek(conn); s {
			case connpeek.Closed:
				cancel(ErrPeerGone)
				return
			case connpeek.Reset:
				cancel(fmt.Errorf("%w (connection reset)", ErrPeerGone))
				return
			}
		}
	}()
	return c, func() { cancel(context.Canceled) }, nil
}
