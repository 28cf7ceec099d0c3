package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/mlx5kit/mlx5kit/internal/nilness"
)

// defaultTimeout bounds an exchange whose context has no deadline, so a
// peer that never answers cannot hang the caller.
const defaultTimeout = 30 * time.Second

// withDeadline returns ctx, or ctx bounded by defaultTimeout when it has no
// deadline.
func withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, defaultTimeout)
}

// longAgo is a deadline in the past: setting it wakes every blocked read and
// write on a connection.
var longAgo = time.Unix(1, 0)

// watcher applies a deadline to a connection (the context's, or an earlier
// one) and, when the context is cancelled before that, moves the deadline
// to the past so that blocked calls return.
type watcher struct {
	conn     net.Conn
	ctxLimit time.Time // the context's deadline, zero when it has none
	mu       sync.Mutex
	stopped  bool
	fired    bool
	stopFn   func() bool
}

// earliest returns the earlier of two deadlines, a zero one meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// watch starts a watcher of ctx over conn.
func watch(ctx context.Context, conn net.Conn) (*watcher, error) {
	return watchUntil(ctx, conn, time.Time{})
}

// watchUntil starts a watcher of ctx over conn whose deadline is limit when
// that comes before ctx's (a zero limit: ctx's alone).
func watchUntil(ctx context.Context, conn net.Conn, limit time.Time) (*watcher, error) {
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(earliest(deadline, limit)); err != nil {
		return nil, err
	}
	w := &watcher{conn: conn, ctxLimit: deadline}
	w.stopFn = context.AfterFunc(ctx, func() {
		w.mu.Lock()
		if !w.stopped {
			w.fired = true
			_ = conn.SetDeadline(longAgo)
		}
		w.mu.Unlock()
	})
	return w, nil
}

// extend moves the connection's deadline to limit, or ctx's deadline when
// that comes first (a zero limit: ctx's alone), unless the watch has ended
// or the context has.
func (w *watcher) extend(limit time.Time) {
	w.mu.Lock()
	if !w.stopped && !w.fired {
		_ = w.conn.SetDeadline(earliest(w.ctxLimit, limit))
	}
	w.mu.Unlock()
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
		// The connection can notice the context's deadline a moment before
		// the context does; an earlier deadline (a hello timeout) is not
		// the context's.
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			cerr = context.DeadlineExceeded
		}
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("endpoint: %s: %w: %w", op, cerr, err)
	}
	return fmt.Errorf("endpoint: %s: %w", op, err)
}

// CheckExchange returns the error Exchange would refuse conn, side and sec
// with before it sends anything: a nil connection, a side that is neither
// DialSide nor AcceptSide, a key shorter than MinKeySize ([ErrBadKey]), no
// key without InsecureLoopback, or no key on a connection that leaves this
// host ([ErrKeyRequired]); nil when Exchange would go on. A caller that must give something up before an exchange
// (a channel's queue pair, in channel.Channel.ReestablishConn) checks first.
func CheckExchange(conn net.Conn, side Side, sec Security) error {
	if nilness.Is(conn) {
		return fmt.Errorf("endpoint: exchange: nil connection: %w", errInvalid)
	}
	op := exchangeOp(conn)
	if side != DialSide && side != AcceptSide {
		return fmt.Errorf("endpoint: %s: side %d: %w (want DialSide or AcceptSide): %w", op, side, errRange, errInvalid)
	}
	if err := sec.check(); err != nil {
		return fmt.Errorf("endpoint: %s: %w", op, err)
	}
	if !sec.keyed() && !confined(conn) {
		return fmt.Errorf("endpoint: %s: no key, and the connection leaves this host (set a key): %w", op, ErrKeyRequired)
	}
	return nil
}

// exchangeOp names an exchange over conn in errors: with the peer's
// address when conn has one.
func exchangeOp(conn net.Conn) string {
	if a := conn.RemoteAddr(); a != nil {
		return "exchange with " + a.String()
	}
	return "exchange"
}

// Exchange sends local to the peer at the other end of conn and returns the
// peer's endpoint. Both ends call Exchange with the same sec, one with
// side DialSide (it dialed conn), the other with AcceptSide.
//
// Before either end sends its endpoint, each proves to the other that it
// holds sec.Key (a challenge in both directions, see [Security]); a peer
// that cannot learns nothing, is sent a generic refusal (on the accept
// side) and the error matches [ErrAuth]. Without a key the exchange is
// refused ([ErrKeyRequired]) unless sec.InsecureLoopback is set and both
// ends of conn are on this host. To hide the endpoints from whoever can
// read the network, pass a *tls.Conn.
//
// The whole exchange is bounded by ctx's deadline, or by 30 seconds
// when ctx has none; cancelling ctx ends it at once. A timeout matches
// context.DeadlineExceeded. The peer's bytes are untrusted: every message
// has a size limit checked before it is read, and every field of the
// endpoint is checked (errors match [ErrMalformed]). Exchange does not
// close conn; on success the connection's deadline is cleared so it can be
// used again, after an error the connection's state is unknown and it
// should be closed. The messages alternate, so it works over unbuffered
// connections (net.Pipe) too.
func Exchange(ctx context.Context, conn net.Conn, side Side, local Endpoint, sec Security) (Endpoint, error) {
	if err := CheckExchange(conn, side, sec); err != nil {
		return Endpoint{}, err
	}
	op := exchangeOp(conn)
	frame, err := local.MarshalBinary()
	if err != nil {
		return Endpoint{}, fmt.Errorf("endpoint: %s: %w", op, err)
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return Endpoint{}, fmt.Errorf("endpoint: %s: %w", op, err)
	}
	w, err := watch(ctx, conn)
	if err != nil {
		return Endpoint{}, fmt.Errorf("endpoint: %s: set deadline: %w", op, err)
	}
	var remote Endpoint
	if side == DialSide {
		remote, err = exchangeDial(conn, sec, frame)
	} else {
		remote, err = exchangeAccept(conn, sec, frame)
	}
	if err != nil {
		w.stop()
		return Endpoint{}, ioError(ctx, op, err)
	}
	// Once stop returns, the watcher no longer touches conn: the
	// deadline it may have set is cleared with the exchange's own.
	w.stop()
	_ = conn.SetDeadline(time.Time{})
	return remote, nil
}

// exchangeDial is the dialing end of an exchange: it authenticates, sends
// its endpoint and receives the peer's.
func exchangeDial(conn net.Conn, sec Security, frame []byte) (Endpoint, error) {
	s, err := dialAuth(conn, sec, purposeExchange, 1, 2)
	if err != nil {
		return Endpoint{}, fmt.Errorf("authenticate: %w", err)
	}
	if err := s.writeSealed(toListener, meshOffer, frame); err != nil {
		return Endpoint{}, fmt.Errorf("send: %w", err)
	}
	f, err := readFrame(conn, meshTable, maxEncodedSize+macSize, maxAbortReason+macSize)
	if err != nil {
		return Endpoint{}, fmt.Errorf("receive: %w", err)
	}
	if f.typ == meshAbort && len(f.payload) == 0 {
		return Endpoint{}, rejected(nil)
	}
	body, err := s.openSealed(toDialer, f.header[:], f.payload)
	if err != nil {
		return Endpoint{}, fmt.Errorf("receive: %w", err)
	}
	if f.typ == meshAbort {
		return Endpoint{}, rejected(body)
	}
	var e Endpoint
	if err := e.UnmarshalBinary(body); err != nil {
		return Endpoint{}, err
	}
	return e, nil
}

// exchangeAccept is the accepting end of an exchange: it authenticates,
// receives the peer's endpoint and sends its own. A peer at fault is told
// no more than the generic refusal.
func exchangeAccept(conn net.Conn, sec Security, frame []byte) (Endpoint, error) {
	e, err := exchangeAcceptSteps(conn, sec, frame)
	if err != nil && peerFault(err) {
		writeRefusal(conn)
	}
	return e, err
}

func exchangeAcceptSteps(conn net.Conn, sec Security, frame []byte) (Endpoint, error) {
	s, err := acceptAuth(conn, sec, purposeExchange)
	if err != nil {
		return Endpoint{}, fmt.Errorf("authenticate: %w", err)
	}
	if s.rank != 1 || s.peers != 2 {
		return Endpoint{}, fmt.Errorf("the peer claims rank %d of %d, an exchange is rank 1 of 2: %w", s.rank, s.peers, errRange)
	}
	f, err := readFrame(conn, meshOffer, maxEncodedSize+macSize, -1)
	if err != nil {
		return Endpoint{}, fmt.Errorf("receive: %w", err)
	}
	body, err := s.openSealed(toListener, f.header[:], f.payload)
	if err != nil {
		return Endpoint{}, fmt.Errorf("receive: %w", err)
	}
	var e Endpoint
	if err := e.UnmarshalBinary(body); err != nil {
		return Endpoint{}, err
	}
	if err := s.writeSealed(toDialer, meshTable, frame); err != nil {
		return Endpoint{}, fmt.Errorf("send: %w", err)
	}
	return e, nil
}
