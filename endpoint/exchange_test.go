package endpoint

import (
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
)

// testSec is the Security of the tests' exchanges.
var testSec = Security{Key: testKey}

// exchangeBoth runs Exchange on both ends at once, a on the dial side.
func exchangeBoth(ctx context.Context, a, b net.Conn, ea, eb Endpoint) (gotA, gotB Endpoint, errA, errB error) {
	done := make(chan struct{})
	go func() {
		gotB, errB = Exchange(ctx, b, AcceptSide, eb, testSec)
		close(done)
	}()
	gotA, errA = Exchange(ctx, a, DialSide, ea, testSec)
	<-done
	return
}

func TestExchangeTCP(t *testing.T) {
	a, b := toolproc.TCPPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ea, eb := sampleRC(), sampleDC()
	gotA, gotB, errA, errB := exchangeBoth(ctx, a, b, ea, eb)
	require.NoError(t, errA)
	require.NoError(t, errB)
	require.Equal(t, eb, gotA)
	require.Equal(t, ea, gotB)

	// The deadline is cleared: the connection still works afterwards, and a
	// second exchange on it succeeds.
	gotA, gotB, errA, errB = exchangeBoth(context.Background(), a, b, sampleUD(), ea)
	require.NoError(t, errA)
	require.NoError(t, errB)
	require.Equal(t, ea, gotA)
	require.Equal(t, sampleUD(), gotB)
}

func TestExchangePipe(t *testing.T) {
	// net.Pipe has no buffer: the messages must alternate, or both ends
	// block on a write.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gotA, gotB, errA, errB := exchangeBoth(ctx, a, b, sampleUD(), sampleDC())
	require.NoError(t, errA)
	require.NoError(t, errB)
	require.Equal(t, sampleDC(), gotA)
	require.Equal(t, sampleUD(), gotB)
}

func TestExchangeRejectsInvalidLocal(t *testing.T) {
	a, _ := toolproc.TCPPair(t)
	bad := sampleRC()
	bad.QPN = 1 << 24
	_, err := Exchange(context.Background(), a, DialSide, bad, testSec)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorIs(t, err, errRange)
	_, err = Exchange(context.Background(), a, Side(0), sampleRC(), testSec)
	require.ErrorIs(t, err, errRange)
	require.Contains(t, err.Error(), "side 0")
}

// hostile returns the dialing end of a connection whose accepting end runs
// f and then drains what follows.
func hostile(t *testing.T, f func(c net.Conn)) net.Conn {
	client, server := toolproc.TCPPair(t)
	go func() {
		f(server)
		_, _ = io.Copy(io.Discard, server)
	}()
	return client
}

// readHello reads the dialer's hello, so that closing afterwards is a
// clean EOF and not a reset.
func readHello(c net.Conn) { _, _ = readFrame(c, meshHello, helloSize, -1) }

// authenticated runs the accept side's proofs with testKey and reads the
// dialer's offer, then runs f with the session.
func authenticated(f func(c net.Conn, s *session)) func(net.Conn) {
	return func(c net.Conn) {
		s, err := acceptAuth(c, testSec, purposeExchange)
		if err != nil {
			return
		}
		if _, err := readFrame(c, meshOffer, maxEncodedSize+macSize, -1); err != nil {
			return
		}
		f(c, s)
	}
}

func TestExchangeGarbage(t *testing.T) {
	valid, err := sampleRC().MarshalBinary()
	require.NoError(t, err)
	cases := []struct {
		name  string
		peer  func(c net.Conn)
		is    []error
		quick bool // must fail well before the deadline
	}{
		{"random bytes", func(c net.Conn) {
			readHello(c)
			buf := make([]byte, 4096)
			r := rand.New(rand.NewPCG(1, 2))
			for i := range buf {
				buf[i] = byte(r.Uint32())
			}
			_, _ = c.Write(buf)
		}, []error{ErrMalformed, errBadMagic}, true},
		{"a version 1 peer (a bare endpoint)", func(c net.Conn) {
			_, _ = c.Write(valid)
		}, []error{ErrMalformed, errVersion}, true},
		{"truncated challenge then close", func(c net.Conn) {
			readHello(c)
			_, _ = c.Write(meshFrame(meshChallenge, make([]byte, challengeSize))[:30])
			_ = c.Close()
		}, []error{ErrMalformed, errTruncated, io.ErrUnexpectedEOF}, true},
		{"close before a byte", func(c net.Conn) { readHello(c); _ = c.Close() }, []error{io.EOF}, true},
		{"huge length", func(c net.Conn) {
			readHello(c)
			h := meshFrame(meshChallenge, nil)
			binary.BigEndian.PutUint32(h[8:], 0xfffffff0)
			_, _ = c.Write(h)
		}, []error{ErrMalformed, errLength}, true},
		{"wrong proof", func(c net.Conn) {
			readHello(c)
			_, _ = c.Write(meshFrame(meshChallenge, make([]byte, challengeSize)))
		}, []error{ErrAuth}, true},
		{"bad field", authenticated(func(c net.Conn, s *session) {
			b := append([]byte(nil), valid...)
			binary.BigEndian.PutUint32(b[offPSN:], 1<<30)
			_ = s.writeSealed(toDialer, meshTable, b)
		}), []error{ErrMalformed, errRange}, true},
		{"endpoint without its tag", authenticated(func(c net.Conn, s *session) {
			_, _ = c.Write(meshFrame(meshTable, valid))
		}), []error{ErrAuth}, true},
		{"truncated frame, peer stays", func(c net.Conn) {
			readHello(c)
			_, _ = c.Write(meshFrame(meshChallenge, make([]byte, challengeSize))[:20])
		}, []error{context.DeadlineExceeded, os.ErrDeadlineExceeded}, false},
		{"never answers", func(net.Conn) {}, []error{context.DeadlineExceeded, os.ErrDeadlineExceeded}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn := hostile(t, c.peer)
			// Failures on the bytes get a generous deadline that they must
			// not reach; silent peers a short one that they must.
			limit := 300 * time.Millisecond
			if c.quick {
				limit = 5 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			start := time.Now()
			_, err := Exchange(ctx, conn, DialSide, sampleUD(), testSec)
			took := time.Since(start)
			require.Error(t, err)
			for _, want := range c.is {
				require.ErrorIs(t, err, want)
			}
			require.Contains(t, err.Error(), "endpoint: exchange with 127.0.0.1:")
			if c.quick {
				require.NoError(t, ctx.Err(), "should fail on the bytes, not the deadline: %v", err)
			} else {
				require.GreaterOrEqual(t, took, limit-10*time.Millisecond)
			}
			require.Less(t, took, limit+2*time.Second, "no hang past the deadline")
		})
	}
}

func TestExchangeCancel(t *testing.T) {
	conn := hostile(t, func(net.Conn) {})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := Exchange(ctx, conn, DialSide, sampleUD(), testSec)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestExchangeAlreadyCancelled(t *testing.T) {
	conn := hostile(t, func(net.Conn) {})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Exchange(ctx, conn, DialSide, sampleUD(), testSec)
	require.ErrorIs(t, err, context.Canceled)
}

func TestExchangeWriteBlocked(t *testing.T) {
	// The peer neither reads nor writes on an unbuffered pipe: both the send
	// and the receive block, and the deadline must release both.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Exchange(ctx, a, DialSide, sampleRC(), testSec)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestWithDeadlineDefault(t *testing.T) {
	ctx, cancel := withDeadline(context.Background())
	defer cancel()
	d, ok := ctx.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(defaultTimeout), d, 5*time.Second)

	parent, pcancel := context.WithTimeout(context.Background(), time.Minute)
	defer pcancel()
	ctx2, cancel2 := withDeadline(parent)
	defer cancel2()
	d2, _ := ctx2.Deadline()
	pd, _ := parent.Deadline()
	require.Equal(t, pd, d2)
}

func BenchmarkExchangeLoopback(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		for {
			if _, err := Exchange(context.Background(), c, AcceptSide, sampleDC(), testSec); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(b, err)
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Exchange(ctx, c, DialSide, sampleRC(), testSec); err != nil {
			b.Fatal(err)
		}
	}
}

// TestExchangePerftestPeer: a peer that speaks perftest's TCP exchange
// begins with its version string ("6.06", NUL-padded): the exchange fails
// at once on the magic, with an error that says what the peer speaks.
func TestExchangePerftestPeer(t *testing.T) {
	conn := hostile(t, func(c net.Conn) {
		_, _ = c.Write(append([]byte("6.06"), make([]byte, 60)...))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Exchange(ctx, conn, DialSide, sampleUD(), testSec)
	require.ErrorIs(t, err, ErrMalformed)
	require.ErrorIs(t, err, errBadMagic)
	require.ErrorContains(t, err, `"6.06": the peer speaks perftest's exchange`)
	require.NoError(t, ctx.Err(), "failed on the deadline, not the bytes")

}

// cancelAtConn cancels a context once n bytes have been read through it,
// and gives the context's watcher time to act before the read returns.
type cancelAtConn struct {
	net.Conn
	n      int
	cancel context.CancelFunc
}

func (c *cancelAtConn) Read(b []byte) (int, error) {
	k, err := c.Conn.Read(b)
	c.n -= k
	if c.n <= 0 && c.cancel != nil {
		c.cancel()
		c.cancel = nil
		time.Sleep(20 * time.Millisecond)
	}
	return k, err
}

// An exchange whose context ends while its last frame is read succeeds,
// and leaves the connection without a deadline, as any success does.
func TestExchangeSuccessClearsDeadline(t *testing.T) {
	a, b := toolproc.TCPPair(t)
	ea, eb := sampleRC(), sampleDC()
	total := meshHeaderSize + challengeSize + meshHeaderSize + eb.encodedSize() + macSize
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Exchange(context.Background(), b, AcceptSide, eb, testSec)
		done <- err
	}()
	got, err := Exchange(parent, &cancelAtConn{Conn: a, n: total, cancel: cancel}, DialSide, ea, testSec)
	require.NoError(t, <-done)
	require.NoError(t, err)
	require.Equal(t, eb, got)
	_, err = b.Write([]byte{42})
	require.NoError(t, err)
	var buf [1]byte
	_, err = a.Read(buf[:])
	require.NoError(t, err, "the connection's deadline is cleared after a successful Exchange")
	require.Equal(t, byte(42), buf[0])
}

// TestNilConnectionsRefused: a nil connection or listener, also a nil
// pointer of a connection or listener type, is refused with an error
// matching ctx.ErrInvalidArgument, not dereferenced.
func TestNilConnectionsRefused(t *testing.T) {
	bg := context.Background()
	for name, conn := range map[string]net.Conn{"nil": nil, "nil *net.TCPConn": (*net.TCPConn)(nil)} {
		_, err := Exchange(bg, conn, DialSide, sampleRC(), testSec)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "Exchange, %s", name)
		_, _, err = WatchConn(bg, conn, 0)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "WatchConn, %s", name)
	}
	for name, ln := range map[string]net.Listener{"nil": nil, "nil *net.TCPListener": (*net.TCPListener)(nil)} {
		_, err := NewMeshListener(ln, 2, MeshOptions{Security: testSec})
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "NewMeshListener, %s", name)
	}
}

// TestExchangeAlreadyCancelledSendsNothing: an Exchange whose context has
// ended before it starts returns the context's error without sending a
// byte, even to a peer that answers at once.
func TestExchangeAlreadyCancelledSendsNothing(t *testing.T) {
	for i := range 50 {
		a, b := toolproc.TCPPair(t)
		got := make(chan int, 1)
		go func() {
			n, _ := io.Copy(io.Discard, b)
			got <- int(n)
		}()
		c, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Exchange(c, a, DialSide, sampleRC(), testSec)
		require.ErrorIs(t, err, context.Canceled, "try %d", i)
		_ = a.Close()
		require.Zero(t, <-got, "try %d: bytes sent after the context ended", i)
		_ = b.Close()
	}
}
