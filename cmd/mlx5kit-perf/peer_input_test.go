package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/perftestwire"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
)

// TestPerftestGIDByteOutOfRange: a GID field of perftest's record
// above 0xff is refused, not truncated to its low byte.
func TestPerftestGIDByteOutOfRange(t *testing.T) {
	// perftest's KEY_PRINT_FMT_GID, 108 bytes with the NUL, whose first
	// GID field is 0x1fe (the SRQN a digit shorter to keep the size).
	bad := "0000:0010:000100:000001:0000024a:00007f0a6c51e000:" +
		"1fe:01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e:0f:0000000:\x00"
	require.Len(t, bad, perftestKeySizeGID)
	got, err := decodePerftestDest([]byte(bad), true)
	require.ErrorIs(t, err, errPerftestPeer, "a GID byte of 0x1fe was read as %#x", got.GID[0])
}

// TestPerftestQPNWiderThan32Bits: a QPN or PSN wider than 32 bits
// is refused, not cut to 32 bits, whose low 24 then pass the range check
// (the record NUL-padded to perftest's 59 bytes).
func TestPerftestQPNWiderThan32Bits(t *testing.T) {
	for _, rec := range []string{
		"0000:0010:100000100:000001:0000024a:7f0a6c51e000:00000000",
		"0000:0010:000100:100000001:0000024a:7f0a6c51e000:00000000",
	} {
		b := make([]byte, perftestKeySize)
		copy(b, rec)
		got, err := decodePerftestDest(b, false)
		require.ErrorIs(t, err, errPerftestPeer, "%q read as QPN %#x PSN %#x", rec, got.QPN, got.PSN)
	}
}

// TestSwapRatesNotANumber: the peer's rates of -b are refused
// unless they are finite and positive; a NaN time is not a rate.
func TestSwapRatesNotANumber(t *testing.T) {
	cfg := testConfig(t, "write_bw", "-b", "--timeout", "5s")
	for _, w := range []wireRates{
		{N: 100, Bytes: 6400, Seconds: math.NaN(), Peak: 1},
		{N: 100, Bytes: math.Inf(1), Seconds: 1, Peak: 1},
		{N: 100, Bytes: -6400, Seconds: 1, Peak: 1},
		{N: 100, Bytes: 6400, Seconds: 1, Peak: math.NaN()},
		{N: 1 << 63, Bytes: 6400, Seconds: 1, Peak: 1},
	} {
		a, b := net.Pipe()
		go func() {
			var mine wireRates
			_ = binary.Read(b, binary.BigEndian, &mine)
			_ = binary.Write(b, binary.BigEndian, w)
		}()
		got, err := swapRates(cfg, a, bandwidth{n: 100, bytes: 6400, seconds: 1e-3, peakBytesSec: 1e7})
		a.Close()
		b.Close()
		require.Error(t, err, "the peer's rates %+v accepted as %+v", w, got)
	}
}

// TestServerRefusesUnknownConnection: a client's connection type
// other than RC, UD or DC is refused as a bad parameter, not built as DC.
func TestServerRefusesUnknownConnection(t *testing.T) {
	for _, conn := range []uint32{3, 256} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		cfg := testConfig(t, "write_lat", "-provider", "sim", "--timeout", "2s")
		errc := make(chan error, 1)
		go func() { errc <- serve(cfg, ln, &bytes.Buffer{}, &bytes.Buffer{}) }()
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		p := params{Magic: paramsMagic, Mode: uint32(writeBW), Size: 64, MaxSize: 64, Iters: 10, QD: 16, Batch: 4, Conn: conn, QueuePairs: 1}
		require.NoError(t, binary.Write(c, binary.BigEndian, p))
		select {
		case err := <-errc:
			require.ErrorContains(t, err, "bad parameters", "connection %d", conn)
		case <-time.After(20 * time.Second):
			t.Fatal("the server did not answer")
		}
		c.Close()
	}
}

// TestQueuePairsTimesIters: -q multiplies -n (per queue pair), so
// a combination whose messages per size pass the bound of -n is refused
// on the command line and from a client, instead of the end dying with
// "fatal error: runtime: out of memory" when it makes room for their
// timestamps (2 x 2 TiB with -n 2^30 -q 256 -l 1).
func TestQueuePairsTimesIters(t *testing.T) {
	t.Setenv("MLX5KIT_KEY", "")
	requireRejected(t, []string{"write_bw", "--provider", "sim", "-n", "1073741824", "-q", "256", "-l", "1"})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg := testConfig(t, "write_lat", "-provider", "sim", "--timeout", "2s")
	errc := make(chan error, 1)
	go func() { errc <- serve(cfg, ln, &bytes.Buffer{}, &bytes.Buffer{}) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	p := params{Magic: paramsMagic, Mode: uint32(writeBW), Size: 64, MaxSize: 64, Iters: 1 << 30, QD: 64, Batch: 1, QueuePairs: 256, Bidirectional: 1}
	require.NoError(t, binary.Write(c, binary.BigEndian, p))
	select {
	case err := <-errc:
		require.ErrorContains(t, err, "bad parameters")
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not answer")
	}
}

// TestServerKeyReadsNoUnauthenticatedParams: a server with a key reads
// nothing of a connection that has not proved the key, not even well-formed
// parameters (here 16 queue pairs of write_bw), and opens nothing for it:
// it reports the refusal on its stderr, with the remote address, and waits
// on for the client with the key, whose test it runs. Before, the server
// read the parameters first, opened its queue pairs and buffers sized by
// them, and then ended with the connection's failed exchange.
func TestServerKeyReadsNoUnauthenticatedParams(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("0123456789abcdef0123456789abcdef"), 0o600))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var serverOut, serverErr bytes.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- serve(testConfig(t, "write_lat", "-provider", "sim", "--key-file", keyFile, "--timeout", "3s"), ln, &serverOut, &serverErr)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	p := params{Magic: paramsMagic, Mode: uint32(writeBW), Size: 65536, MaxSize: 65536, Iters: 1000, QD: 128, Batch: 1, QueuePairs: 16}
	require.NoError(t, binary.Write(c, binary.BigEndian, p))
	_, _ = io.Copy(io.Discard, c) // the refusal, then the close
	var clientOut bytes.Buffer
	require.NoError(t, dial(testConfig(t, "write_lat", "-provider", "sim", "--key-file", keyFile, "--timeout", "3s",
		"-n", "200", "-client", ln.Addr().String()), &clientOut))
	select {
	case err := <-errc:
		require.NoError(t, err, serverOut.String())
	case <-time.After(time.Minute):
		t.Fatal("the server did not return")
	}
	require.True(t, strings.HasPrefix(serverErr.String(), "mlx5kit-perf: refused the connection from "+c.LocalAddr().String()+": "), serverErr.String())
	require.Contains(t, serverErr.String(), "without proving the key first")
	require.Equal(t, 1, strings.Count(serverErr.String(), "\n"), serverErr.String())
	require.Contains(t, serverOut.String(), "serving write_lat for ", "the test of the client with the key")
	require.Len(t, latencyRows(t, clientOut.String()), 1)
}

// TestPerftestPeerEchoesOwnRecord: a perftest client that sends
// back the server's own queue pair record (QPN, LID, address, rkey) is
// refused; before, the server connected its queue pair to itself, ran
// write_lat against its own buffer and printed the latency as perftest's.
func TestPerftestPeerEchoesOwnRecord(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	cfg := testConfig(t, "write_lat", "-provider", "sim", "--perftest-peer", "--accept-unauthenticated", "-n", "50", "--server", "127.0.0.1:0", "--timeout", "2s")
	// A fake perftest client: it writes first at every step.
	go func() {
		defer b.Close()
		step := func(mine []byte, n int) []byte {
			theirs := make([]byte, n)
			if _, err := b.Write(mine); err == nil {
				_, _ = io.ReadFull(b, theirs)
			}
			return theirs
		}
		v := make([]byte, 16)
		copy(v, "6.06")
		step(v, 16)
		step([]byte{0, 0, 0x10, 0}, 4)
		step([]byte{0, 0, 0, 64}, 4)
		step([]byte{'5', 0}, 2)
		dummy := perftestDest{LID: 1, QPN: 0x123, PSN: 1, RKey: 1, VAddr: 0x1000}.encode(false)
		ours := step(dummy, perftestKeySize)
		for range 3 {
			step(ours, perftestKeySize) // the server's own record, sent back
		}
	}()
	errc := make(chan error, 1)
	var out bytes.Buffer
	go func() { errc <- perftestRun(cfg, a, true, &out) }()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, errPerftestPeer, "the tool measured a loop to itself and reported it:\n%s", out.String())
	case <-time.After(30 * time.Second):
		t.Fatal("perftestRun did not return")
	}
}

// TestLanePeerNamesOwnQueuePair: with -q, a peer whose endpoint for
// one queue pair is another of this end's own queue pairs is refused, as
// perftool.SameModel refuses one naming the same queue pair; before, the
// end connected lane 1 to its own lane 0 and measured itself.
func TestLanePeerNamesOwnQueuePair(t *testing.T) {
	cfg := testConfig(t, "write_bw", "-provider", "sim", "-q", "2", "--timeout", "2s")
	s, made, err := openEnds(cfg, "client", "fake")
	require.NoError(t, err)
	defer s.Close()
	x, fake := made[0], made[1]
	addr := toolproc.ServeOne(t, func(conn net.Conn) {
		sec := endpoint.Security{InsecureLoopback: true}
		cx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Queue pair 0: a real one of the fake's; queue pair 1: the
		// client's own queue pair 0, as it announced it.
		theirs, err := endpoint.Exchange(cx, conn, endpoint.AcceptSide, fake.endpoints()[0], sec)
		if err != nil {
			return
		}
		if _, err := endpoint.Exchange(cx, conn, endpoint.AcceptSide, theirs, sec); err != nil {
			return
		}
		_ = perftool.Sync(conn, 5*time.Second, nil)
		_, _ = conn.Write(make([]byte, 4)) // the SRQ number
		_, _ = io.ReadFull(conn, make([]byte, 4))
	})
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	cfg.security = endpoint.Security{InsecureLoopback: true}
	err = handshakeAll(cfg, conn, endpoint.DialSide, s.Context, x)
	require.Error(t, err, "queue pair 1 was connected to the end's own queue pair 0")
}

// TestPerftestRecordFieldOutOfRange: a field of perftest's record
// holding more than perftest writes into it is refused, the error naming
// the field; before, an OUT_READS of 0x10000 (or one wider than 32 bits)
// was cut to 32 bits and accepted, and the other fields' refusals said
// only "a field out of range" (found by FuzzPerftestRecord).
func TestPerftestRecordFieldOutOfRange(t *testing.T) {
	for _, c := range []struct {
		rec   string
		gid   bool
		field string
	}{
		{"0000:10000:000100:000001:0000024a:7f0a6c51e000:00000000", false, "OUT_READS"},
		{"0000:10000000010:000100:000001:0000024a:7f0a6c51e000:00000000", false, "OUT_READS"},
		{"10000:0010:000100:000001:0000024a:7f0a6c51e000:00000000", false, "LID"},
		{"0000:0010:1000100:000001:0000024a:7f0a6c51e000:00000000", false, "QPN"},
		{"0000:0010:000100:000001:10000024a:7f0a6c51e000:00000000", false, "RKEY"},
		{"0000:0010:000100:000001:0000024a:7f0a6c51e000:100000000", false, "SRQN"},
		{"0000:0010:000100:000001:0000024a:7f0a6c51e000:00:01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e:1ff:00000000:", true, "GID byte 15"},
	} {
		b := make([]byte, perftestKeySizeGID)
		copy(b, c.rec)
		got, err := decodePerftestDest(b, c.gid)
		require.ErrorIs(t, err, errPerftestPeer, "%q read as %+v", c.rec, got)
		require.ErrorContains(t, err, "("+c.field+")", "%q", c.rec)
	}
}

// TestPerftestVersionNotANumber: a peer's version that is not digits, a
// dot and digits is refused, naming it; before, strconv.ParseFloat took
// "NaN" (which compares below nothing), "Inf", "1e3" and "0x1p9" as
// versions of perftest 5.70 or later and the exchange went on.
func TestPerftestVersionNotANumber(t *testing.T) {
	for _, v := range []string{"NaN", "Inf", "1e3", "0x1p9", "+6.06"} {
		a, b := net.Pipe()
		go func() {
			defer b.Close()
			// A fake perftest client: it writes first at every step.
			for _, mine := range [][]byte{append([]byte(v), make([]byte, perftestVersionSize-len(v))...), {0, 0, 0x10, 0}, {0, 0, 0, 64}, {'3', 0}} {
				if _, err := b.Write(mine); err != nil {
					return
				}
				if _, err := io.ReadFull(b, make([]byte, len(mine))); err != nil {
					return
				}
			}
		}()
		mtu, err := perftestConn{conn: a, timeout: 5 * time.Second}.preamble(ctx.MTU4096)
		a.Close()
		require.ErrorIs(t, err, errPerftestPeer, "version %q accepted (path MTU %v)", v, mtu)
		require.ErrorIs(t, err, perftestwire.ErrVersion, "%q", v)
		require.ErrorContains(t, err, strconv.Quote(v))
	}
}

// TestServerNamesBadParameter: a client's magic number or connection
// type the server refuses is named in an error matching
// perftool.ErrBadParams; before, the server printed the whole struct,
// its magic in decimal ({Magic:1297633358 ...}: mlx5kit-pingpong's
// "MXPN"), which said neither what was wrong nor whose client it was.
func TestServerNamesBadParameter(t *testing.T) {
	for _, c := range []struct {
		p    params
		want string
	}{
		{params{Magic: 0x4d58504e, Mode: uint32(writeLat), Size: 64, MaxSize: 64, Iters: 10, QD: 16, Batch: 4}, `magic "MXPN" (0x4d58504e), want "MXPF"`},
		{params{Magic: paramsMagic, Mode: uint32(writeBW), Size: 64, MaxSize: 64, Iters: 10, QD: 16, Batch: 4, Conn: 3}, "-c 3: want RC (0), UD (1) or DC (2)"},
		{params{Magic: paramsMagic, Mode: uint32(numModes), Size: 64, MaxSize: 64, Iters: 10, QD: 16, Batch: 4}, "unknown mode"},
	} {
		cfg := testConfig(t, "write_lat", "-provider", "sim", "--timeout", "5s")
		answer, err := toolproc.ServeParams(t, func(ln net.Listener) error { return serve(cfg, ln, &bytes.Buffer{}, &bytes.Buffer{}) }, c.p)
		require.ErrorIs(t, err, perftool.ErrBadParams, "%+v", c.p)
		require.ErrorContains(t, err, c.want)
		require.Contains(t, answer, c.want, "the client is told why")
	}
}

// TestSyncTimeoutLongTimeout: a timed test's waits for the peer (-D
// seconds past --timeout) with a --timeout near the longest duration,
// which the flags accept, wait instead of overflowing into a deadline in
// the past; before, a server started with --timeout 2562047h failed its
// first wait at once when its client asked for -D 3600 (a round mark read
// as an i/o timeout).
func TestSyncTimeoutLongTimeout(t *testing.T) {
	cfg := testConfig(t, "write_lat", "--timeout", "2562047h", "-D", "3600")
	require.Positive(t, cfg.syncTimeout())
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		defer b.Close()
		time.Sleep(50 * time.Millisecond)
		_, _ = b.Write([]byte{roundNext})
	}()
	more, err := readRoundMark(cfg, a)
	require.NoError(t, err)
	require.True(t, more)
}

// TestRecordsPastAvailableMemory: a run whose records (a bandwidth test's
// 24 bytes per batch, a latency test's 8 per sample) would take more than
// half the memory the kernel says is available is refused, on the command
// line and from a client, whose -n the server would spend; before, a
// client's -n 1<<30 -l 1 made a server allocate 24 GiB of stamps.
func TestRecordsPastAvailableMemory(t *testing.T) {
	t.Setenv("MLX5KIT_KEY", "")
	saved := memoryAvailable
	t.Cleanup(func() { memoryAvailable = saved })
	memoryAvailable = func() (uint64, bool) { return 64 << 20, true } // 64 MiB

	// 2^21 messages one a batch: 48 MiB, more than half of 64 MiB.
	rejectedFor(t, "the records of a size", []string{"write_bw", "--provider", "sim", "-n", "2097152", "-l", "1"})
	// Half as many: 24 MiB, within.
	cfg := testConfig(t, "write_bw", "--provider", "sim", "-n", "1048576", "-l", "1")
	require.Empty(t, cfg.checkMemory(1))
	// A latency test: 8 bytes a sample; 2^23 samples are 64 MiB.
	rejectedFor(t, "the records of a size", []string{"write_lat", "--provider", "sim", "-n", "8388608"})
	// Timed, it keeps no samples.
	cfg = testConfig(t, "write_lat", "--provider", "sim", "-n", "8388608", "-D", "1")
	require.Empty(t, cfg.checkMemory(1))
	// Both ends of a local send_bw keep stamps: 2 x 24 MiB.
	rejectedFor(t, "the records of a size", []string{"send_bw", "--provider", "sim", "-n", "1048576", "-l", "1"})

	p := params{Magic: paramsMagic, Mode: uint32(writeBW), Size: 64, MaxSize: 64, Iters: 1 << 30, QD: 64, Batch: 1, QueuePairs: 1}
	cfg = testConfig(t, "write_lat", "-provider", "sim", "--timeout", "5s")
	_, err := toolproc.ServeParams(t, func(ln net.Listener) error { return serve(cfg, ln, &bytes.Buffer{}, &bytes.Buffer{}) }, p)
	require.ErrorIs(t, err, perftool.ErrBadParams)
	require.ErrorContains(t, err, "-n 1073741824: the records of a size take 24.0 GiB, more than half of the 0.1 GiB")

	// Unknown (no /proc/meminfo): not refused here.
	memoryAvailable = func() (uint64, bool) { return 0, false }
	cfg = testConfig(t, "write_bw", "--provider", "sim", "-n", "2097152", "-l", "1")
	require.Empty(t, cfg.checkMemory(2))
}

// TestMemoryAvailableReadsMeminfo: the kernel's MemAvailable is read,
// in bytes.
func TestMemoryAvailableReadsMeminfo(t *testing.T) {
	n, ok := memoryAvailable()
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		require.False(t, ok)
		return
	}
	require.True(t, ok)
	require.Greater(t, n, uint64(1<<20))
}

// rejectedFor runs the command with args and requires its refusal on the
// command line (exit 2) to say want.
func rejectedFor(t *testing.T, want string, args []string) {
	t.Helper()
	var out, errOut bytes.Buffer
	require.Equal(t, 2, run(args, &out, &errOut), "%q", args)
	require.Contains(t, errOut.String(), want, "%q", args)
	require.Empty(t, out.String(), "%q", args)
}
