package endpoint

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mlx5kit/mlx5kit/internal/admit"
	"github.com/mlx5kit/mlx5kit/internal/connpeek"
	"github.com/mlx5kit/mlx5kit/internal/nilness"
)

// MaxPeers is the most peers one mesh connects. It bounds what an
// authenticated dialer may make the listener read: at most MaxPeers-1
// encodings per connection.
const MaxPeers = 1024

// defaultHelloTimeout bounds the authentication and hello of each
// connection to a mesh listener when MeshOptions.HelloTimeout is zero: a
// connection that has not proved itself and sent its endpoints by then is
// closed, however long the mesh waits.
const defaultHelloTimeout = 10 * time.Second

// ErrRejected matches the error a dialer gets when the listening peer (rank
// 0 of a mesh, the accept side of an exchange) turns it away or gives up.
// A peer that has not proved it holds the key, or claims a rank or peer
// count the mesh does not have, or a rank already taken, gets the same
// generic refusal; the listener's own error says which. An authenticated
// rank that the mesh gives up on (a rank never joined) is told why.
var ErrRejected = errors.New("rejected by the listening peer")

// ErrListenerUsed is returned by a second call of MeshListener.Exchange.
var ErrListenerUsed = errors.New("mesh listener already used")

// A mesh frame is a 12-byte header (magic "MXMS", version, type, a zero
// byte, payload length) and a payload. Version 2 authenticates before any
// endpoint is sent (see the package documentation):
//
//	hello      dialer: nonce [32], rank u32, peer count u32
//	challenge  listener: nonce [32], HMAC proof [32]
//	proof      dialer: HMAC proof [32]
//	offer      dialer: its endpoints for every other rank in rank order,
//	           then a 32-byte HMAC tag
//	table      listener: the endpoints every other rank made for the
//	           receiver in rank order, then a tag
//	abort      listener: empty (the generic refusal), or a reason and a
//	           tag (to an authenticated rank)
const (
	meshMagic      uint32 = 0x4d584d53
	meshVersion    uint16 = 2
	meshHeaderSize        = 12
	meshHello      byte   = 1
	meshTable      byte   = 2
	meshAbort      byte   = 3
	meshChallenge  byte   = 4
	meshProof      byte   = 5
	meshOffer      byte   = 6
	maxAbortReason        = 512
	// abortTimeout bounds the write of an abort frame, which may happen
	// after the mesh's own deadline has passed.
	abortTimeout = time.Second
)

// Dial retry pacing while the listener comes up.
const (
	dialBackoffFirst = 10 * time.Millisecond
	dialBackoffMax   = 250 * time.Millisecond
)

// meshMaxGreeting bounds the connections a mesh listener greets at once
// (each within its hello timeout), so that a flood of connections that
// say nothing does not take a goroutine and a descriptor each. Past it,
// the one that has waited longest without authenticating (of a host
// holding more than a quarter of the places, if one does; else of all) is
// closed to make room for the next (admit.Gate): a rank
// that authenticates before meshMaxGreeting newer connections arrive joins
// however many silent ones came before it, and a host that floods the
// listener evicts its own connections, not a rank's on another host.
const meshMaxGreeting = 128

// Accept retry pacing after a temporary error (out of file descriptors),
// as net/http's Server.Serve paces it.
const (
	acceptBackoffFirst = 5 * time.Millisecond
	acceptBackoffMax   = time.Second
)

func meshFrame(typ byte, payload []byte) []byte { return meshFrameSized(typ, payload, 0) }

// meshFrameSized returns a frame whose header announces extra bytes more
// than payload (a tag the caller appends), with room for them.
func meshFrameSized(typ byte, payload []byte, extra int) []byte {
	b := make([]byte, 0, meshHeaderSize+len(payload)+extra)
	b = binary.BigEndian.AppendUint32(b, meshMagic)
	b = binary.BigEndian.AppendUint16(b, meshVersion)
	b = append(b, typ, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)+extra))
	return append(b, payload...)
}

// decodeList decodes exactly count endpoints filling b.
func decodeList(b []byte, count int) ([]Endpoint, error) {
	list := make([]Endpoint, count)
	for i := range list {
		e, n, err := decode(b)
		if err != nil {
			return nil, fmt.Errorf("endpoint %d of %d: %w", i+1, count, err)
		}
		list[i], b = e, b[n:]
	}
	if len(b) != 0 {
		return nil, malformed("mesh payload", 0, errTrailingBytes, fmt.Sprintf("%d bytes after %d endpoints", len(b), count))
	}
	return list, nil
}

// maxListPayload is the largest payload carrying peers-1 endpoints and
// prefix bytes.
func maxListPayload(peers, prefix int) int { return prefix + (peers-1)*maxEncodedSize }

// encodeOthers encodes local[j] for every j != skip, in rank order.
func encodeOthers(b []byte, local []Endpoint, skip int) ([]byte, error) {
	for j, e := range local {
		if j == skip {
			continue
		}
		var err error
		if b, err = e.AppendBinary(b); err != nil {
			return nil, fmt.Errorf("endpoint for rank %d: %w", j, err)
		}
	}
	return b, nil
}

func checkPeers(peers int) error {
	if peers < 1 || peers > MaxPeers {
		return fmt.Errorf("%d peers: %w (want 1..%d): %w", peers, errRange, MaxPeers, errInvalid)
	}
	return nil
}

// ErrNoCertificate matches the error of a mesh listener whose
// MeshOptions.TLS names no certificate to serve.
var ErrNoCertificate = errors.New("TLS configuration without a certificate")

// MeshOptions says how the ranks of a mesh prove that they belong to it and
// how they reach rank 0. Every rank uses the same Security.
type MeshOptions struct {
	// Security is the pre-shared key, or InsecureLoopback for a mesh
	// confined to this host. The zero value is refused.
	Security
	// TLS, when set, runs every connection over TLS with this
	// configuration: the listener serves with it (it needs a certificate,
	// and may ask for the dialers'), DialMesh is its client (ServerName,
	// when empty, is the host of the address dialed). TLS hides the
	// endpoints from whoever can read the network; the key still decides
	// who joins.
	TLS *tls.Config
	// Dial, when set, makes DialMesh's connections (through a proxy, from
	// a chosen source address); TLS, when set, runs over what it returns.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// HelloTimeout bounds, for each connection, the authentication and the
	// hello: at the listener from the accept to the last byte of the
	// dialer's endpoints, at a dialer from the connect to the last byte of
	// its own (the wait for the table is bounded by the context alone).
	// Zero means 10 seconds.
	HelloTimeout time.Duration
	// Watch, when set, keeps the exchange's connections open once the
	// endpoints are swapped, to tell this rank when another is gone (see
	// MeshWatch). A MeshWatch serves one exchange. Every rank's
	// connection must then be a socket: one that is not is refused. Every
	// rank sets one, or none does: a rank without one closes its
	// connection once the endpoints are swapped, which a watching rank 0
	// sees as that rank gone, and a watching dialer as rank 0 gone.
	Watch *MeshWatch
}

func (o MeshOptions) check() error {
	if err := o.Security.check(); err != nil {
		return err
	}
	if o.HelloTimeout < 0 {
		return fmt.Errorf("hello timeout %v: %w (want 0 for the default, or more): %w", o.HelloTimeout, errRange, errInvalid)
	}
	return nil
}

func (o MeshOptions) helloTimeout() time.Duration {
	if o.HelloTimeout == 0 {
		return defaultHelloTimeout
	}
	return o.HelloTimeout
}

// MeshListener is rank 0 of a mesh: it accepts the other ranks, collects the
// endpoints each made for every other, and hands each rank its column.
type MeshListener struct {
	listener net.Listener
	peers    int
	opts     MeshOptions
	used     atomic.Bool
}

// ListenMesh listens on address (e.g. "127.0.0.1:0" or ":7471") for a mesh
// of peers ranks, itself rank 0, that authenticate as opts says. Without a
// key (opts.InsecureLoopback) the address must be a loopback one.
func ListenMesh(ctx context.Context, address string, peers int, opts MeshOptions) (*MeshListener, error) {
	if err := checkPeers(peers); err != nil {
		return nil, fmt.Errorf("endpoint: listen mesh: %w", err)
	}
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("endpoint: listen mesh: %w", err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", address)
	if err != nil {
		return nil, fmt.Errorf("endpoint: listen mesh: %w", err)
	}
	l, err := NewMeshListener(ln, peers, opts)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	return l, nil
}

// NewMeshListener makes rank 0 of a mesh of peers ranks that accepts on ln,
// a listener the caller made (one from tls.NewListener, a Unix socket, a
// listener handed down by a supervisor). opts.TLS, when set, wraps ln. The
// mesh listener owns ln from then on; on error ln is left as it was.
func NewMeshListener(ln net.Listener, peers int, opts MeshOptions) (*MeshListener, error) {
	if nilness.Is(ln) {
		return nil, fmt.Errorf("endpoint: mesh listener: nil listener: %w", errInvalid)
	}
	op := fmt.Sprintf("endpoint: mesh listener on %v", ln.Addr())
	if err := checkPeers(peers); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if !opts.keyed() && !localAddr(ln.Addr()) {
		return nil, fmt.Errorf("%s: no key, and other hosts can reach the address (listen on a loopback address, or set a key): %w",
			op, ErrKeyRequired)
	}
	if c := opts.TLS; c != nil {
		if len(c.Certificates) == 0 && c.GetCertificate == nil && c.GetConfigForClient == nil {
			return nil, fmt.Errorf("%s: %w", op, ErrNoCertificate)
		}
		ln = tls.NewListener(ln, c)
	}
	return &MeshListener{listener: ln, peers: peers, opts: opts}, nil
}

// Addr returns the address the listener is bound to, to hand to dialers.
// Addr of a nil *MeshListener, or of a zero MeshListener (one not made by
// ListenMesh or NewMeshListener), returns nil.
func (l *MeshListener) Addr() net.Addr {
	if l == nil || l.listener == nil {
		return nil
	}
	return l.listener.Addr()
}

// errNoListener is what Exchange returns for a nil *MeshListener or a zero
// MeshListener: it has nothing to accept on.
var errNoListener = fmt.Errorf("endpoint: mesh listener: exchange on a nil or zero MeshListener (make one with ListenMesh or NewMeshListener): %w", errInvalid)

// Close stops listening. Exchange closes the listener itself when it
// returns; Close is for a listener whose Exchange never runs, or, from
// another goroutine, to give up an Exchange that waits for ranks: it then
// returns an error that says the listener was closed and wraps
// net.ErrClosed, and the ranks that had joined are told the mesh ended. A
// later Exchange fails at once. Close is idempotent: a listener closed
// already (by Close or Exchange) returns nil.
//
// Close of a nil *MeshListener, or of a zero MeshListener, returns nil.
func (l *MeshListener) Close() error {
	if l == nil {
		return nil
	}
	l.used.Store(true)
	if l.listener == nil {
		return nil
	}
	if err := l.listener.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// member is a rank that proved itself and sent its endpoints.
type member struct {
	conn    net.Conn
	watch   *watcher
	session *session
	rank    int
	offered []Endpoint // offered[j]: this rank's endpoint for rank j (j != rank)
	err     error      // set when the connection was turned away
}

// abort tells an authenticated member why the mesh ends (best effort,
// bounded by abortTimeout) and closes its connection.
func (m *member) abort(reason string) {
	m.watch.stop()
	if len(reason) > maxAbortReason {
		reason = reason[:maxAbortReason]
	}
	_ = m.conn.SetDeadline(time.Now().Add(abortTimeout))
	_ = m.session.writeSealed(toDialer, meshAbort, []byte(reason))
	_ = m.conn.Close()
}

// temporary reports whether an accept error is worth retrying (out of
// file descriptors, a connection reset before it was accepted).
func temporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// Exchange runs rank 0 of the mesh. local[j] is the endpoint this peer made
// for rank j (local[0], its own, is returned unchanged and never sent). It
// waits for ranks 1..peers-1 to dial, then returns remote, where remote[j]
// is the endpoint rank j made for rank 0, and each dialer receives the same
// for itself.
//
// A connection learns nothing before it has proved that it holds the key:
// one that does not (or sends garbage, claims another peer count, a rank
// out of range or one already taken) gets the same generic refusal and is
// closed, one that takes longer than the hello timeout is closed, and the
// wait goes on. A temporary accept error (out of file descriptors) is retried with a
// back-off from 5 ms to 1 s. The wait is bounded by ctx's deadline or
// 30 seconds; when it ends early every rank that joined is told why.
// Exchange closes the listener and every connection before it returns; a
// second call returns [ErrListenerUsed]. A nil *MeshListener, or a zero
// MeshListener, returns an error wrapping ctx.ErrInvalidArgument.
func (l *MeshListener) Exchange(ctx context.Context, local []Endpoint) ([]Endpoint, error) {
	if l == nil || l.listener == nil {
		return nil, errNoListener
	}
	op := fmt.Sprintf("endpoint: mesh listener on %v", l.listener.Addr())
	if l.used.Swap(true) {
		return nil, fmt.Errorf("%s: %w", op, ErrListenerUsed)
	}
	defer l.listener.Close()
	mw, watched := l.opts.Watch, false
	release, err := claimWatch(mw, op, &watched)
	if err != nil {
		return nil, err
	}
	defer release()
	if len(local) != l.peers {
		return nil, fmt.Errorf("%s: %d local endpoints for %d peers: %w", op, len(local), l.peers, errInvalid)
	}
	for j := 1; j < len(local); j++ {
		if err := local[j].Validate(); err != nil {
			return nil, fmt.Errorf("%s: endpoint for rank %d: %w", op, j, err)
		}
	}
	if l.peers == 1 {
		if mw != nil {
			watched = true
			mw.start(nil)
		}
		return []Endpoint{local[0]}, nil
	}

	ctx, cancel := withDeadline(ctx)
	arrivals := make(chan *member)
	acceptFailed := make(chan error, 1)
	var (
		wg          sync.WaitGroup
		tempMu      sync.Mutex
		lastTempErr error
	)
	defer wg.Wait()
	defer cancel()
	stopClose := context.AfterFunc(ctx, func() { _ = l.listener.Close() })
	// Close the listener before waiting for the accept loop: when Exchange
	// returns on the context, stopClose may unregister the AfterFunc before
	// it has run.
	defer func() { stopClose(); _ = l.listener.Close() }()

	// At most meshMaxGreeting connections are greeted at once: past it the
	// one that has waited longest without authenticating is closed to make
	// room for the next.
	gate := admit.New(meshMaxGreeting)
	wg.Add(1)
	go func() {
		defer wg.Done()
		var delay time.Duration
		for {
			conn, err := l.listener.Accept()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if !temporary(err) {
					acceptFailed <- err
					return
				}
				tempMu.Lock()
				lastTempErr = err
				tempMu.Unlock()
				delay = min(max(2*delay, acceptBackoffFirst), acceptBackoffMax)
				t := time.NewTimer(delay)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				continue
			}
			delay = 0
			ticket, ok := gate.Admit(conn, ctx.Done())
			if !ok {
				_ = conn.Close()
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := l.greet(ctx, conn, ticket)
				ticket.Done()
				select {
				case arrivals <- m:
				case <-ctx.Done():
					if m.err == nil {
						m.abort("the mesh is complete or has given up")
					}
				}
			}()
		}
	}()

	members := make([]*member, l.peers)
	joined := 0
	var lastRejected error
	// gone drops the member of rank r when it closed or reset its
	// connection while it waited for the table (its process died, say):
	// a rank that joins again takes its place, and the table is not sent
	// to a connection no one reads. Under TLS the socket beneath is looked
	// at; a connection that cannot be looked at counts as open.
	gone := func(r int) bool {
		m := members[r]
		raw, err := watchable(m.conn)
		if err != nil {
			return false
		}
		if s, _ := connpeek.Peek(raw); s != connpeek.Closed && s != connpeek.Reset {
			return false
		}
		m.watch.stop()
		_ = m.conn.Close()
		members[r] = nil
		joined--
		lastRejected = fmt.Errorf("rank %d (%v) closed its connection after it joined", r, m.conn.RemoteAddr())
		return true
	}
	dropGone := func() bool {
		dropped := false
		for r := 1; r < l.peers; r++ {
			if members[r] != nil && gone(r) {
				dropped = true
			}
		}
		return dropped
	}
	// Once every rank is in, those gone meanwhile are waited for again
	// (dropGone).
	for joined < l.peers-1 || dropGone() {
		select {
		case m := <-arrivals:
			if m.err != nil {
				lastRejected = m.err
				continue
			}
			if members[m.rank] != nil && !gone(m.rank) {
				m.watch.stop()
				wg.Add(1)
				go func() { defer wg.Done(); refuse(m.conn) }()
				lastRejected = fmt.Errorf("from %v: rank %d has already joined", m.conn.RemoteAddr(), m.rank)
				continue
			}
			members[m.rank] = m
			joined++
		case err := <-acceptFailed:
			// Close on another goroutine, to give up waiting, or an
			// accept that failed for good.
			closed := errors.Is(err, net.ErrClosed)
			reason := "the mesh listener failed"
			if closed {
				reason = "the mesh listener was closed"
			}
			for _, m := range members {
				if m != nil {
					m.abort(reason)
				}
			}
			if closed {
				return nil, fmt.Errorf("%s: closed (MeshListener.Close) with %d of %d ranks joined: %w", op, joined+1, l.peers, err)
			}
			return nil, fmt.Errorf("%s: accept: %w", op, err)
		case <-ctx.Done():
			var missing []int
			for r := 1; r < l.peers; r++ {
				if members[r] == nil {
					missing = append(missing, r)
				}
			}
			reason := fmt.Sprintf("%v waiting for ranks %v", ctx.Err(), missing)
			for _, m := range members {
				if m != nil {
					m.abort(reason)
				}
			}
			err := fmt.Errorf("%s: %d of %d ranks joined: %w (missing ranks %v)", op, joined+1, l.peers, ctx.Err(), missing)
			if lastRejected != nil {
				err = fmt.Errorf("%w; last connection turned away: %w", err, lastRejected)
			}
			tempMu.Lock()
			if lastTempErr != nil {
				err = fmt.Errorf("%w; last accept error (retried): %w", err, lastTempErr)
			}
			tempMu.Unlock()
			return nil, err
		}
	}
	stopClose()
	_ = l.listener.Close()

	// Every rank is in: send each its column.
	var (
		failed []error
		links  []watchLink
	)
	for r := 1; r < l.peers; r++ {
		m := members[r]
		payload, err := encodeOthers(nil, column(local, members, r), r)
		if err == nil {
			m.watch.extend(time.Now().Add(l.opts.helloTimeout()))
			err = m.session.writeSealed(toDialer, meshTable, payload)
		}
		if err != nil {
			failed = append(failed, ioError(ctx, fmt.Sprintf("mesh listener: send table to rank %d", r), err))
		}
		m.watch.stop()
		if mw == nil {
			_ = m.conn.Close()
			continue
		}
		raw, _ := watchable(m.conn) // checked by greet
		_ = m.conn.SetDeadline(time.Time{})
		links = append(links, watchLink{rank: r, conn: m.conn, raw: raw, session: m.session})
	}
	if len(failed) > 0 {
		endLinks(links, "the mesh listener failed")
		return nil, errors.Join(failed...)
	}
	if mw != nil {
		watched = true
		mw.start(links)
	}
	return column(local, members, 0), nil
}

// column returns what every rank made for rank r: remote[j] is rank j's
// endpoint for r, remote[r] is the zero Endpoint unless r is 0 (then it is
// local[0]).
func column(local []Endpoint, members []*member, r int) []Endpoint {
	out := make([]Endpoint, len(local))
	for j := range out {
		switch {
		case j == r && r != 0:
		case j == 0:
			out[j] = local[r]
		default:
			out[j] = members[j].offered[r]
		}
	}
	return out
}

// peerFault reports whether err comes from what the peer sent (then it is
// told it was refused) rather than from the connection (a timeout, a
// close: then there is no one to tell).
func peerFault(err error) bool {
	var ne net.Error
	return !errors.As(err, &ne) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF)
}

// greet authenticates one dialer and reads its hello, all within the hello
// timeout. Anything wrong is answered with the generic refusal and the
// connection closed; the returned member then carries err, the reason,
// which stays here.
func (l *MeshListener) greet(ctx context.Context, conn net.Conn, t *admit.Ticket) *member {
	w, err := watchUntil(ctx, conn, time.Now().Add(l.opts.helloTimeout()))
	if err != nil {
		_ = conn.Close()
		return &member{err: fmt.Errorf("from %v: set deadline: %w", conn.RemoteAddr(), err)}
	}
	reject := func(err error) *member {
		w.stop()
		if peerFault(err) {
			refuse(conn)
		} else {
			_ = conn.Close()
		}
		return &member{err: fmt.Errorf("from %v: %w", conn.RemoteAddr(), t.Explain(err))}
	}
	if !l.opts.keyed() && !confined(conn) {
		return reject(fmt.Errorf("a connection from another host to a mesh without a key: %w", ErrKeyRequired))
	}
	if l.opts.Watch != nil {
		if _, err := watchable(conn); err != nil {
			return reject(err)
		}
	}
	s, err := acceptAuth(conn, l.opts.Security, purposeMesh)
	if err != nil {
		return reject(ioError(ctx, "authenticate", err))
	}
	t.Authenticated()
	if s.peers != uint32(l.peers) {
		return reject(fmt.Errorf("rank %d claims a mesh of %d peers, this one has %d: %w", s.rank, s.peers, l.peers, errRange))
	}
	if s.rank < 1 || s.rank >= s.peers {
		return reject(fmt.Errorf("rank %d: %w (dialers are 1..%d)", s.rank, errRange, s.peers-1))
	}
	rank := int(s.rank)
	f, err := readFrame(conn, meshOffer, maxListPayload(l.peers, macSize), -1)
	if err != nil {
		return reject(ioError(ctx, fmt.Sprintf("read the offer of rank %d", rank), err))
	}
	body, err := s.openSealed(toListener, f.header[:], f.payload)
	if err != nil {
		return reject(fmt.Errorf("offer of rank %d: %w", rank, err))
	}
	list, err := decodeList(body, l.peers-1)
	if err != nil {
		return reject(fmt.Errorf("offer of rank %d: %w", rank, err))
	}
	offered := make([]Endpoint, l.peers)
	for j, k := 0, 0; j < l.peers; j++ {
		if j == rank {
			continue
		}
		offered[j] = list[k]
		k++
	}
	return &member{conn: conn, watch: w, session: s, rank: rank, offered: offered}
}

// DialMesh joins a mesh as rank (1..len(local)-1) by dialing the listener
// (rank 0) at address, retrying with backoff while it is not yet up.
// local[j] is the endpoint this peer made for rank j (local[rank], its own,
// is returned unchanged and never sent). It returns remote, where remote[j]
// is the endpoint rank j made for this peer. Everything, retries included,
// is bounded by ctx's deadline or 30 seconds.
//
// The listener must prove that it holds the key before this end proves it
// or sends an endpoint; a listener that cannot is an error matching
// [ErrAuth], one that speaks another protocol version an error matching
// [ErrMalformed] (an [*Error] whose Field is "mesh version" or "mesh
// magic"), and a refusal matches [ErrRejected].
func DialMesh(ctx context.Context, address string, rank int, local []Endpoint, opts MeshOptions) ([]Endpoint, error) {
	name := fmt.Sprintf("dial mesh %s as rank %d", address, rank)
	op := "endpoint: " + name
	peers := len(local)
	if err := checkPeers(peers); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if rank < 1 || rank >= peers {
		return nil, fmt.Errorf("%s: rank %d: %w (dialers are 1..%d): %w", op, rank, errRange, peers-1, errInvalid)
	}
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	offer, err := encodeOthers(nil, local, rank)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	mw, watched := opts.Watch, false
	release, err := claimWatch(mw, op, &watched)
	if err != nil {
		return nil, err
	}
	defer release()

	ctx, cancel := withDeadline(ctx)
	defer cancel()
	conn, err := dialRetry(ctx, address, opts.Dial)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	dialed := conn
	defer func() {
		if !watched {
			_ = dialed.Close()
		}
	}()
	var sock net.Conn // what the watch looks at
	if mw != nil {
		if sock, err = watchable(conn); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
	}
	if !opts.keyed() && !confined(conn) {
		return nil, fmt.Errorf("%s: no key, and the listener at %v is not on this host (set a key): %w", op, conn.RemoteAddr(), ErrKeyRequired)
	}
	if opts.TLS != nil {
		conn = tls.Client(conn, clientTLS(opts.TLS, address))
	}
	w, err := watchUntil(ctx, conn, time.Now().Add(opts.helloTimeout()))
	if err != nil {
		return nil, fmt.Errorf("%s: set deadline: %w", op, err)
	}
	defer w.stop()
	if tc, ok := conn.(*tls.Conn); ok {
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, ioError(ctx, name+": TLS handshake", err)
		}
	}
	s, err := dialAuth(conn, opts.Security, purposeMesh, uint32(rank), uint32(peers))
	if err != nil {
		return nil, ioError(ctx, name+": authenticate", err)
	}
	if err := s.writeSealed(toListener, meshOffer, offer); err != nil {
		return nil, ioError(ctx, name+": send offer", err)
	}
	// The table comes when every rank has joined: only ctx bounds the wait.
	w.extend(time.Time{})
	f, err := readFrame(conn, meshTable, maxListPayload(peers, macSize), maxAbortReason+macSize)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			// Rank 0 sends the table or a sealed abort: a close without
			// either is its process gone.
			err = fmt.Errorf("rank 0 closed its connection without a table or a reason (its process gone, or this connection closed before it authenticated to make room for newer ones?): %w: %w", ErrPeerGone, err)
		}
		return nil, ioError(ctx, name+": receive table", err)
	}
	var body []byte
	if f.typ != meshAbort || len(f.payload) > 0 {
		if body, err = s.openSealed(toDialer, f.header[:], f.payload); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", op, frameName(f.typ), err)
		}
	}
	if f.typ == meshAbort {
		return nil, fmt.Errorf("%s: %w", op, rejected(body))
	}
	list, err := decodeList(body, peers-1)
	if err != nil {
		return nil, fmt.Errorf("%s: table: %w", op, err)
	}
	remote := make([]Endpoint, peers)
	for j, k := 0, 0; j < peers; j++ {
		if j == rank {
			remote[j] = local[rank]
			continue
		}
		remote[j] = list[k]
		k++
	}
	if mw != nil {
		w.stop()
		_ = conn.SetDeadline(time.Time{})
		watched = true
		mw.start([]watchLink{{rank: 0, conn: conn, raw: sock, session: s, toRank0: true}})
	}
	return remote, nil
}

// clientTLS returns c for a client of address: a copy with ServerName set
// to address's host when c has none.
func clientTLS(c *tls.Config, address string) *tls.Config {
	if c.ServerName != "" || c.InsecureSkipVerify {
		return c
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	c = c.Clone()
	c.ServerName = host
	return c
}

// dialRetry dials address (with dial, or a net.Dialer) until it answers or
// ctx ends, backing off from dialBackoffFirst to dialBackoffMax between
// attempts.
func dialRetry(ctx context.Context, address string, dial func(context.Context, string, string) (net.Conn, error)) (net.Conn, error) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	backoff := dialBackoffFirst
	for attempt := 1; ; attempt++ {
		conn, err := dial(ctx, "tcp", address)
		if err == nil {
			if nilness.Is(conn) {
				return nil, fmt.Errorf("dial: MeshOptions.Dial returned a nil connection and no error: %w", errInvalid)
			}
			if ctx.Err() != nil {
				// A Dial that does not look at ctx connects after it ended.
				_ = conn.Close()
				return nil, fmt.Errorf("dial: %w after %d attempts", ctx.Err(), attempt)
			}
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("dial: %w after %d attempts: %w", ctx.Err(), attempt, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("dial: %w after %d attempts: %w", ctx.Err(), attempt, err)
		case <-t.C:
		}
		backoff = min(2*backoff, dialBackoffMax)
	}
}

// Mesh connects len(local) peers in one process over TCP on address (e.g.
// "127.0.0.1:0"): rank 0 listens, the others dial. local[i][j] is the
// endpoint rank i made for rank j; the result remote[i][j] is the endpoint
// rank j made for rank i, that is local[j][i] after its trip over the
// wire (remote[i][i] is local[i][i], never sent). Every endpoint is checked
// before anything is sent, and the first rank to fail stops the others, so
// the error returned is that rank's. The ranks authenticate with a random
// key made for this call, so no other process can join. It is meant for
// tests and tools that run every rank in one process.
func Mesh(ctx context.Context, address string, local [][]Endpoint) ([][]Endpoint, error) {
	n := len(local)
	if err := checkPeers(n); err != nil {
		return nil, fmt.Errorf("endpoint: mesh: %w", err)
	}
	for i, row := range local {
		if len(row) != n {
			return nil, fmt.Errorf("endpoint: mesh: rank %d has %d endpoints for %d peers: %w", i, len(row), n, errInvalid)
		}
		for j, e := range row {
			if j == i {
				continue
			}
			if err := e.Validate(); err != nil {
				return nil, fmt.Errorf("endpoint: mesh: rank %d's endpoint for rank %d: %w", i, j, err)
			}
		}
	}
	key := newNonce()
	opts := MeshOptions{Security: Security{Key: key[:]}}
	l, err := ListenMesh(ctx, address, n, opts)
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	remote := make([][]Endpoint, n)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i == 0 {
				remote[i], err = l.Exchange(ctx, local[i])
			} else {
				remote[i], err = DialMesh(ctx, addr, i, local[i], opts)
			}
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("endpoint: mesh: rank %d: %w", i, err)
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return remote, nil
}
