package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
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
	"github.com/mlx5kit/mlx5kit/internal/devicetest"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
	"github.com/mlx5kit/mlx5kit/sim"
)

// row is the table line of one run.
type row struct {
	size, iters                          int
	min, typical, avg, p99, p999, maxLat float64
}

// parseTable finds the table in the output and checks that its numbers are
// sane: positive, ordered, and below the timeout.
func parseTable(t *testing.T, out string) row {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "#bytes") {
			continue
		}
		require.Less(t, i+1, len(lines), out)
		f := strings.Fields(lines[i+1])
		require.Len(t, f, 8, "table line %q", lines[i+1])
		var r row
		var err error
		r.size, err = strconv.Atoi(f[0])
		require.NoError(t, err)
		r.iters, err = strconv.Atoi(f[1])
		require.NoError(t, err)
		v := make([]float64, 6)
		for k := range v {
			v[k], err = strconv.ParseFloat(f[2+k], 64)
			require.NoError(t, err, "column %d of %q", 2+k, lines[i+1])
		}
		r.min, r.typical, r.avg, r.p99, r.p999, r.maxLat = v[0], v[1], v[2], v[3], v[4], v[5]
		require.Greater(t, r.min, 0.0, out)
		require.LessOrEqual(t, r.min, r.typical, out)
		require.LessOrEqual(t, r.typical, r.p99, out)
		require.LessOrEqual(t, r.p99, r.p999, out)
		require.LessOrEqual(t, r.p999, r.maxLat, out)
		require.LessOrEqual(t, r.min, r.avg, out)
		require.LessOrEqual(t, r.avg, r.maxLat, out)
		require.Less(t, r.maxLat, 10e6, "a half round trip above the 10 s timeout cannot have completed")
		return r
	}
	require.Failf(t, "no table", "output:\n%s", out)
	return row{}
}

func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run(args, &out, &errOut), "stderr: %s\nstdout: %s", errOut.String(), out.String())
	return out.String()
}

// TestBothEndsOnSoftwareHCA is what make pingpong does with no NIC: both
// ends in this process on the software HCA, for sizes inline, at the edges
// of the sequence stamp, and beyond the max inline (by SGE).
func TestBothEndsOnSoftwareHCA(t *testing.T) {
	for _, size := range []int{0, 2, 4, 64, 8192} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			out := runOK(t, "-provider", "sim", "-size", strconv.Itoa(size), "-iters", "2000", "-warmup", "50")
			r := parseTable(t, out)
			require.Equal(t, size, r.size)
			require.Equal(t, 2000, r.iters)
			require.Contains(t, out, "(software, provider sim)")
			require.Contains(t, out, "the software HCA, not a NIC")
			require.Contains(t, out, "one goroutine alternating")
			if size == 8192 {
				require.Contains(t, out, "payload by SGE")
			} else {
				require.Contains(t, out, "payload inline")
			}
		})
	}
}

// TestBothEndsTwoGoroutines runs the ends in two goroutines on the
// software HCA, with the histogram.
func TestBothEndsTwoGoroutines(t *testing.T) {
	out := runOK(t, "-provider", "sim", "-threads", "2", "-iters", "500", "-warmup", "10", "-hist")
	r := parseTable(t, out)
	require.Equal(t, 500, r.iters)
	require.Contains(t, out, "one goroutine each")
	require.Contains(t, out, "round trips (µs):\nn=500 ")
}

// TestServerClientOverTCP runs the server and the client in this process
// over 127.0.0.1: they exchange endpoints over TCP, the server adopts the
// client's size and counts, and both check every message.
func TestServerClientOverTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg, code := parseFlags([]string{"-provider", "sim", "-size", "100", "-iters", "1500", "-warmup", "20"}, &bytes.Buffer{})
	require.Equal(t, -1, code)
	var serverOut bytes.Buffer
	serverErr := make(chan error, 1)
	go func() {
		// The server starts from its own defaults: size and counts come
		// from the client.
		scfg, _ := parseFlags([]string{"-provider", "sim"}, &bytes.Buffer{})
		serverErr <- serve(scfg, ln, &serverOut, &bytes.Buffer{})
	}()
	cfg.client = ln.Addr().String()
	var clientOut bytes.Buffer
	require.NoError(t, dial(cfg, &clientOut))
	require.NoError(t, <-serverErr)
	r := parseTable(t, clientOut.String())
	require.Equal(t, 100, r.size)
	require.Equal(t, 1500, r.iters)
	require.Contains(t, clientOut.String(), "client of "+ln.Addr().String())
	require.Contains(t, serverOut.String(), "answering 20+1500 messages of 100 bytes")
	require.Contains(t, serverOut.String(), "done")
}

// TestServerClientFlags goes through run with -server on port 0 and
// -client to the address the server prints.
func TestServerClientFlags(t *testing.T) {
	var serverOut, serverErr toolproc.Buffer
	server := toolproc.Go(func() error {
		return toolproc.ExitStatus(run([]string{"-provider", "sim", "-server", "127.0.0.1:0"}, &serverOut, &serverErr))
	}, &serverOut, &serverErr)
	addr := server.ListenAddress(t, listenWait)
	require.True(t, strings.HasPrefix(addr, "127.0.0.1:") && addr != "127.0.0.1:0", addr)
	out := server.RetryClient(t, 50, 20*time.Millisecond, toolproc.Refused, func() (string, error) {
		var o, e bytes.Buffer
		if err := toolproc.ExitStatus(run([]string{"-provider", "sim", "-client", addr, "-iters", "300", "-size", "8"}, &o, &e)); err != nil {
			return o.String() + e.String(), err
		}
		return o.String(), nil
	})
	require.NoError(t, server.Wait(), serverErr.String())
	require.Equal(t, 300, parseTable(t, out).iters)
}

// TestPeerOutsideTheModel: a peer whose queue pair the software HCA does
// not know (another process's model) is refused with an explanation.
func TestPeerOutsideTheModel(t *testing.T) {
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware})
	require.NoError(t, err)
	defer c.Close()
	x, err := newEnd("client", c, 8, true, 1, 0, time.Second)
	require.NoError(t, err)
	defer x.close()
	y, err := newEnd("server", c, 8, true, 1, 0, time.Second)
	require.NoError(t, err)
	defer y.close()
	require.NoError(t, sameModel(c, x, y.endpoint()), "a peer on the same model")
	// Whether this process's software HCA joined a shared fabric depends
	// on the tests before (-server and -client join one): either way the
	// peer is refused and the message says why.
	refused := `not on this process's software HCA|in no process of the software fabric`
	require.Regexp(t, refused, sameModel(c, x, x.endpoint()), "a peer with this end's own QPN")
	require.Regexp(t, refused, sameModel(c, x, withQPN(y.endpoint(), 0xfffff1)), "a QPN the model does not know")
}

// newPair builds two connected ends on a private software HCA in engine
// mode.
func newPair(t *testing.T, size int) (a, b *end) {
	t.Helper()
	f := sim.New(sim.Options{Mode: sim.Engine, Strict: true})
	c, err := f.Open("sim0")
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, c.Close())
		require.NoError(t, f.Close())
		require.NoError(t, f.CheckViolations())
	})
	a, err = newEnd("ping", c, size, true, 1, 0, 10*time.Second)
	require.NoError(t, err)
	b, err = newEnd("pong", c, size, true, 1, 0, 10*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, a.close())
		require.NoError(t, b.close())
	})
	require.NoError(t, a.connect(b.endpoint()))
	require.NoError(t, b.connect(a.endpoint()))
	return a, b
}

// TestRoundTripAllocatesNothing: the measured loop (post, poll, repost a
// receive on both ends) allocates nothing per iteration, with the payload
// inline and by SGE.
func TestRoundTripAllocatesNothing(t *testing.T) {
	for _, size := range []int{32, 8192} {
		a, b := newPair(t, size)
		require.Equal(t, size == 32, a.inline, "32 bytes go inline, 8192 by SGE")
		seq := uint32(0)
		for ; seq < 10; seq++ {
			require.NoError(t, roundTrip(a, b, seq))
		}
		allocs := testing.AllocsPerRun(500, func() {
			if err := roundTrip(a, b, seq); err != nil {
				t.Fatal(err)
			}
			seq++
		})
		require.Zero(t, allocs, "size %d", size)
	}
}

// TestDataChecked: the data each message carries is in the peer's receive
// area, and a corrupted area is reported.
func TestDataChecked(t *testing.T) {
	a, b := newPair(t, 300)
	for seq := range uint32(100) {
		require.NoError(t, roundTrip(a, b, seq))
	}
	require.NoError(t, a.verify(99))
	require.NoError(t, b.verify(99))
	require.Equal(t, []byte{0, 0, 0, 99}, b.recv[:4])
	require.Error(t, b.verify(98), "a stale sequence number is seen")
	b.recv[200] ^= 0xff
	require.ErrorContains(t, b.verify(99), "byte 200 of the last message")
	// A message whose completion arrives with the wrong immediate fails
	// the wait.
	require.NoError(t, a.post(1000))
	require.ErrorContains(t, b.await(1001), "unexpected completion")
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-size", "-1"},
		{"-iters", "0"},
		{"-provider", "verbs"},
		{"-threads", "3"},
		{"-server", ":0", "-client", "localhost:1"},
		{"-gid-index", "256"},
		{"-gid-index", "-2"},
		{"extra"},
		{"-nosuchflag"},
	} {
		var out, errOut bytes.Buffer
		require.Equal(t, 2, run(args, &out, &errOut), "%q", args)
		require.NotEmpty(t, errOut.String(), "%q", args)
	}
}

// TestAddressFlags: a -server or -client that is not HOST:PORT, or whose
// port is out of range, exits 2 saying so; before, -server 127.0.0.1
// without a key was told to listen on 127.0.0.1, and the others failed
// with exit status 1 once the device was open.
func TestAddressFlags(t *testing.T) {
	t.Setenv(perftool.EnvKey, "")
	for _, args := range [][]string{
		{"-server", "127.0.0.1"},
		{"-server", "127.0.0.1:99999"},
		{"-client", "localhost"},
		{"-client", "localhost:65536"},
		{"-client", "a:b:1"},
	} {
		var out, errOut bytes.Buffer
		require.Equal(t, 2, run(append([]string{"-provider", "sim"}, args...), &out, &errOut), "%q", args)
		require.Contains(t, errOut.String(), args[0]+" "+strconv.Quote(args[1])+": want HOST:PORT", "%q", args)
		require.NotContains(t, errOut.String(), "without a key", "%q", args)
	}
}

// TestServerKey: a server that other hosts can reach needs a key; with the
// same key at both ends they run. A server with a key outlives the
// connections that fail before they are a client (garbage, a connection
// closed at once, a client with another key), each reported on its stderr
// with the remote address, and then serves the client that holds the key;
// with none it ends at its deadline, naming the last refusal. Before, the
// first connection, whatever it was, ended the server.
func TestServerKey(t *testing.T) {
	t.Setenv(perftool.EnvKey, "")
	var out, errOut bytes.Buffer
	require.Equal(t, 2, run([]string{"-provider", "sim", "-server", ":0"}, &out, &errOut))
	require.Contains(t, errOut.String(), "without a key")
	require.Contains(t, errOut.String(), perftool.EnvKey)

	keyA, keyB := keyFiles(t)
	clientOut, serverErr, clientErr := keyPair(t, keyA, keyA)
	require.NoError(t, serverErr)
	require.NoError(t, clientErr)
	require.Equal(t, 200, parseTable(t, clientOut).iters)

	// Refused connections, then the client with the key.
	s := startKeyServer(t, keyA, "3s")
	garbage := rawConn(t, s.addr)
	_, err := garbage.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, garbage) // the refusal, then the close
	closed := rawConn(t, s.addr)
	closed.Close()
	_, err = keyClient(t, keyB, s.addr)
	require.ErrorIs(t, err, endpoint.ErrAuth)
	require.ErrorContains(t, err, "both ends need the same key")
	// A client without a key is told the server holds one (before, it
	// read the authentication's first byte as the server's answer).
	cfg, code := parseFlags([]string{"-provider", "sim", "-timeout", "3s", "-client", s.addr}, &bytes.Buffer{})
	require.Equal(t, -1, code)
	err = dial(cfg, &bytes.Buffer{})
	require.ErrorContains(t, err, "the server holds a key and this client has none: both ends need the same key")
	// The server learns of the closed connection and of the other keys'
	// hang-ups when it reads them; a greeting still under way when the
	// client with the key comes is closed unreported. So the client comes
	// once the four refusals are in.
	require.Eventually(t, func() bool { return len(refusalLines(s.stderr.String())) == 4 },
		10*time.Second, time.Millisecond, "the server's refusals so far:\n%s", &s.stderr)
	clientOut, err = keyClient(t, keyA, s.addr)
	require.NoError(t, err)
	require.Equal(t, 200, parseTable(t, clientOut).iters)
	require.NoError(t, s.Wait())
	// The connections are greeted side by side: their refusals come in
	// the order their greetings end.
	lines := refusalLines(s.stderr.String())
	require.Len(t, lines, 4, s.stderr.String())
	from := func(c net.Conn) string {
		for _, l := range lines {
			if strings.Contains(l, "from "+c.LocalAddr().String()+": ") {
				return l
			}
		}
		t.Fatalf("no refusal of %v in\n%s", c.LocalAddr(), s.stderr.String())
		return ""
	}
	require.Contains(t, from(garbage), "mesh magic")
	require.Contains(t, from(closed), "EOF")
	require.Contains(t, s.stderr.String(), "the dialer hung up instead of proving that it holds the key")
	require.Contains(t, s.stdout.String(), "answering 100+200 messages of 2 bytes")

	// Another key, and no client after it.
	_, serverErr, clientErr = keyPair(t, keyA, keyB)
	require.ErrorIs(t, clientErr, endpoint.ErrAuth)
	require.ErrorContains(t, clientErr, "both ends need the same key")
	require.ErrorIs(t, serverErr, os.ErrDeadlineExceeded)
	require.ErrorIs(t, serverErr, endpoint.ErrAuth, "the error names the refusal")
	require.ErrorContains(t, serverErr, "refused 1 connection(s), the last from 127.0.0.1:")
}

// TestServerKeyReadsNoUnauthenticatedParams: a server with a key reads
// nothing of a client that has not proved the key, even parameters well
// formed (those of a client without a key): it refuses the connection,
// reports it, opens nothing for it and serves the client with the key,
// with that client's parameters. Before, the server read the parameters
// first and opened its ends, buffer and queue pair, sized by them.
func TestServerKeyReadsNoUnauthenticatedParams(t *testing.T) {
	keyA, _ := keyFiles(t)
	s := startKeyServer(t, keyA, "3s")
	c := rawConn(t, s.addr)
	require.NoError(t, binary.Write(c, binary.BigEndian, params{Magic: paramsMagic, Size: maxSize, Iters: 1 << 31, Warmup: 1 << 31}))
	_, _ = io.Copy(io.Discard, c)
	require.Empty(t, s.stdout.String(), "the server went past its client's parameters")
	out, err := keyClient(t, keyA, s.addr)
	require.NoError(t, err)
	require.NoError(t, s.Wait())
	require.Equal(t, 200, parseTable(t, out).iters)
	lines := refusalLines(s.stderr.String())
	require.Len(t, lines, 1, s.stderr.String())
	require.Contains(t, lines[0], "from "+c.LocalAddr().String()+": ")
	require.Contains(t, lines[0], "without proving the key first")
	require.Contains(t, s.stdout.String(), "answering 100+200 messages of 2 bytes", "the parameters of the client with the key")
}

// keyFiles writes two keys and returns their files.
func keyFiles(t *testing.T) (a, b string) {
	dir := t.TempDir()
	a, b = filepath.Join(dir, "a"), filepath.Join(dir, "b")
	require.NoError(t, os.WriteFile(a, []byte("the key of both ends, A\n"), 0o600))
	require.NoError(t, os.WriteFile(b, []byte("another key entirely, B\n"), 0o600))
	return a, b
}

// keyServer is serve in a goroutine, with the key of a file.
type keyServer struct {
	*toolproc.Server
	addr           string
	stdout, stderr toolproc.Buffer
}

// startKeyServer starts serve with the key in keyFile and -timeout
// timeout on a loopback port.
func startKeyServer(t *testing.T, keyFile, timeout string) *keyServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg, code := parseFlags([]string{"-provider", "sim", "-key-file", keyFile, "-timeout", timeout}, &bytes.Buffer{})
	require.Equal(t, -1, code)
	s := &keyServer{addr: ln.Addr().String()}
	s.Server = toolproc.Go(func() error { return serve(cfg, ln, &s.stdout, &s.stderr) }, &s.stdout, &s.stderr)
	return s
}

// keyClient runs a client of 200 iterations with the key in keyFile.
func keyClient(t *testing.T, keyFile, addr string) (string, error) {
	t.Helper()
	cfg, code := parseFlags([]string{"-provider", "sim", "-key-file", keyFile, "-timeout", "3s",
		"-iters", "200", "-client", addr}, &bytes.Buffer{})
	require.Equal(t, -1, code)
	var o bytes.Buffer
	err := dial(cfg, &o)
	return o.String(), err
}

// keyPair runs a server (-timeout 300ms: ten of them before it gives up
// waiting) and a client with the keys of the files.
func keyPair(t *testing.T, serverKey, clientKey string) (clientOut string, serverErr, clientErr error) {
	t.Helper()
	timeout := "3s"
	if serverKey != clientKey {
		timeout = "300ms"
	}
	s := startKeyServer(t, serverKey, timeout)
	clientOut, clientErr = keyClient(t, clientKey, s.addr)
	return clientOut, s.Wait(), clientErr
}

// rawConn connects to addr; the connection is closed when the test ends.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// refusalLines returns the lines of a server's stderr that report a
// refused connection.
func refusalLines(stderr string) []string {
	var lines []string
	for l := range strings.Lines(stderr) {
		if strings.HasPrefix(l, "mlx5kit-pingpong: refused the connection from ") && strings.HasSuffix(l, "; waiting for another client\n") {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestHardwarePingPong runs both ends on the mlx5 device
// devicetest.RequireDevice names.
func TestHardwarePingPong(t *testing.T) {
	name := devicetest.RequireDevice(t)
	for _, size := range []int{2, 4096} {
		out := runOK(t, "-provider", "mlx5", "-device", name, "-size", fmt.Sprint(size), "-iters", "10000")
		r := parseTable(t, out)
		require.Equal(t, 10000, r.iters)
		require.Contains(t, out, name)
		require.NotContains(t, out, "software HCA")
		t.Logf("\n%s", out)
	}
}

// TestHardwareServerClient runs a server and a client on the first mlx5
// device over 127.0.0.1.
func TestHardwareServerClient(t *testing.T) {
	name := devicetest.RequireDevice(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	scfg, _ := parseFlags([]string{"-provider", "mlx5", "-device", name}, &bytes.Buffer{})
	serverErr := make(chan error, 1)
	go func() { serverErr <- serve(scfg, ln, &bytes.Buffer{}, &bytes.Buffer{}) }()
	ccfg, _ := parseFlags([]string{"-provider", "mlx5", "-device", name, "-iters", "5000", "-client", ln.Addr().String()}, &bytes.Buffer{})
	var out bytes.Buffer
	require.NoError(t, dial(ccfg, &out))
	require.NoError(t, <-serverErr)
	require.Equal(t, 5000, parseTable(t, out.String()).iters)
}

// withQPN returns the endpoint with another QPN.
func withQPN(e endpoint.Endpoint, qpn uint32) endpoint.Endpoint {
	e.QPN = qpn
	return e
}

// TestHelpExitsZero: -h prints the usage and exits 0; a bad flag exits 2.
func TestHelpExitsZero(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"-h"}, &out, &errOut))
	require.Contains(t, errOut.String(), "-iters")
	require.Equal(t, 2, run([]string{"-nosuch"}, &out, &errOut))
}
