package admit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// conn is a connection whose Close is observed.
type conn struct {
	once   sync.Once
	closed chan struct{}
}

func newConn() *conn { return &conn{closed: make(chan struct{})} }

func (c *conn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

func (c *conn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// admitted admits n connections, none of which waits.
func admitted(t *testing.T, g *Gate, n int) ([]*conn, []*Ticket) {
	t.Helper()
	var cs []*conn
	var ts []*Ticket
	for range n {
		c := newConn()
		tk, ok := g.Admit(c, nil)
		require.True(t, ok)
		cs, ts = append(cs, c), append(ts, tk)
	}
	return cs, ts
}

// admitAsync runs Admit for c in a goroutine and returns its result.
func admitAsync(g *Gate, c io.Closer, stop <-chan struct{}) <-chan *Ticket {
	out := make(chan *Ticket, 1)
	go func() {
		tk, ok := g.Admit(c, stop)
		if !ok {
			tk = nil
		}
		out <- tk
	}()
	return out
}

// A full Gate closes the oldest connection that has not authenticated, and
// admits the new one once that greeting is done; authenticated ones stay.
func TestFullGateEvictsOldestUnauthenticated(t *testing.T) {
	g := New(3)
	cs, ts := admitted(t, g, 3)
	require.Equal(t, 3, g.Greeting())
	require.True(t, ts[0].Authenticated())

	next := admitAsync(g, newConn(), nil)
	require.Eventually(t, cs[1].isClosed, 5*time.Second, time.Millisecond, "the oldest unauthenticated is closed")
	require.False(t, cs[0].isClosed(), "an authenticated connection is not evicted")
	require.False(t, cs[2].isClosed())
	select {
	case <-next:
		t.Fatal("admitted before the evicted greeting was done")
	case <-time.After(20 * time.Millisecond):
	}
	require.False(t, ts[1].Authenticated(), "authenticating after eviction reports it")
	require.ErrorIs(t, ts[1].Explain(io.EOF), ErrEvicted)
	require.ErrorIs(t, ts[1].Explain(io.EOF), io.EOF)
	require.NotErrorIs(t, ts[2].Explain(io.EOF), ErrEvicted)
	require.NoError(t, ts[1].Explain(nil))
	ts[1].Done()
	tk := <-next
	require.NotNil(t, tk)
	require.Equal(t, 3, g.Greeting())
}

// With every greeting authenticated nothing is evicted: Admit waits for
// one to be done, or for stop.
func TestAuthenticatedGreetingsAreWaitedFor(t *testing.T) {
	g := New(2)
	cs, ts := admitted(t, g, 2)
	for _, tk := range ts {
		require.True(t, tk.Authenticated())
	}
	stop := make(chan struct{})
	c := newConn()
	next := admitAsync(g, c, stop)
	select {
	case <-next:
		t.Fatal("admitted past the bound")
	case <-time.After(20 * time.Millisecond):
	}
	close(stop)
	require.Nil(t, <-next, "stop ends the wait")
	require.False(t, c.isClosed(), "a connection not admitted is left to the caller")
	for _, x := range cs {
		require.False(t, x.isClosed())
	}

	next = admitAsync(g, newConn(), nil)
	ts[0].Done()
	require.NotNil(t, <-next)
}

// Done frees one place however often it is called.
func TestDoneTwiceFreesOnePlace(t *testing.T) {
	g := New(2)
	_, ts := admitted(t, g, 2)
	ts[0].Done()
	ts[0].Done()
	require.Equal(t, 1, g.Greeting())
	admitted(t, g, 1)
	require.Equal(t, 2, g.Greeting())
	for _, tk := range ts[1:] {
		require.True(t, tk.Authenticated())
	}
	stop := make(chan struct{})
	close(stop)
	_, ok := g.Admit(newConn(), stop)
	require.False(t, ok, "a second Done freed a second place")
}

// Close closes every connection being greeted and admits no more.
func TestCloseEndsEveryGreeting(t *testing.T) {
	g := New(4)
	cs, ts := admitted(t, g, 3)
	require.True(t, ts[0].Authenticated())
	g.Close()
	for i, c := range cs {
		require.True(t, c.isClosed(), "connection %d", i)
	}
	c := newConn()
	_, ok := g.Admit(c, nil)
	require.False(t, ok)
	require.False(t, c.isClosed())
	for _, tk := range ts {
		tk.Done()
	}
	require.Zero(t, g.Greeting())
}

// A flood of admissions never has more than the bound being greeted.
func TestFloodStaysWithinTheBound(t *testing.T) {
	const bound, n = 4, 200
	g := New(bound)
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak, evicted := 0, 0
	for range n {
		c := newConn()
		tk, ok := g.Admit(c, nil)
		require.True(t, ok)
		mu.Lock()
		peak = max(peak, g.Greeting())
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-c.closed // a silent peer: its greeting ends when closed
			if errors.Is(tk.Explain(io.EOF), ErrEvicted) {
				mu.Lock()
				evicted++
				mu.Unlock()
			}
			tk.Done()
		}()
	}
	require.LessOrEqual(t, peak, bound)
	g.Close()
	wg.Wait()
	require.Equal(t, n-bound, evicted, "each admission past the bound evicted one")
	require.Zero(t, g.Greeting())
}

// hostConn is a conn that says which host it comes from.
type hostConn struct {
	*conn
	host string
}

func (c hostConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.ParseIP(c.host), Port: 40000}
}

// TestFloodFromOneHostSparesAnother: a host that floods a full Gate with
// silent connections evicts its own, never the older greeting of a peer
// on another host, however many it sends; before, the oldest greeting
// went first, so any flood faster than the peer's round trips kept it out.
func TestFloodFromOneHostSparesAnother(t *testing.T) {
	const bound = 4
	g := New(bound)
	honest := hostConn{newConn(), "192.0.2.7"}
	tk, ok := g.Admit(honest, nil)
	require.True(t, ok)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-honest.closed // its greeting ends if it is evicted
		tk.Done()
	}()
	for range 100 {
		c := hostConn{newConn(), "198.51.100.1"}
		ftk, ok := g.Admit(c, nil)
		require.True(t, ok)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-c.closed // a silent peer: its greeting ends when closed
			ftk.Done()
		}()
	}
	require.False(t, honest.isClosed(), "the other host's greeting was evicted")
	require.True(t, tk.Authenticated(), "the other host's peer still proves the key")
	g.Close()
	wg.Wait()
	require.Zero(t, g.Greeting())
}

// TestSourceOf: the host of a connection that says where it comes from,
// without the port; "" for one that does not.
func TestSourceOf(t *testing.T) {
	require.Equal(t, "192.0.2.7", sourceOf(hostConn{newConn(), "192.0.2.7"}))
	require.Equal(t, "2001:db8::1", sourceOf(hostConn{newConn(), "2001:db8::1"}))
	require.Empty(t, sourceOf(newConn()))
}

// TestThinFloodFirstInFirstOut: a flood spread over many sources, none
// holding more than a quarter of the places, is met first in, first out:
// a host greeting two peers at once is not taken for the flood.
func TestThinFloodFirstInFirstOut(t *testing.T) {
	const bound = 8
	g := New(bound)
	var flood []hostConn
	var floodTickets []*Ticket
	for i := range 6 {
		c := hostConn{newConn(), fmt.Sprintf("2001:db8:%x::1", i+1)}
		tk, ok := g.Admit(c, nil)
		require.True(t, ok)
		flood, floodTickets = append(flood, c), append(floodTickets, tk)
	}
	ranks := []hostConn{{newConn(), "192.0.2.7"}, {newConn(), "192.0.2.7"}}
	for _, c := range ranks {
		_, ok := g.Admit(c, nil)
		require.True(t, ok)
	}
	admitted := admitAsync(g, hostConn{newConn(), "2001:db8:99::1"}, nil)
	select { // the oldest goes, not a rank
	case <-flood[0].closed:
	case <-ranks[0].closed:
		t.Fatal("a rank's greeting was evicted for the thin flood")
	case <-ranks[1].closed:
		t.Fatal("a rank's greeting was evicted for the thin flood")
	case <-time.After(5 * time.Second):
		t.Fatal("nothing was evicted")
	}
	floodTickets[0].Done()
	require.NotNil(t, <-admitted)
	for _, c := range ranks {
		require.False(t, c.isClosed())
	}
	g.Close()
}

// addrConn is a conn whose remote address prints as addr.
type addrConn struct {
	*conn
	addr string
}

type printedAddr string

func (a printedAddr) Network() string { return "tcp" }
func (a printedAddr) String() string  { return string(a) }

func (c addrConn) RemoteAddr() net.Addr { return printedAddr(c.addr) }

// TestSourceOfIsTheHost: a source is the remote host, whatever the port;
// an IPv4-mapped IPv6 address is its IPv4 host; IPv6 hosts of one /64 are
// different sources (a cluster's nodes often share one).
func TestSourceOfIsTheHost(t *testing.T) {
	require.Equal(t, sourceOf(addrConn{newConn(), "[2001:db8:1:2::5]:1"}), sourceOf(addrConn{newConn(), "[2001:db8:1:2::5]:2"}))
	require.NotEqual(t, sourceOf(addrConn{newConn(), "[2001:db8:1:2::5]:1"}), sourceOf(addrConn{newConn(), "[2001:db8:1:2::6]:1"}))
	require.Equal(t, "192.0.2.7", sourceOf(addrConn{newConn(), "[::ffff:192.0.2.7]:1"}))
	require.Equal(t, "192.0.2.7", sourceOf(addrConn{newConn(), "192.0.2.7:9"}))
	require.Equal(t, "not-an-address", sourceOf(addrConn{newConn(), "not-an-address"}))
}
