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
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server = <-accepted
	require.NotNil(t, server)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// exchangeBoth runs Exchange on both ends at once.
func exchangeBoth(ctx context.Context, a, b net.Conn, ea, eb Endpoint) (gotA, gotB Endpoint, errA, errB error) {
	done := make(chan struct{})
	go func() {
		gotB, errB = Exchange(ctx, b, eb)
		close(done)
	}()
	gotA, errA = Exchange(ctx, a, ea)
	<-done
	return
}

func TestExchangeTCP(t *testing.T) {
	a, b := tcpPair(t)
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
	// net.Pipe has no buffer: a send-then-receive on both sides deadlocks
	// unless Exchange sends while it receives.
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
	a, _ := tcpPair(t)
	bad := sampleRC()
	bad.QPN = 1 << 24
	_, err := Exchange(context.Background(), a, bad)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, err, ErrRange)
}

// hostile returns the client end of a connection whose server end first
// reads the client's whole frame (an encoded sampleUD), so that closing it
// is a clean EOF and not a reset, then runs f and drains what follows.
func hostile(t *testing.T, f func(c net.Conn)) net.Conn {
	client, server := tcpPair(t)
	go func() {
		_, _ = io.ReadFull(server, make([]byte, sampleUD().EncodedSize()))
		f(server)
		_, _ = io.Copy(io.Discard, server)
	}()
	return client
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
			buf := make([]byte, 4096)
			r := rand.New(rand.NewPCG(1, 2))
			for i := range buf {
				buf[i] = byte(r.Uint32())
			}
			_, _ = c.Write(buf)
		}, []error{ErrMalformed, ErrBadMagic}, true},
		{"truncated frame then close", func(c net.Conn) {
			_, _ = c.Write(valid[:len(valid)-5])
			_ = c.Close()
		}, []error{ErrMalformed, ErrTruncated, io.ErrUnexpectedEOF}, true},
		{"close before a byte", func(c net.Conn) { _ = c.Close() }, []error{io.EOF}, true},
		{"huge length", func(c net.Conn) {
			h := append([]byte(nil), valid[:headerSize]...)
			binary.BigEndian.PutUint16(h[6:], 0xfff0)
			_, _ = c.Write(h)
		}, []error{ErrMalformed, ErrLength}, true},
		{"bad field", func(c net.Conn) {
			b := append([]byte(nil), valid...)
			binary.BigEndian.PutUint32(b[offPSN:], 1<<30)
			_, _ = c.Write(b)
		}, []error{ErrMalformed, ErrRange}, true},
		{"truncated frame, peer stays", func(c net.Conn) {
			_, _ = c.Write(valid[:20])
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
			_, err := Exchange(ctx, conn, sampleUD())
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
	_, err := Exchange(ctx, conn, sampleUD())
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestExchangeAlreadyCancelled(t *testing.T) {
	conn := hostile(t, func(net.Conn) {})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Exchange(ctx, conn, sampleUD())
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
	_, err := Exchange(ctx, a, sampleRC())
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestWithDeadlineDefault(t *testing.T) {
	ctx, cancel := withDeadline(context.Background())
	defer cancel()
	d, ok := ctx.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(DefaultTimeout), d, 5*time.Second)

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
			if _, err := Exchange(context.Background(), c, sampleDC()); err != nil {
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
		if _, err := Exchange(ctx, c, sampleRC()); err != nil {
			b.Fatal(err)
		}
	}
}
