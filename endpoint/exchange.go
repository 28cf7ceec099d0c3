package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// DefaultTimeout bounds an exchange whose context has no deadline, so a
// peer that never answers cannot hang the caller.
const DefaultTimeout = 30 * time.Second

// withDeadline returns ctx, or ctx bounded by DefaultTimeout when it has no
// deadline.
func withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// longAgo is a deadline in the past: setting it wakes every blocked read and
// write on a connection.
var longAgo = time.Unix(1, 0)

// watcher applies a context's deadline to a connection and, when the
// context is cancelled before that, moves the deadline to the past so that
// blocked calls return.
type watcher struct {
	conn    net.Conn
	mu      sync.Mutex
	stopped bool
	stopFn  func() bool
}

// watch starts a watcher of ctx over conn.
func watch(ctx context.Context, conn net.Conn) (*watcher, error) {
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	w := &watcher{conn: conn}
	w.stopFn = context.AfterFunc(ctx, func() {
		w.mu.Lock()
		if !w.stopped {
			_ = conn.SetDeadline(longAgo)
		}
		w.mu.Unlock()
	})
	return w, nil
}

// stop ends the watch; afterwards the watcher never touches the connection
// again, so the caller may set its own deadline. It reports whether the
// context had ended.
func (w *watcher) stop() (fired bool) {
	w.mu.Lock()
	w.stopped = true
	fired = !w.stopFn()
	w.mu.Unlock()
	return fired
}

// ioError wraps err from an I/O step of op, adding ctx's error when the
// context ended, so a timeout matches context.DeadlineExceeded as well as
// os.ErrDeadlineExceeded.
func ioError(ctx context.Context, op string, err error) error {
	cerr := ctx.Err()
	if cerr == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		// The connection's deadline is the context's own, and the
		// connection can notice it a moment before the context does.
		cerr = context.DeadlineExceeded
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("endpoint: %s: %w: %w", op, cerr, err)
	}
	return fmt.Errorf("endpoint: %s: %w", op, err)
}

// Exchange sends local to the peer at the other end of conn and returns the
// peer's endpoint. Both sides call Exchange; each sends while it receives,
// so it works over unbuffered connections (net.Pipe) too. The whole
// exchange is bounded by ctx's deadline, or by DefaultTimeout when ctx has
// none; cancelling ctx ends it at once. A timeout matches
// context.DeadlineExceeded.
//
// The peer's bytes are untrusted: the header is checked before the body is
// read, at most MaxEncodedSize bytes are read, and every field is checked
// (errors match [ErrMalformed]). Exchange does not close conn; on success
// the connection's deadline is cleared so it can be used again, after an
// error the connection's state is unknown and it should be closed.
func Exchange(ctx context.Context, conn net.Conn, local Endpoint) (Endpoint, error) {
	op := "exchange"
	if a := conn.RemoteAddr(); a != nil {
		op = "exchange with " + a.String()
	}
	frame, err := local.MarshalBinary()
	if err != nil {
		return Endpoint{}, fmt.Errorf("endpoint: %s: %w", op, err)
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	w, err := watch(ctx, conn)
	if err != nil {
		return Endpoint{}, fmt.Errorf("endpoint: %s: set deadline: %w", op, err)
	}
	sent := make(chan error, 1)
	go func() {
		_, err := conn.Write(frame)
		sent <- err
	}()
	remote, rerr := Read(conn)
	if rerr != nil {
		// Wake the writer if it is still blocked, then wait for it so no
		// goroutine outlives the call.
		_ = conn.SetDeadline(longAgo)
		<-sent
		w.stop()
		return Endpoint{}, ioError(ctx, op+": receive", rerr)
	}
	werr := <-sent
	if !w.stop() {
		_ = conn.SetDeadline(time.Time{})
	}
	if werr != nil {
		return Endpoint{}, ioError(ctx, op+": send", werr)
	}
	return remote, nil
}
