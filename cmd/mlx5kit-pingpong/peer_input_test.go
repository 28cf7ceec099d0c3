package main

import (
	"bytes"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
)

// TestUpperBoundsNamed: -iters and -warmup above their bound are
// refused with a message that names the bound, not "want at least 1"
// for 3000000000.
func TestUpperBoundsNamed(t *testing.T) {
	for _, args := range [][]string{{"-iters", "3000000000"}, {"-warmup", "3000000000"}} {
		var out, errOut bytes.Buffer
		require.Equal(t, 2, run(args, &out, &errOut), "%q", args)
		require.Contains(t, errOut.String(), "2147483648", "%q", args)
	}
}

// TestServerNamesBadParameter: a client's parameters the server refuses
// are named, field and bound, in an error matching perftool.ErrBadParams;
// before, the server printed the whole struct with its magic number in
// decimal ({Magic:1297633350 Size:64 ...}: mlx5kit-perf's "MXPF"), which
// said neither what was wrong nor that the client was the other tool's.
func TestServerNamesBadParameter(t *testing.T) {
	for _, c := range []struct {
		p    params
		want string
	}{
		{params{Magic: 0x4d585046, Size: 64, Iters: 10}, `magic "MXPF"`},
		{params{Magic: paramsMagic, Size: maxSize + 1, Iters: 10}, "-size 8388609: want 0 to 8388608"},
		{params{Magic: paramsMagic, Size: 64}, "-iters 0: want 1 to"},
		{params{Magic: paramsMagic, Size: 64, Iters: 10, Warmup: 1<<31 + 1}, "-warmup 2147483649"},
	} {
		cfg, code := parseFlags([]string{"-provider", "sim", "-timeout", "5s"}, &bytes.Buffer{})
		require.Equal(t, -1, code)
		answer, err := toolproc.ServeParams(t, func(ln net.Listener) error { return serve(cfg, ln, &bytes.Buffer{}, &bytes.Buffer{}) }, c.p)
		require.ErrorIs(t, err, perftool.ErrBadParams, "%+v", c.p)
		require.ErrorContains(t, err, c.want)
		require.Contains(t, answer, c.want, "the client is told why")
	}
}

// TestClientOfAnotherToolsServer: a client that reaches the server of
// mlx5kit-perf (magic "MXPF") is told why it is refused, and says so;
// before, the server named the other tool and the client saw only its
// connection reset. The client runs in a process of its own, on a fabric
// of its own, which it leaves as it exits.
func TestClientOfAnotherToolsServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() {
		var p struct{ Magic, Mode, Size uint32 }
		_, err := perftool.Accept(ln, 5*time.Second, endpoint.Security{InsecureLoopback: true}, 0x4d585046, &p, nil, nil)
		served <- err
	}()
	client, out := toolProcess(t, fabricEnv(t, "other-tool"), "-provider", "sim", "-timeout", "5s", "-client", ln.Addr().String())
	err = client.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	require.Equal(t, 1, exit.ExitCode(), "%s", out)
	require.Contains(t, out.String(), "the server refused this client")
	require.Contains(t, out.String(), `magic "MXPN" (0x4d58504e), want "MXPF": the client is not this tool's`)
	require.ErrorIs(t, <-served, perftool.ErrBadParams)
}

// TestServerDeviceCheckedBeforeListening: a server or client whose device
// does not open fails at once, before it listens or dials; before, the
// server listened and failed only when a client came.
func TestServerDeviceCheckedBeforeListening(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, side := range []string{"-server", "-client"} {
		p, out := toolProcess(t, fabricEnv(t, "probe"+side), "-provider", "sim", "-device", "nosuch", side, "127.0.0.1:1")
		err := p.Wait()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%s: %s", side, out)
		require.Equal(t, 1, exit.ExitCode(), "%s: %s", side, out)
		require.NotContains(t, out.String(), "listening on", side)
		require.Contains(t, out.String(), `"nosuch": not found`, side)
		require.NotContains(t, out.String(), "connection refused", "%s: the client dialed", side)
	}
}
