package perftool

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/admit"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
)

// loopback is the Security of two ends without a key, on this host.
var loopback = endpoint.Security{InsecureLoopback: true}

// Keys of the tests: the server's, and another.
var (
	keyed    = endpoint.Security{Key: []byte("the key of both ends, 32 bytes..")}
	otherKey = endpoint.Security{Key: []byte("another key entirely, 32 bytes..")}
)

// testParams are a tool's parameters in the tests: magic testMagic.
type testParams struct{ Magic, Size, Count uint32 }

const testMagic = 0x54455354 // "TEST"

// refusal is one connection Accept refused.
type refusal struct {
	from string
	err  error
}

// acceptServer runs Accept on a fresh loopback listener in a goroutine.
type acceptServer struct {
	*toolproc.Server
	addr    string
	got     testParams
	mu      sync.Mutex
	refused []refusal
	conn    net.Conn
}

func startAccept(t *testing.T, timeout time.Duration, sec endpoint.Security) *acceptServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &acceptServer{addr: ln.Addr().String()}
	s.Server = toolproc.Go(func() error {
		var err error
		s.conn, err = Accept(ln, timeout, sec, testMagic, &s.got, nil, func(from net.Addr, err error) {
			s.mu.Lock()
			s.refused = append(s.refused, refusal{from.String(), err})
			s.mu.Unlock()
		})
		return err
	})
	t.Cleanup(func() {
		if s.Exited() && s.conn != nil {
			s.conn.Close()
		}
	})
	return s
}

// refusals returns the refusals so far.
func (s *acceptServer) refusals() []refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]refusal(nil), s.refused...)
}

// awaitRefusals waits until n connections have been refused.
func (s *acceptServer) awaitRefusals(t *testing.T, n int) []refusal {
	t.Helper()
	end := time.Now().Add(20 * time.Second)
	for len(s.refusals()) < n {
		if time.Now().After(end) {
			t.Fatalf("%d refusals, want %d: %v", len(s.refusals()), n, s.refusals())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return s.refusals()
}

// rawClient connects to the server and writes b (nothing when nil); the
// connection is closed when the test ends.
func rawClient(t *testing.T, addr string, b []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	if b != nil {
		_, err = c.Write(b)
		require.NoError(t, err)
	}
	return c
}

// encode returns p as a tool's client writes it.
func encode(t *testing.T, p any) []byte {
	t.Helper()
	b, err := binary.Append(nil, binary.BigEndian, p)
	require.NoError(t, err)
	return b
}

// TestAcceptKeyWaitsForGoodClient: a server with a key refuses, reports
// and outlives the connections that fail before they are a client (closed
// at once, silent for the timeout, garbage, another key, this tool's
// parameters sent without proving the key), reading none of their
// parameters, and then takes the client that holds the key. Before, the
// first connection ended the server, and the server read a client's
// parameters before any authentication.
func TestAcceptKeyWaitsForGoodClient(t *testing.T) {
	s := startAccept(t, time.Second, keyed)
	want := testParams{Magic: testMagic, Size: 64, Count: 1000}
	var from []string

	c := rawClient(t, s.addr, nil)
	from = append(from, c.LocalAddr().String())
	c.Close()
	s.awaitRefusals(t, 1)

	c = rawClient(t, s.addr, nil) // silent: cut at the timeout
	from = append(from, c.LocalAddr().String())
	s.awaitRefusals(t, 2)

	c = rawClient(t, s.addr, []byte("GET / HTTP/1.0\r\n\r\n"))
	from = append(from, c.LocalAddr().String())
	_, _ = io.Copy(io.Discard, c) // the refusal, then the close
	s.awaitRefusals(t, 3)

	_, err := Dial(s.addr, 5*time.Second, otherKey, want)
	require.ErrorIs(t, err, endpoint.ErrAuth)
	require.ErrorContains(t, err, "both ends need the same key")
	from = append(from, "")
	s.awaitRefusals(t, 4)

	c = rawClient(t, s.addr, encode(t, want)) // a client without a key
	from = append(from, c.LocalAddr().String())
	_, _ = io.Copy(io.Discard, c)
	refused := s.awaitRefusals(t, 5)
	require.Zero(t, s.got, "parameters were read from a connection that did not prove the key")

	conn, err := Dial(s.addr, 5*time.Second, keyed, want)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, s.Wait())
	require.Equal(t, want, s.got)

	require.Len(t, refused, 5)
	for i, r := range refused {
		if from[i] != "" {
			require.Equal(t, from[i], r.from, "refusal %d: %v", i, r.err)
		}
	}
	require.ErrorIs(t, refused[0].err, io.EOF)
	require.ErrorIs(t, refused[1].err, os.ErrDeadlineExceeded)
	require.ErrorIs(t, refused[2].err, endpoint.ErrMalformed)
	require.ErrorIs(t, refused[3].err, endpoint.ErrAuth)
	require.ErrorContains(t, refused[4].err, "without proving the key first")
}

// TestAcceptKeyNoClient: a server with a key that only an unauthenticated
// client reaches, its parameters well formed, reads none of them and
// ends at its deadline with an error naming the refusal.
func TestAcceptKeyNoClient(t *testing.T) {
	s := startAccept(t, 100*time.Millisecond, keyed)
	c := rawClient(t, s.addr, encode(t, testParams{Magic: testMagic, Size: 64, Count: 1000}))
	err := s.Wait()
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.ErrorIs(t, err, endpoint.ErrMalformed, "the refusal is named")
	require.ErrorContains(t, err, "refused 1 connection(s), the last from "+c.LocalAddr().String())
	require.Zero(t, s.got)
	require.Nil(t, s.conn)
}

// TestAcceptNoClientSaysSo: a server that no connection reaches ends at
// its deadline with an error saying that no client came, within how long,
// wrapping the listener's timeout.
func TestAcceptNoClientSaysSo(t *testing.T) {
	s := startAccept(t, 20*time.Millisecond, loopback)
	err := s.Wait()
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.ErrorContains(t, err, "no client came within 200ms")
	require.Nil(t, s.conn)
}

// TestAcceptDialKeyThenExchange: with a key, the parameters travel in a
// sealed frame after the authentication, and the endpoints' exchange that
// follows on the same connection reads none of its bytes.
func TestAcceptDialKeyThenExchange(t *testing.T) {
	s := startAccept(t, 5*time.Second, keyed)
	want := testParams{Magic: testMagic, Size: 8 << 20, Count: 7}
	conn, err := Dial(s.addr, 5*time.Second, keyed, want)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, s.Wait())
	require.Equal(t, want, s.got)

	ep := func(qpn uint32) endpoint.Endpoint {
		return endpoint.Endpoint{Transport: endpoint.TransportRC, QPN: qpn, LID: 1, PSN: 1, MTU: ctx.MTU1024}
	}
	cx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		peer, err := endpoint.Exchange(cx, s.conn, endpoint.AcceptSide, ep(0x200), keyed)
		if err == nil && peer.QPN != 0x100 {
			err = errors.New("the server got the wrong endpoint")
		}
		served <- err
	}()
	peer, err := endpoint.Exchange(cx, conn, endpoint.DialSide, ep(0x100), keyed)
	require.NoError(t, err)
	require.Equal(t, uint32(0x200), peer.QPN)
	require.NoError(t, <-served)
}

// TestAcceptLoopbackWaits: without a key, a connection closed or silent
// before its parameters is refused and the server waits on; a client of
// another tool (another magic number) and a client with a key end it at
// once, saying why.
func TestAcceptLoopbackWaits(t *testing.T) {
	s := startAccept(t, 300*time.Millisecond, loopback)
	rawClient(t, s.addr, nil).Close()
	rawClient(t, s.addr, []byte{0x54, 0x45}) // half a magic, then silent
	s.awaitRefusals(t, 2)
	want := testParams{Magic: testMagic, Size: 1, Count: 2}
	conn, err := Dial(s.addr, 5*time.Second, loopback, want)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, s.Wait())
	require.Equal(t, want, s.got)

	s = startAccept(t, 5*time.Second, loopback)
	rawClient(t, s.addr, encode(t, testParams{Magic: 0x4d58504e}))
	err = s.Wait()
	require.ErrorIs(t, err, ErrBadParams)
	require.ErrorContains(t, err, `magic "MXPN"`)

	s = startAccept(t, 5*time.Second, loopback)
	_, err = Dial(s.addr, 5*time.Second, keyed, want)
	require.Error(t, err)
	require.ErrorContains(t, err, "both ends need the same key")
	err = s.Wait()
	require.ErrorContains(t, err, "the client proves a key and this server has none")
}

// TestAcceptKeyBadParams: a client that proved the key and sends the
// parameters of another tool, or of another size, ends the server at once
// with an error matching ErrBadParams, and is told why: its Dial fails
// with ErrRefused and the server's reason.
func TestAcceptKeyBadParams(t *testing.T) {
	for _, c := range []struct {
		p    any
		want string
	}{
		{struct{ Magic, A, B, C, D uint32 }{Magic: 0x4d585046}, `magic "MXPF"`},
		{struct{ Magic, A uint32 }{Magic: testMagic}, "8 bytes of parameters, want 12"},
		{[2]byte{}, "2 bytes of parameters, want 12"},
	} {
		s := startAccept(t, 5*time.Second, keyed)
		_, err := Dial(s.addr, 5*time.Second, keyed, c.p)
		require.ErrorIs(t, err, ErrRefused, "%+v", c.p)
		require.ErrorContains(t, err, c.want)
		err = s.Wait()
		require.ErrorIs(t, err, ErrBadParams, "%+v", c.p)
		require.ErrorContains(t, err, c.want)
		require.Empty(t, s.refusals())
	}
}

// TestRefusals: a refusal is one line on the command's stderr naming the
// remote address and the reason.
func TestRefusals(t *testing.T) {
	var b strings.Builder
	Refusals(&b, "tool")(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5}, errors.New("no"))
	require.Equal(t, "tool: refused the connection from 10.0.0.1:5: no; waiting for another client\n", b.String())
}

// TestAcceptSilentConnectionsDoNotHoldOut: with more silent connections
// open than the server greets at once, a client that holds the key gets
// through at once, not after their timeouts; the oldest silent ones are
// closed to make room, and reported as refused.
func TestAcceptSilentConnectionsDoNotHoldOut(t *testing.T) {
	const timeout = 10 * time.Second
	s := startAccept(t, timeout, keyed)
	for range acceptMaxGreeting + 8 {
		rawClient(t, s.addr, nil)
	}
	evicted := s.awaitRefusals(t, 8)
	for _, r := range evicted {
		require.ErrorIs(t, r.err, admit.ErrEvicted)
	}
	want := testParams{Magic: testMagic, Size: 64, Count: 1000}
	start := time.Now()
	conn, err := Dial(s.addr, timeout/2, keyed, want)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, s.Wait())
	require.Less(t, time.Since(start), timeout/2, "the silent connections held the server")
	require.Equal(t, want, s.got)
}

// TestDialTimeoutIsNotAKeyMismatch: a client with a key whose server says
// nothing within the timeout is told so, not that the keys differ; one
// whose server hangs up on it is told that both ends need the same key.
func TestDialTimeoutIsNotAKeyMismatch(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	conns := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	want := testParams{Magic: testMagic}
	_, err = Dial(ln.Addr().String(), 200*time.Millisecond, keyed, want)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NotContains(t, err.Error(), "same key")
	(<-conns).Close()

	go func() { (<-conns).Close() }() // hangs up at once
	_, err = Dial(ln.Addr().String(), 5*time.Second, keyed, want)
	require.ErrorContains(t, err, "the server hung up: both ends need the same key")
}

// TestDialSilentServerIsNotAHangUp: a client without a key whose server
// takes the parameters and says nothing within the timeout is told that
// no answer came, not that the server hung up.
func TestDialSilentServerIsNotAHangUp(t *testing.T) {
	addr := toolproc.ServeOne(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	_, err := Dial(addr, 200*time.Millisecond, loopback, testParams{Magic: testMagic})
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NotContains(t, err.Error(), "hung up")
	require.ErrorContains(t, err, "no answer within 200ms")
}
