package perftool

import (
	"errors"
	"flag"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
)

// TestAcceptDialSync: the client's parameters reach the server, and an
// end that failed makes its peer fail too.
func TestAcceptDialSync(t *testing.T) {
	type params struct{ Magic, Size uint32 }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	var got params
	go func() {
		conn, err := Accept(ln, 10*time.Second, loopback, 7, &got, nil, nil)
		if err == nil {
			defer conn.Close()
			err = Sync(conn, 10*time.Second, errors.New("bad data"))
		}
		served <- err
	}()
	conn, err := Dial(ln.Addr().String(), 10*time.Second, loopback, params{Magic: 7, Size: 300})
	require.NoError(t, err)
	defer conn.Close()
	require.ErrorIs(t, Sync(conn, 10*time.Second, nil), ErrPeerFailed)
	require.NoError(t, <-served, "the failed end hears from a fine one")
	require.Equal(t, params{Magic: 7, Size: 300}, got)
}

// TestSyncPeerGone: Sync with a peer that closed its connection, before
// or after reading this end's word, says the peer is gone
// (endpoint.ErrPeerGone) rather than report a bare EOF.
func TestSyncPeerGone(t *testing.T) {
	for _, read := range []bool{false, true} {
		a, b := toolproc.TCPPair(t)
		if read {
			go func() {
				_, _ = io.ReadFull(b, make([]byte, 1))
				b.Close()
			}()
		} else {
			b.Close()
		}
		err := Sync(a, 5*time.Second, nil)
		require.ErrorIs(t, err, endpoint.ErrPeerGone, "peer closed after reading: %v", read)
		require.Contains(t, err.Error(), "synchronize with the peer: the peer closed its connection")
	}
}

// TestSyncKeepAlive: an end waiting in Sync with a short timeout waits on
// while its peer measures for longer, as long as the peer says it is there
// (KeepAlive); a peer that says nothing for the timeout is given up, the
// error naming the wait.
func TestSyncKeepAlive(t *testing.T) {
	for _, alive := range []bool{true, false} {
		a, b := toolproc.TCPPair(t)
		done := make(chan error, 1)
		go func() {
			stop := func() {}
			if alive {
				stop = KeepAlive(b)
			}
			time.Sleep(4 * AliveEvery) // the measurement
			stop()
			done <- Sync(b, 5*time.Second, nil)
		}()
		timeout := 2 * AliveEvery
		err := Sync(a, timeout, nil)
		if alive {
			require.NoError(t, err)
			require.NoError(t, <-done)
			continue
		}
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		require.Contains(t, err.Error(), "no word from it for 500ms")
		a.Close()
		<-done
	}
}

// TestAcceptPerftestClient: a client that speaks perftest's exchange
// sends its version string and waits for the server's. A server without a
// key says so at once rather than wait out the timeout for parameters that
// never come; one with a key refuses it, saying so, and waits on (four
// bytes anyone can send before any proof must not end it) for the client
// that holds the key.
func TestAcceptPerftestClient(t *testing.T) {
	type params struct{ Magic, Size uint32 }
	for _, sec := range []endpoint.Security{loopback, keyed} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = c.Write(append([]byte("6.06"), make([]byte, 12)...))
		require.NoError(t, err)
		start := time.Now()
		var refusals []error
		var got params
		accepted := make(chan error, 1)
		go func() {
			conn, err := Accept(ln, time.Minute, sec, 7, &got, nil, func(_ net.Addr, err error) { refusals = append(refusals, err) })
			if conn != nil {
				conn.Close()
			}
			accepted <- err
		}()
		if len(sec.Key) == 0 {
			err = <-accepted
			c.Close()
			require.ErrorIs(t, err, ErrPerftestClient)
			require.ErrorContains(t, err, `(it sent version "6.06")`)
			require.Less(t, time.Since(start), 30*time.Second, "Accept waited for parameters that never come")
			continue
		}
		_, _ = io.Copy(io.Discard, c) // refused: closed
		c.Close()
		conn, err := Dial(addr, 5*time.Second, sec, params{Magic: 7, Size: 9})
		require.NoError(t, err)
		conn.Close()
		require.NoError(t, <-accepted)
		require.Equal(t, params{Magic: 7, Size: 9}, got)
		require.Len(t, refusals, 1)
		require.ErrorIs(t, refusals[0], ErrPerftestClient)
	}
}

func TestFlags(t *testing.T) {
	var device, provider, server, client, keyFile string
	var gid, port int
	var timeout time.Duration
	f := Flags{Device: &device, Provider: &provider, GIDIndex: &gid, Port: &port, Timeout: &timeout, Server: &server, Client: &client, KeyFile: &keyFile}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs)
	require.NoError(t, fs.Parse(nil))
	require.Equal(t, -1, gid)
	require.Equal(t, 1, port)
	require.Equal(t, 10*time.Second, timeout)
	require.Empty(t, f.Check())
	for args, want := range map[string][]string{
		"-provider":  {"-provider", "verbs"},
		"-gid-index": {"-gid-index", "256"},
		"-ib-port":   {"-ib-port", "0"},
		"-timeout":   {"-timeout", "0s"},
		"exclude":    {"-server", ":0", "-client", "h:1"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		f.Register(fs)
		require.NoError(t, fs.Parse(want))
		require.Contains(t, f.Check(), args)
	}
}

// TestSecurity: the key comes from -key-file or $MLX5KIT_KEY; without one
// the ends run unauthenticated on loopback only, and a server other hosts
// can reach is refused.
func TestSecurity(t *testing.T) {
	var server, keyFile string
	f := Flags{Server: &server, KeyFile: &keyFile}
	t.Setenv(EnvKey, "")

	sec, msg := f.Security()
	require.Empty(t, msg)
	require.Equal(t, endpoint.Security{InsecureLoopback: true}, sec)
	for _, s := range []string{"127.0.0.1:0", "[::1]:18515", "localhost:18515"} {
		server = s
		sec, msg = f.Security()
		require.Empty(t, msg, s)
		require.True(t, sec.InsecureLoopback, s)
	}
	for _, s := range []string{":18515", "0.0.0.0:1", "10.0.0.1:18515", "host:18515"} {
		server = s
		_, msg = f.Security()
		require.Contains(t, msg, "without a key", s)
		require.Contains(t, msg, EnvKey, s)
	}

	t.Setenv(EnvKey, "0123456789abcdef-from-env")
	sec, msg = f.Security()
	require.Empty(t, msg)
	require.Equal(t, []byte("0123456789abcdef-from-env"), sec.Key)
	t.Setenv(EnvKey, "short")
	_, msg = f.Security()
	require.Contains(t, msg, "at least 16")

	keyFile = filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("  0123456789abcdef-from-file\n"), 0o600))
	sec, msg = f.Security()
	require.Empty(t, msg)
	require.Equal(t, []byte("0123456789abcdef-from-file"), sec.Key, "the file wins over the environment, white space dropped")
	require.NoError(t, os.WriteFile(keyFile, []byte("\n"), 0o600))
	_, msg = f.Security()
	require.Contains(t, msg, "is empty")
	keyFile += ".missing"
	_, msg = f.Security()
	require.Contains(t, msg, "-key-file")
}

func TestWant(t *testing.T) {
	require.Equal(t, PayloadByte(1), Want(1, 3, true, 0x01020304), "a message under four bytes is not stamped")
	require.Equal(t, byte(0x02), Want(1, 8, true, 0x01020304))
	require.Equal(t, PayloadByte(4), Want(4, 8, true, 0x01020304))
	require.Equal(t, PayloadByte(0), Want(0, 8, false, 0x01020304))
}

func TestSummarize(t *testing.T) {
	var l Latency
	for _, v := range []uint64{1000, 1000, 3000, 3000} {
		l.Record(v)
	}
	counter := cycles.Info{Hz: 1e9} // a tick is a nanosecond
	s := l.Summarize(counter, 2)
	require.Equal(t, uint64(4), s.Count)
	require.InDelta(t, 0.5, s.Min, 0.05)
	require.InDelta(t, 1.5, s.Max, 0.05)
	require.InDelta(t, 1.0, s.Avg, 1e-9)
	require.InDelta(t, 0.5, s.Stdev, 1e-9)
}

// TestEndsOnSoftwareHCA sets up two ends, connects them and sends one
// RDMA_WRITE_IMM and one SEND each way.
func TestEndsOnSoftwareHCA(t *testing.T) {
	cfg := EndConfig{Size: 64, SendDepth: 8, RecvDepth: 8, CQDepth: 64, RecvSGE: true,
		Inline: func(device int) int { return min(device, 64) }, Port: 1, GIDIndex: 0, Timeout: 5 * time.Second}
	s, ends, err := OpenEnds(ctx.ProviderSoftware, "", cfg, func(x *End) *End { return x }, "a", "b")
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	a, b := ends[0], ends[1]
	require.Equal(t, 64, a.MaxInline)
	require.NoError(t, SameModel(s.Context, a.QP.QPN(), b.QP.Endpoint()))
	require.ErrorContains(t, SameModel(s.Context, a.QP.QPN(), a.QP.Endpoint()), "the model lives inside one process")
	a.PeerRecv, a.PeerSrc, a.RKey = b.RecvAddr, b.SrcAddr, b.MR.RKey()
	b.PeerRecv, b.PeerSrc, b.RKey = a.RecvAddr, a.SrcAddr, a.MR.RKey()
	require.NoError(t, a.QP.Connect(b.QP.Endpoint()))
	require.NoError(t, b.QP.Connect(a.QP.Endpoint()))
	for seq, op := range []Op{OpWriteImm, OpSend} {
		require.NoError(t, a.Post(op, 64, uint32(seq), seq == 0))
		require.NoError(t, b.Await(op, 64, uint32(seq)))
		require.Equal(t, []byte{0, 0, 0, byte(seq)}, b.Recv[:4])
		require.Equal(t, PayloadByte(63), b.Recv[63])
	}
	require.NoError(t, a.Drain())
	require.NoError(t, a.Post(OpSend, 32, 7, true))
	require.ErrorContains(t, b.Await(OpSend, 64, 7), "unexpected completion", "a SEND of the wrong length")

	// A WRITE with a wrong key: its REMOTE_ACCESS_ERR is the error, not the
	// WR_FLUSH_ERR of the receives the queue pair in error flushes after
	// it, which the same poll returns when the poller comes late (the
	// model's rounds run here before it polls).
	a.RKey++
	require.NoError(t, a.Post(OpWriteImm, 64, 8, false))
	for range 100 {
		s.Context.Idle()
	}
	err = a.Drain()
	require.ErrorContains(t, err, "REMOTE_ACCESS_ERR")
	require.NotContains(t, err.Error(), "WR_FLUSH_ERR")
	// Drain waits for no message in particular: its error says so
	// (it used to name message 0 whatever the messages sent).
	require.ErrorContains(t, err, "waiting for the completions of the sends posted")
}

// TestOpenChoosesProvider: with no -provider and no MLX5KIT_PROVIDER the
// tools open the NIC, or, with none, the software HCA with a note saying
// so; a provider named either way is used and the note says how it was
// chosen.
func TestOpenChoosesProvider(t *testing.T) {
	t.Setenv(ctx.EnvProvider, "")
	c, what, err := Open("", "")
	require.NoError(t, err)
	if c.Kind() == ctx.KindHardware {
		require.NotContains(t, what, "software HCA")
	} else {
		require.Equal(t, ctx.ProviderSoftware, c.Provider())
		require.Contains(t, what, "the software HCA, not a NIC")
		require.Contains(t, what, "no mlx5 device")
	}
	require.NoError(t, c.Close())

	c, what, err = Open(ctx.ProviderSoftware, "")
	require.NoError(t, err)
	require.Contains(t, what, "asked for with -provider sim")
	require.NoError(t, c.Close())

	t.Setenv(ctx.EnvProvider, ctx.ProviderSoftware)
	c, what, err = Open("", "")
	require.NoError(t, err)
	require.Contains(t, what, "asked for with "+ctx.EnvProvider+"=sim")
	require.NoError(t, c.Close())

	t.Setenv(ctx.EnvProvider, "")
	_, _, err = Open("verbs", "")
	require.ErrorIs(t, err, ctx.ErrNotFound)
}

// TestGIDSelector: -gid-index names an entry; unset (-1) it falls back to
// MLX5KIT_GID_INDEX, and unset there too leaves the choice to the queue
// pair.
func TestGIDSelector(t *testing.T) {
	t.Setenv("MLX5KIT_GID_INDEX", "")
	s, err := GIDSelector(-1)
	require.NoError(t, err)
	require.True(t, s.Auto())
	s, err = GIDSelector(5)
	require.NoError(t, err)
	require.Equal(t, ctx.GIDIndex(5), s)
	s, err = GIDSelector(0)
	require.NoError(t, err)
	require.Equal(t, ctx.GIDIndex(0), s, "index 0 named is not the choice")
	t.Setenv("MLX5KIT_GID_INDEX", "2")
	s, err = GIDSelector(-1)
	require.NoError(t, err)
	require.Equal(t, ctx.GIDIndex(2), s)
	s, err = GIDSelector(4)
	require.NoError(t, err)
	require.Equal(t, ctx.GIDIndex(4), s, "the flag wins over the environment")
	t.Setenv("MLX5KIT_GID_INDEX", "300")
	_, err = GIDSelector(-1)
	require.ErrorContains(t, err, "MLX5KIT_GID_INDEX")
	_, err = GIDSelector(256)
	require.ErrorContains(t, err, "256")
}

// TestPerftestSummary checks perftest's rules (print_report_lat in
// perftest's src/perftest_parameters.c) on samples whose answers are
// worked out by hand.
func TestPerftestSummary(t *testing.T) {
	counter := cycles.Info{Hz: 1e9} // a tick is a nanosecond
	var l Latency
	l.Reserve(7)
	// Unsorted; the two largest (9000 and 100000) are left out: the five
	// kept are 1000 2000 3000 4000 5000.
	for _, v := range []uint64{5000, 100000, 1000, 3000, 9000, 2000, 4000} {
		l.Record(v)
	}
	s, err := l.PerftestSummary(counter, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(7), s.Count)
	require.InDelta(t, 1.0, s.Min, 1e-9)
	require.InDelta(t, 9.0, s.Max, 1e-9, "t_max is the first sample left out, as perftest prints delta[measure_cnt]")
	require.InDelta(t, 3.0, s.Typical, 1e-9, "median of five")
	require.InDelta(t, 3.0, s.Avg, 1e-9, "the mean leaves the two largest out")
	require.InDelta(t, math.Sqrt(2), s.Stdev, 1e-9)
	require.InDelta(t, 9.0, s.Percentile99, 1e-9, "ceil(5*0.99) = 5: the sample at index 5")
	require.InDelta(t, 9.0, s.Percentile999, 1e-9)

	// An even count kept: the median is the mean of the two middle ones;
	// halved for a round trip.
	l = Latency{}
	l.Reserve(1000)
	for i := range 1000 {
		l.Record(uint64(1000 - i)) // 1000 down to 1 ns
	}
	s, err = l.PerftestSummary(counter, 2)
	require.NoError(t, err)
	// 998 kept: 1..998 ns; median (499+500)/2; 99% at index ceil(988.02) =
	// 989 (990 ns), 99.9% at ceil(997.002) = 998 (999 ns, the first left out).
	require.InDelta(t, 0.0005, s.Min, 1e-12)
	require.InDelta(t, 0.4995, s.Max, 1e-12)
	require.InDelta(t, 0.24975, s.Typical, 1e-12)
	require.InDelta(t, 0.24975, s.Avg, 1e-12)
	require.InDelta(t, 0.495, s.Percentile99, 1e-12)
	require.InDelta(t, 0.4995, s.Percentile999, 1e-12)

	// Too few samples kept, or none reserved.
	l = Latency{}
	l.Reserve(2)
	l.Record(1)
	l.Record(2)
	_, err = l.PerftestSummary(counter, 1)
	require.ErrorContains(t, err, "at least 3")
	l = Latency{}
	for range 10 {
		l.Record(1)
	}
	_, err = l.PerftestSummary(counter, 1)
	require.ErrorContains(t, err, "0 latency samples kept")
}

// TestMeasureFor runs for a time, not a count, and keeps nothing it was
// not given room for.
func TestMeasureFor(t *testing.T) {
	counter := cycles.Frequency()
	var l Latency
	calls := 0
	n, total, err := l.MeasureFor(3, uint64(counter.Ticks(20*time.Millisecond)), nil, func(uint32) error {
		calls++
		time.Sleep(time.Millisecond)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, calls-3, n, "the warmup is not measured")
	require.Equal(t, uint64(n), l.H.Count())
	require.GreaterOrEqual(t, counter.Nanoseconds(float64(total)), 20e6)
	require.Less(t, n, 25)
	stopAt := 0
	n, _, err = (&Latency{}).MeasureFor(0, 1<<62, func() bool { stopAt++; return true }, func(uint32) error { return nil })
	require.NoError(t, err)
	require.Equal(t, 1024, n, "stop is looked at every 1024 iterations")
	require.Equal(t, 1, stopAt)
	boom := errors.New("boom")
	_, _, err = (&Latency{}).MeasureFor(0, 1<<62, nil, func(uint32) error { return boom })
	require.ErrorIs(t, err, boom)
}

// TestPosted: Posted times from post to post, as perftest's tposted
// deltas: n posts make n-1 samples, and Count says n, perftest's
// #iterations; Reserve starts over.
func TestPosted(t *testing.T) {
	var l Latency
	for range 2 {
		l.Reserve(8)
		for range 6 {
			l.Posted()
		}
		require.Len(t, l.samples, 5)
		s, err := l.PerftestSummary(cycles.Info{Hz: 1e9}, 2)
		require.NoError(t, err)
		require.Equal(t, uint64(6), s.Count)
	}
}

// TestDialNoServer: a client whose server is not listening (started
// first, or on another port) is told to start the server first; the
// error still matches ECONNREFUSED.
func TestDialNoServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, err = Dial(addr, time.Second, loopback, struct{ Magic uint32 }{7})
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.ErrorContains(t, err, "start the server first")
}

// TestDialPerftestServer: a client that reaches perftest's server, which
// sends its version string first, is told so, with a key or without; before the server answered
// parameters, the endpoints' exchange said so, and the answer's first
// byte must not hide it.
func TestDialPerftestServer(t *testing.T) {
	// perftest sends its version NUL-padded to 16 bytes; with a key the
	// client reads a whole header (12 bytes) of it.
	version := append([]byte("6.06"), make([]byte, 12)...)
	for _, sec := range []endpoint.Security{loopback, keyed} {
		addr := toolproc.ServeOne(t, func(c net.Conn) {
			_, _ = c.Write(version)
			_, _ = io.Copy(io.Discard, c)
		})
		_, err := Dial(addr, 5*time.Second, sec, struct{ Magic uint32 }{7})
		require.ErrorIs(t, err, ErrPerftestServer, "key %t", len(sec.Key) > 0)
		require.ErrorContains(t, err, `(it sent version "6.06")`)
	}
}
