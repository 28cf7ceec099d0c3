package sim

import (
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/admit"
	"github.com/mlx5kit/mlx5kit/internal/connpeek"
)

// fdConnPair returns an fdConn for the accepted end of a loopback TCP
// connection and the dialing end as a plain net.Conn.
func fdConnPair(t *testing.T) (*fdConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = peer.Close() })
	c, err := ln.Accept()
	require.NoError(t, err)
	fc, err := newFDConn(c)
	require.NoError(t, err)
	t.Cleanup(fc.release)
	return fc, peer
}

// A read deadline is a point in time (net.Conn's contract, and what the
// handshake's tcpHandshakeWait relies on): a peer that trickles a byte
// now and then must not keep a read going past it.
func TestFDConnDeadlineIsAbsolute(t *testing.T) {
	fc, peer := fdConnPair(t)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := peer.Write([]byte{0}); err != nil {
					return
				}
			}
		}
	}()
	require.NoError(t, fc.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	start := time.Now()
	n, err := io.ReadFull(fc, make([]byte, 40)) // 40 bytes: 2 s at one byte per 50 ms
	elapsed := time.Since(start)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "read went on for %v past a 200 ms deadline", elapsed)
	// Counted in bytes, not time, so that a stalled machine cannot fail
	// it: within 200 ms the peer writes 4 or 5 of them; a deadline that
	// each byte pushed on would have read far more before it ran out.
	require.LessOrEqual(t, n, 10, "read %d bytes in %v past a 200 ms deadline", n, elapsed)
}

// An unauthenticated peer that fails the proof is refused; the refusal
// drains the peer for 250 ms (lingerTimeout) at most. A peer that trickles
// bytes must not hold the listener's greeting (and with it Fabric.Close)
// for longer.
func TestLinkRefusalNotHeldByTrickle(t *testing.T) {
	skipOnEmulatedCPU(t)
	e1 := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	st, _ := e1.f.Link()
	conn, err := net.Dial("tcp", st.Address)
	require.NoError(t, err)
	defer conn.Close()
	// A mesh hello frame: magic "MXMS", version 2, type 1 (hello), length 40.
	hdr := func(typ byte, n int) []byte {
		b := binary.BigEndian.AppendUint32(nil, 0x4d584d53)
		b = binary.BigEndian.AppendUint16(b, 2)
		b = append(b, typ, 0)
		return binary.BigEndian.AppendUint32(b, uint32(n))
	}
	hello := append(hdr(1, 40), make([]byte, 40)...)
	_, _ = rand.Read(hello[12:44])
	_, err = conn.Write(hello)
	require.NoError(t, err)
	_, err = io.ReadFull(conn, make([]byte, 12+64)) // the challenge
	require.NoError(t, err)
	_, err = conn.Write(append(hdr(5, 32), make([]byte, 32)...)) // a wrong proof
	require.NoError(t, err)
	_, err = io.ReadFull(conn, make([]byte, 12)) // the generic refusal
	require.NoError(t, err)
	// Trickle a byte every 100 ms for 3 s.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 30; i++ {
			if _, err := conn.Write([]byte{0}); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	defer func() { <-done }()
	start := time.Now()
	refused := func() bool { s, _ := e1.f.Link(); return s.Refused == 1 }
	for !refused() && time.Since(start) < 1500*time.Millisecond {
		time.Sleep(5 * time.Millisecond)
	}
	require.True(t, refused(), "the refusal of a peer that failed the proof is still lingering after %v", time.Since(start))
	s, _ := e1.f.Link()
	require.ErrorIs(t, s.LastRefusal, endpoint.ErrAuth)
}

// A connection that never speaks must not hold the listening Fabric's
// Close for the handshake's whole 10 s: closing ends the handshakes in
// flight.
func TestLinkCloseNotHeldBySilentPeer(t *testing.T) {
	skipOnEmulatedCPU(t)
	e1 := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	st, _ := e1.f.Link()
	conn, err := net.Dial("tcp", st.Address)
	require.NoError(t, err)
	defer conn.Close()
	time.Sleep(100 * time.Millisecond) // accepted, its greeting waits for a hello
	start := time.Now()
	require.NoError(t, e1.f.Close())
	require.Less(t, time.Since(start), 2*time.Second, "Close waited for a silent peer's handshake")
}

// TestLinkGreetsABoundedNumber: a flood of connections that say nothing
// is greeted tcpMaxGreeting at a time, the oldest closed as newer ones
// arrive, and a Fabric that connects while they are all still open links
// at once, not after their handshakes time out.
func TestLinkGreetsABoundedNumber(t *testing.T) {
	skipOnEmulatedCPU(t)
	e1 := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	st, _ := e1.f.Link()
	var silent []net.Conn
	for i := 0; i < 2*tcpMaxGreeting; i++ {
		c, err := net.Dial("tcp", st.Address)
		require.NoError(t, err)
		silent = append(silent, c)
	}
	t.Cleanup(func() {
		for _, c := range silent {
			_ = c.Close()
		}
	})
	// The first tcpMaxGreeting are closed for the next ones, which are
	// greeted.
	// A look that does not wait: a read with a short deadline misses an
	// end already there when the deadline passes before the read starts
	// (a loaded machine).
	dropped := func() (n int) {
		for _, c := range silent {
			if s, _ := connpeek.Peek(c); s == connpeek.Closed {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return dropped() == tcpMaxGreeting }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, tcpMaxGreeting, e1.f.tcp.gate.Greeting(), "connections greeted at once")
	require.Equal(t, tcpMaxGreeting, dropped(), "connections closed")
	st, _ = e1.f.Link()
	require.Equal(t, tcpMaxGreeting, st.Refused)
	require.ErrorIs(t, st.LastRefusal, admit.ErrEvicted)

	start := time.Now()
	e2 := newEnv(t, Options{Mode: Engine, Link: st.Address, LinkKey: testLinkKey})
	require.Eventually(t, func() bool { s, _ := e1.f.Link(); return s.Peers == 1 }, tcpHandshakeWait, time.Millisecond)
	require.Less(t, time.Since(start), tcpHandshakeWait/2, "the silent connections held the listener")
	_, ok := e2.f.Link()
	require.True(t, ok)
	require.Equal(t, tcpMaxGreeting+1, dropped(), "one more silent connection closed for the Fabric")
}

// TestLinkDialCloseNotHeldBySilentListener: a connecting Fabric whose
// listener accepts and says nothing makes the link under the Fabric's
// lock; Close returns at once all the same, and the open fails with
// ctx.ErrClosed. Before, Close waited for the handshake's limit (10 s).
func TestLinkDialCloseNotHeldBySilentListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c // and says nothing
		}
	}()
	f := New(Options{Mode: Engine, Link: ln.Addr().String(), LinkKey: testLinkKey})
	opened := make(chan error, 1)
	go func() {
		_, err := f.Open("sim0")
		opened <- err
	}()
	c := <-accepted
	defer c.Close()
	start := time.Now()
	require.NoError(t, f.Close())
	require.Less(t, time.Since(start), tcpHandshakeWait/2, "Close waited for a silent listener's handshake")
	require.ErrorIs(t, <-opened, ctx.ErrClosed)
}
