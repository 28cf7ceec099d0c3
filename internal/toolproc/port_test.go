package toolproc

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// serveOn is the server of TestToolChild's -serve, as Debian's perftest
// is a server: after delay it listens on host:port, which it is given and
// does not print, writes its process ID to the one client it accepts and
// exits 0; it exits 1 where it cannot listen.
func serveOn(host, port, delay string) int {
	d, err := time.ParseDuration(delay)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	time.Sleep(d)
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer ln.Close()
	conn, err := ln.Accept()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer conn.Close()
	if _, err := fmt.Fprint(conn, os.Getpid()); err != nil {
		fmt.Println(err)
		return 1
	}
	return 0
}

// portServer is a server ServeOnPort starts for a test: TestToolChild
// with mode (-serve or -spawn), host and delay, and the port ServeOnPort
// gives it. Each start is kept.
type portServer struct {
	t                 *testing.T
	mode, host, delay string
	started           []*exec.Cmd
}

// start returns the server's command for port.
func (p *portServer) start(port int) *exec.Cmd {
	cmd := command(p.t, envArgs, nil, p.mode, p.host, strconv.Itoa(port), p.delay)
	p.started = append(p.started, cmd)
	return cmd
}

// pickPorts makes ServeOnPort's ports, until the test ends, first ports
// and then ones the system finds free.
func pickPorts(t *testing.T, ports ...int) {
	pick := pickPort
	t.Cleanup(func() { pickPort = pick })
	pickPort = func() (int, error) {
		if len(ports) == 0 {
			return pick()
		}
		p := ports[0]
		ports = ports[1:]
		return p, nil
	}
}

// occupy listens on a port of host the system chooses until the test
// ends, as another process might, and returns the port.
func occupy(t *testing.T, host string) int {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// connected holds a port of loopback's with the local end of a connection
// until the test ends, as another process's client might, and returns the
// port: nothing listens on it, but a server cannot bind it.
func connected(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn.LocalAddr().(*net.TCPAddr).Port
}

// serverPID connects to the server on port of loopback and returns the
// process ID it writes, and then waits for it to exit 0.
func serverPID(t *testing.T, s *Server, port int) int {
	conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err)
	defer conn.Close()
	b, err := io.ReadAll(conn)
	require.NoError(t, err)
	pid, err := strconv.Atoi(string(b))
	require.NoError(t, err, "%q", b)
	require.NoError(t, s.Wait(), s.Report())
	return pid
}

// serveOnPort runs ServeOnPort in a goroutine of its own and returns the
// server and its port, or the message it failed with.
func serveOnPort(t *testing.T, timeout time.Duration, start func(int) *exec.Cmd) (s *Server, port int, fatal string) {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s, port = ServeOnPort(f, timeout, start)
	}()
	select {
	case <-done:
	case <-time.After(50 * time.Second):
		t.Fatal("ServeOnPort did not return")
	}
	return s, port, f.msg
}

// TestServeOnPort: a server that cannot bind the port it was given,
// because another process listens on it, is started again on another
// port; one that could listen beside another process's listener on the
// port is not taken for listening there, but started again on another
// port too; a server's listening socket counts in a child process of it;
// and the test fails with every try's output when no port serves, or at
// once when the server neither listens nor exits in time.
func TestServeOnPort(t *testing.T) {
	if os.Getenv("MLX5KIT_EMULATED") != "" {
		t.Skip("a test binary for another CPU cannot re-execute itself under qemu-user")
	}
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skipf("ServeOnPort reads /proc: %v", err)
	}

	for _, c := range []struct {
		name string
		// taken holds the port ServeOnPort picks first, as another
		// process might.
		taken func(t *testing.T) int
		// The address and delay of the server's listener.
		host, delay string
		// The exit codes the first server may have: 1 where it could
		// not bind the port, -1 where it was killed.
		exits []int
	}{
		// The server binds every address, as perftest does, which a
		// connection from the port keeps it from: it exits.
		{"bind fails", connected, "0.0.0.0", "0s", []int{1}},
		// Another process listens on loopback's address, which keeps
		// the server from binding every address: the server is not
		// waited for.
		{"listener", func(t *testing.T) int { return occupy(t, "127.0.0.1") }, "0.0.0.0", "0s", []int{1, -1}},
		// Another process listens on the port on another of loopback's
		// addresses; the server, which listens on 127.0.0.1 a moment
		// later, could bind it too. Someone listening on the port is
		// not the server listening: it is killed before it listens.
		{"foreign listener", func(t *testing.T) int { return occupy(t, "127.0.0.2") }, "127.0.0.1", "300ms", []int{-1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			taken := c.taken(t)
			pickPorts(t, taken)
			p := &portServer{t: t, mode: "-serve", host: c.host, delay: c.delay}
			s, port, fatal := serveOnPort(t, 30*time.Second, p.start)
			require.Empty(t, fatal)
			require.NotEqual(t, taken, port)
			// A port the system picked may be taken by another
			// process's connection before its server binds it (the
			// test's packages run in parallel), and ServeOnPort tries
			// another: more than two starts are not a failure.
			require.GreaterOrEqual(t, len(p.started), 2)
			require.Contains(t, c.exits, p.started[0].ProcessState.ExitCode(), "the first server's exit")
			last := p.started[len(p.started)-1]
			for _, cmd := range p.started[:len(p.started)-1] {
				require.NotNil(t, cmd.ProcessState, "a server tried before the last has ended")
			}
			require.Equal(t, last.Process.Pid, serverPID(t, s, port), "the last server started is reached")
		})
	}

	t.Run("child process", func(t *testing.T) {
		p := &portServer{t: t, mode: "-spawn", host: "0.0.0.0", delay: "100ms"}
		s, port, fatal := serveOnPort(t, 30*time.Second, p.start)
		require.Empty(t, fatal)
		require.NotEmpty(t, p.started)
		pid := serverPID(t, s, port)
		require.NotEqual(t, p.started[len(p.started)-1].Process.Pid, pid, "the server's child listens")
	})

	t.Run("no port", func(t *testing.T) {
		taken := connected(t)
		ports := make([]int, portTries)
		for i := range ports {
			ports[i] = taken
		}
		pickPorts(t, ports...)
		p := &portServer{t: t, mode: "-serve", host: "0.0.0.0", delay: "0s"}
		s, _, fatal := serveOnPort(t, 30*time.Second, p.start)
		require.Nil(t, s)
		require.Len(t, p.started, portTries)
		require.Contains(t, fatal, fmt.Sprintf("the server did not listen on any of %d ports", portTries))
		require.Contains(t, fatal, fmt.Sprintf("port %d: the server exited before it listened; server exited (exit status 1):\n", taken))
		require.Contains(t, fatal, "address already in use")
	})

	t.Run("timeout", func(t *testing.T) {
		p := &portServer{t: t, mode: "-serve", host: "127.0.0.1", delay: "1m"}
		start := time.Now()
		s, _, fatal := serveOnPort(t, 200*time.Millisecond, p.start)
		require.Nil(t, s)
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
		require.Len(t, p.started, 1, "no other port for a server that is slow")
		require.Contains(t, fatal, "the server did not listen within 200ms")
		require.NotNil(t, p.started[0].ProcessState, "the server was stopped")
	})
}
