package endpoint

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/mlx5kit/mlx5kit/internal/connpeek"
)

// MeshWatch tells a rank of a mesh when another rank is gone. A queue
// pair with nothing in flight learns nothing of a peer that is gone, on a
// NIC as on the software HCA: a Receive whose sender died waits for good.
// Set as MeshOptions.Watch, a MeshWatch keeps the connections of the
// exchange open once the endpoints are swapped (rank 0 its connection to
// every other rank, a dialer its connection to rank 0) and looks at them
// every Interval without reading them. When a rank's connection closes or
// resets (its process exited or was killed, or it called Close), rank 0
// tells every other rank which one, and closes their connections: the
// mesh ends as a whole, as a parallel job's ranks do when one fails.
// Every rank then sees it within about two Intervals, rank 0 included,
// as long as rank 0 lives; when rank 0 is gone the dialers see that. A
// rank whose host vanishes without closing its connections (power lost,
// the network cut) is seen once TCP keepalive gives up on the
// connection: about 2.5 minutes with Go's defaults (15 s idle, then 9
// probes 15 s apart).
//
// Context derives a context that ends then, whose cause matches
// ErrPeerGone and names the rank; give it to the waits that would
// otherwise wait for good. Close leaves the mesh, which the other ranks
// see as this rank gone: call it once the whole job is done, and after a
// failed exchange or none (it then only stops the watch). The zero value
// is ready to use; a MeshWatch serves one exchange.
type MeshWatch struct {
	// Interval is how often the connections are looked at: 100 ms when
	// zero or less.
	Interval time.Duration

	once   sync.Once
	ctx    context.Context // ends when a rank is gone or Close runs
	cancel context.CancelCauseFunc

	// closing is held through Close, so that a Close on another goroutine
	// returns only once the first has ended the connections.
	closing sync.Mutex

	mu      sync.Mutex
	claimed bool        // an exchange took it
	links   []watchLink // filled by the exchange that succeeded
	closed  bool
	done    chan struct{} // the looking goroutine has ended (nil before it runs)
}

// watchLink is one kept connection of a mesh.
type watchLink struct {
	rank    int      // the rank at the other end
	conn    net.Conn // what is read and closed (the TLS connection where TLS runs)
	raw     net.Conn // what is looked at: the socket
	session *session // seals rank 0's word, and opens it at a dialer
	toRank0 bool     // a dialer's link (else rank 0's link to a dialer)
}

func (w *MeshWatch) init() {
	w.once.Do(func() { w.ctx, w.cancel = context.WithCancelCause(context.Background()) })
}

// Context returns a context, derived from parent, that ends once a rank of
// the mesh is gone (context.Cause then matches ErrPeerGone and says which
// rank) or this rank closes the watch (context.Canceled); the cancel
// function ends it sooner. Before the exchange has filled the watch, and
// after one that failed, only parent and Close end it.
func (w *MeshWatch) Context(parent context.Context) (context.Context, context.CancelFunc) {
	w.init()
	c, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(w.ctx, func() { cancel(context.Cause(w.ctx)) })
	return c, func() { stop(); cancel(context.Canceled) }
}

// Err returns nil while every rank is there (or before the exchange), and
// the cause the contexts of Context end with once one is gone or Close
// has run.
func (w *MeshWatch) Err() error {
	w.init()
	if w.ctx.Err() == nil {
		return nil
	}
	return context.Cause(w.ctx)
}

// Close leaves the mesh: it closes the kept connections (rank 0 first
// tells the other ranks that it left), so that the other ranks see this
// one gone, and ends the watch. It is idempotent and returns nil, and may
// be called from any goroutine (from a signal handler's while the main
// one defers it, say): every call returns once the connections are ended.
//
// Close of a nil *MeshWatch returns nil.
func (w *MeshWatch) Close() error {
	if w == nil {
		return nil
	}
	w.init()
	w.closing.Lock()
	defer w.closing.Unlock()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	links, done := w.links, w.done
	w.mu.Unlock()
	w.cancel(context.Canceled)
	if done != nil {
		<-done
	}
	endLinks(links, "rank 0 left the mesh")
	return nil
}

// claim takes w for one exchange; op names it in the error.
func (w *MeshWatch) claim(op string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.claimed || w.closed {
		return fmt.Errorf("%s: the MeshWatch in the options served another exchange or is closed (use one per exchange): %w", op, errInvalid)
	}
	w.claimed = true
	return nil
}

// claimWatch claims w (when set) for the exchange op; the function it
// returns, deferred, gives w back unless *watched says the exchange
// handed it its connections.
func claimWatch(w *MeshWatch, op string, watched *bool) (func(), error) {
	if w == nil {
		return func() {}, nil
	}
	if err := w.claim(op); err != nil {
		return nil, err
	}
	return func() {
		if !*watched {
			w.release()
		}
	}, nil
}

// release gives w back after a failed exchange: it may serve another.
func (w *MeshWatch) release() {
	w.mu.Lock()
	w.claimed = false
	w.mu.Unlock()
}

// watchable returns the socket under conn that the watch looks at, or an
// error for a connection that cannot be looked at without reading it.
func watchable(conn net.Conn) (net.Conn, error) {
	raw := conn
	if tc, ok := conn.(*tls.Conn); ok {
		raw = tc.NetConn()
	}
	if _, ok := raw.(syscall.Conn); !ok {
		return nil, fmt.Errorf("a MeshWatch cannot look at a %T without reading it (want a socket, such as a *net.TCPConn): %w", raw, errInvalid)
	}
	return raw, nil
}

// start hands w the connections of the exchange that succeeded and starts
// looking at them. A watch closed meanwhile ends them at once.
func (w *MeshWatch) start(links []watchLink) {
	w.init()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		endLinks(links, "rank 0 left the mesh")
		return
	}
	w.links = links
	if len(links) == 0 {
		w.mu.Unlock()
		return
	}
	w.done = make(chan struct{})
	w.mu.Unlock()
	interval := w.Interval
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	go w.look(links, interval)
}

// look looks at every link each interval until one is gone or the watch
// ends. At rank 0 a gone rank is told to the others before their
// connections close.
func (w *MeshWatch) look(links []watchLink, interval time.Duration) {
	defer close(w.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		for i, l := range links {
			cause := l.gone()
			if cause == nil {
				continue
			}
			w.cancel(cause)
			others := append(links[:i:i], links[i+1:]...)
			endLinks(others, fmt.Sprintf("rank %d is gone", l.rank))
			_ = l.conn.Close()
			return
		}
	}
}

// gone returns nil while the rank at the other end of l is there, else
// the cause: its connection closed or reset, or (at a dialer) rank 0's
// word of which rank is gone. Nothing follows the table on a kept
// connection but that word, so any byte counts.
func (l watchLink) gone() error {
	s, _ := connpeek.Peek(l.raw)
	switch s {
	case connpeek.Closed:
		// A rank whose options have no MeshWatch closes its connection
		// right after the exchange: the one case where the close is
		// not the rank leaving.
		return fmt.Errorf("rank %d closed its connection (or it joined without a MeshWatch, which every rank must set): %w", l.rank, ErrPeerGone)
	case connpeek.Reset:
		return fmt.Errorf("rank %d reset its connection: %w", l.rank, ErrPeerGone)
	case connpeek.Data:
		if l.toRank0 {
			return l.word()
		}
		return fmt.Errorf("rank %d sent after the exchange, which a rank does only as it leaves: %w", l.rank, ErrPeerGone)
	}
	return nil
}

// word reads rank 0's abort frame at a dialer: the reason it names, or
// what made it unreadable.
func (l watchLink) word() error {
	_ = l.conn.SetReadDeadline(time.Now().Add(abortTimeout))
	f, err := readFrame(l.conn, meshAbort, maxAbortReason+macSize, maxAbortReason+macSize)
	if err == nil && len(f.payload) > 0 {
		var body []byte
		if body, err = l.session.openSealed(toDialer, f.header[:], f.payload); err == nil {
			return fmt.Errorf("rank 0 says %q: %w", body, ErrPeerGone)
		}
	}
	if err == nil {
		err = errors.New("an empty word")
	}
	return fmt.Errorf("rank 0's connection ended without a word it sealed: %w: %w", err, ErrPeerGone)
}

// endLinks ends the kept connections of links: rank 0 first tells each
// dialer why (best effort, bounded by abortTimeout), a dialer just closes.
func endLinks(links []watchLink, reason string) {
	for _, l := range links {
		if !l.toRank0 {
			_ = l.conn.SetWriteDeadline(time.Now().Add(abortTimeout))
			_ = l.session.writeSealed(toDialer, meshAbort, []byte(reason))
		}
		_ = l.conn.Close()
	}
}
