// Package admit bounds how many connections a listener authenticates at
// once, and keeps connections that never authenticate from locking out the
// peers that do. The software fabric's TCP link (sim) and the mesh listener
// (endpoint) greet their connections through a Gate.
//
// A listener that greets each connection in a goroutine, within a deadline,
// and stops accepting once max connections are being greeted can be held
// shut by max connections that say nothing: for the whole deadline, and
// again as soon as it ends. A Gate takes every new connection instead and,
// when max are being greeted, closes the one among them that has waited
// longest without proving the key. When one source (a remote host) holds
// more than a quarter of the places, the one closed is that source's
// oldest. A peer that authenticates before max newer connections
// arrive gets in, however many came before it; and a host that floods the
// listener evicts its own connections, not those of a peer on another
// host, however fast it floods. A flood spread thinly over many sources
// is met first in, first out, as if there were one.
package admit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
)

// ErrEvicted is what a greeting's error matches (Ticket.Explain) when the
// Gate closed its connection to make room for a newer one.
var ErrEvicted = errors.New("closed unauthenticated to make room for a newer connection")

// A Gate admits the connections a listener greets, a bounded number at a
// time (New).
// Its methods may be called from several goroutines at once.
type Gate struct {
	tokens chan struct{} // one per connection being greeted

	mu     sync.Mutex
	live   []*Ticket // being greeted, in the order admitted
	closed bool
}

// A Ticket is one admitted connection's place at its Gate, held until Done.
type Ticket struct {
	g      *Gate
	conn   io.Closer
	source string // the remote host (sourceOf)
	// Both guarded by g.mu.
	authenticated, evicted bool
}

// New returns a Gate that lets at most n connections (at least 1) be
// greeted at once.
func New(n int) *Gate {
	return &Gate{tokens: make(chan struct{}, max(n, 1))}
}

// Admit returns a Ticket for conn, the connection the listener has just
// accepted. When its bound of connections are being greeted it first closes the
// oldest of them that has not authenticated (if any), then waits until one
// of them is done. It returns false, with conn left open, once stop is
// closed or the Gate is (Close) before conn is admitted.
func (g *Gate) Admit(conn io.Closer, stop <-chan struct{}) (*Ticket, bool) {
	select {
	case g.tokens <- struct{}{}:
	default:
		g.evictOldest()
		select {
		case g.tokens <- struct{}{}:
		case <-stop:
			return nil, false
		}
	}
	t := &Ticket{g: g, conn: conn, source: sourceOf(conn)}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		<-g.tokens
		return nil, false
	}
	g.live = append(g.live, t)
	return t, true
}

// sourceOf returns the source conn comes from: its remote host (an
// IPv4-mapped IPv6 address as the IPv4 one), or "" for a connection that
// does not say (all such are one source). An IPv6 host is its address,
// not its /64: the nodes of a cluster often share one /64, and a flooder
// among them would otherwise evict their greetings as its own.
func sourceOf(conn io.Closer) string {
	c, ok := conn.(interface{ RemoteAddr() net.Addr })
	if !ok || c.RemoteAddr() == nil {
		return ""
	}
	host := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().String() // ::ffff:a.b.c.d is the host a.b.c.d
	}
	return host
}

// evictOldest closes, if there is one, the connection admitted first
// among those not yet authenticated nor evicted: of the source with the
// most of them (the first admitted of the tied sources) when it holds more
// than a quarter of the places (at least 3), else of all.
func (g *Gate) evictOldest() {
	g.mu.Lock()
	count := make(map[string]int, 4)
	most := 0
	for _, t := range g.live {
		if !t.authenticated && !t.evicted {
			count[t.source]++
			most = max(most, count[t.source])
		}
	}
	if most <= max(2, cap(g.tokens)/4) {
		most = 0 // no source floods: first in, first out
	}
	var victim *Ticket
	for _, t := range g.live {
		if !t.authenticated && !t.evicted && (most == 0 || count[t.source] == most) {
			victim = t
			victim.evicted = true
			break
		}
	}
	g.mu.Unlock()
	if victim != nil {
		_ = victim.conn.Close()
	}
}

// Close closes every connection being greeted and makes later calls to
// Admit return false: the listener is closing.
func (g *Gate) Close() {
	g.mu.Lock()
	g.closed = true
	live := append([]*Ticket(nil), g.live...)
	g.mu.Unlock()
	for _, t := range live {
		_ = t.conn.Close()
	}
}

// Greeting returns how many connections are being greeted now.
func (g *Gate) Greeting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.live)
}

// Authenticated says the peer has proved the key: the Gate no longer
// closes its connection for a newer one. It returns false if the Gate
// already has (the greeting then fails on its next read or write).
func (t *Ticket) Authenticated() bool {
	t.g.mu.Lock()
	defer t.g.mu.Unlock()
	t.authenticated = true
	return !t.evicted
}

// Explain returns err, the reason the greeting failed, wrapped with
// ErrEvicted when the Gate closed the connection for a newer one.
func (t *Ticket) Explain(err error) error {
	t.g.mu.Lock()
	evicted := t.evicted
	t.g.mu.Unlock()
	if evicted && err != nil {
		return fmt.Errorf("%w (%d connections were being greeted): %w", ErrEvicted, cap(t.g.tokens), err)
	}
	return err
}

// Done ends the greeting: its place goes to the next connection. It does
// not close the connection, which is the caller's from now on. Calls after
// the first do nothing.
func (t *Ticket) Done() {
	g := t.g
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, x := range g.live {
		if x == t {
			g.live = append(g.live[:i], g.live[i+1:]...)
			<-g.tokens
			return
		}
	}
}
