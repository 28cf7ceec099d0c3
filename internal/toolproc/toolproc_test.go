package toolproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const envArgs = "MLX5KIT_TOOLPROC_TEST_ARGS"

// TestToolChild prints its arguments and exits with their number; with
// the one argument -listen it is a server as the kit's tools are: it
// listens on a port of loopback's the system chooses, says which, and
// exits 0 once one client has connected. With -serve HOST PORT DELAY it is
// a server as Debian's perftest is (serveOn), and with -spawn HOST PORT
// DELAY it runs that server as a child process of its own.
func TestToolChild(t *testing.T) {
	Child(t, envArgs, func(args []string) int {
		if len(args) == 4 && args[0] == "-serve" {
			return serveOn(args[1], args[2], args[3])
		}
		if len(args) == 4 && args[0] == "-spawn" {
			cmd := exec.Command(os.Args[0], os.Args[1:]...)
			cmd.Env = append(os.Environ(), envArgs+"=-serve\n"+strings.Join(args[1:], "\n"))
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Println(err)
				return 1
			}
			return 0
		}
		if len(args) == 1 && args[0] == "-listen" {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				fmt.Println(err)
				return 1
			}
			defer ln.Close()
			fmt.Printf("listening on %v\n", ln.Addr())
			conn, err := ln.Accept()
			if err != nil {
				fmt.Println(err)
				return 1
			}
			conn.Close()
			return 0
		}
		fmt.Printf("args %q env %s\n", args, os.Getenv("EXTRA"))
		return len(args)
	})
}

// TestStart runs TestToolChild in a child process and checks its
// arguments, environment, output and exit status.
func TestStart(t *testing.T) {
	if os.Getenv("MLX5KIT_EMULATED") != "" {
		t.Skip("a test binary for another CPU cannot re-execute itself under qemu-user")
	}
	cmd, out := Start(t, envArgs, []string{"EXTRA=yes"}, "-a", "b c")
	err := cmd.Wait()
	require.Error(t, err, "the child exits with the number of its arguments")
	require.Equal(t, 2, cmd.ProcessState.ExitCode())
	require.True(t, strings.HasPrefix(out.String(), `args ["-a" "b c"] env yes`), out.String())
}

// fatalTB records the message of Fatalf and ends the goroutine that
// called it, as testing's Fatalf does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// retry runs s.RetryClient with try in a goroutine of its own and returns
// its output, or the message it failed with, and how many clients ran.
func retry(t *testing.T, s *Server, tries int, again func(string) bool, try func(n int) (string, error)) (out, fatal string, clients int) {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		out = s.RetryClient(f, tries, time.Millisecond, again, func() (string, error) {
			clients++
			return try(clients)
		})
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("RetryClient did not return")
	}
	return out, f.msg, clients
}

var errRefused = errors.New("connection refused")

// TestRetryClientServerExited: a server that exits before it listens ends
// the retries at the next client that fails, with its exit status and
// output and the clients'; the first client's output is kept when the last
// one's differs.
func TestRetryClientServerExited(t *testing.T) {
	var out Buffer
	s := Go(func() error {
		fmt.Fprintln(&out, "listen tcp 127.0.0.1:1234: bind: address already in use")
		return errors.New("exit status 1")
	}, &out)
	require.ErrorContains(t, s.Wait(), "exit status 1")
	require.True(t, s.Exited())
	_, fatal, clients := retry(t, s, 100, nil, func(int) (string, error) { return "Couldn't connect to 127.0.0.1:1234", errRefused })
	require.Equal(t, 1, clients, "no retries once the server has exited")
	for _, want := range []string{"the server exited", "Couldn't connect to 127.0.0.1:1234", "server exited (exit status 1)", "address already in use"} {
		require.Contains(t, fatal, want)
	}

	// The first client got further than connecting and failed; the
	// server, which failed with it, has exited by the time the second
	// client cannot connect, which ends the retries.
	exit := make(chan struct{})
	s = Go(func() error { <-exit; return nil }, &out)
	_, fatal, clients = retry(t, s, 100, nil, func(n int) (string, error) {
		if n == 1 {
			return " Unable to Connect the HCA's through the link", errors.New("exit status 1")
		}
		close(exit)
		_ = s.Wait()
		return "Couldn't connect to 127.0.0.1:1234", errRefused
	})
	require.Equal(t, 2, clients)
	require.Contains(t, fatal, "the first client:\n Unable to Connect the HCA's through the link")
	require.Contains(t, fatal, "server exited (exit status 0)")
}

// TestRetryClientServerRunning: while the server runs, a client that
// could not connect is retried until one succeeds or the tries run out,
// and one that failed otherwise ends the retries at once.
func TestRetryClientServerRunning(t *testing.T) {
	s := serving(t, "listening on 127.0.0.1:1234\n")
	refused := func(o string) bool { return strings.Contains(o, "Couldn't connect") }

	got, fatal, clients := retry(t, s, 10, refused, func(n int) (string, error) {
		if n < 4 {
			return "Couldn't connect to 127.0.0.1:1234", errRefused
		}
		return "done", nil
	})
	require.Empty(t, fatal)
	require.Equal(t, "done", got)
	require.Equal(t, 4, clients)

	_, fatal, clients = retry(t, s, 10, refused, func(int) (string, error) { return "Couldn't connect to 127.0.0.1:1234", errRefused })
	require.Equal(t, 10, clients)
	require.Contains(t, fatal, "no client reached the server; client 10 of at most 10")
	require.Contains(t, fatal, "server still running; its output so far:\nlistening on 127.0.0.1:1234")

	_, fatal, clients = retry(t, s, 10, refused, func(int) (string, error) {
		return " Unable to Connect the HCA's through the link", errors.New("exit status 1")
	})
	require.Equal(t, 1, clients)
	require.Contains(t, fatal, "the client failed")
	require.NotContains(t, fatal, "the first client", "one client, one output")
	require.False(t, s.Exited())
}

// TestWatch: a watched process's exit status and output are the server's.
func TestWatch(t *testing.T) {
	if os.Getenv("MLX5KIT_EMULATED") != "" {
		t.Skip("a test binary for another CPU cannot re-execute itself under qemu-user")
	}
	cmd, out := Start(t, envArgs, nil, "-a", "b c")
	s := Watch(cmd, out)
	require.Error(t, s.Wait())
	require.Equal(t, 2, cmd.ProcessState.ExitCode())
	require.True(t, strings.HasPrefix(s.Report(), "server exited (exit status 2):\nargs [\"-a\" \"b c\"]"), s.Report())
}

// listenAddress runs s.ListenAddress with timeout in a goroutine of its
// own and returns the address, or the message it failed with.
func listenAddress(t *testing.T, s *Server, timeout time.Duration) (addr, fatal string) {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		addr = s.ListenAddress(f, timeout)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("ListenAddress did not return")
	}
	return addr, f.msg
}

// TestListenAddress: the address of the server's listening line once the
// line is whole, wherever it is in the output; a server that exits
// without the line, or does not print it in time, fails the test at once
// with its report.
func TestListenAddress(t *testing.T) {
	s := serving(t, "mlx5kit-perf: setting up\nlistening on 127.0.0.1:4321\nserving\n")
	addr, fatal := listenAddress(t, s, 10*time.Second)
	require.Empty(t, fatal)
	require.Equal(t, "127.0.0.1:4321", addr)

	// The line comes later, in two writes: the first half is no address.
	var late Buffer
	wrote, exit := make(chan struct{}), make(chan struct{})
	defer close(exit)
	s = Go(func() error {
		fmt.Fprint(&late, "listening on 127.0.0.1:43")
		time.Sleep(50 * time.Millisecond)
		fmt.Fprint(&late, "21\n")
		close(wrote)
		<-exit
		return nil
	}, &late)
	addr, fatal = listenAddress(t, s, 10*time.Second)
	require.Empty(t, fatal)
	require.Equal(t, "127.0.0.1:4321", addr)
	<-wrote

	// A server that could not listen exits without the line.
	var failed Buffer
	s = Go(func() error {
		fmt.Fprintln(&failed, "mlx5kit-perf: listen tcp 127.0.0.1:1234: bind: address already in use")
		return errors.New("exit status 1")
	}, &failed)
	addr, fatal = listenAddress(t, s, 10*time.Second)
	require.Empty(t, addr)
	for _, want := range []string{"the server exited before it listened", "server exited (exit status 1)", "address already in use"} {
		require.Contains(t, fatal, want)
	}

	// One that prints something else and keeps running fails at the
	// timeout, with its output so far.
	s = serving(t, "not listening on anything yet")
	start := time.Now()
	addr, fatal = listenAddress(t, s, 100*time.Millisecond)
	require.Empty(t, addr)
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	require.Contains(t, fatal, "the server did not listen within 100ms")
	require.Contains(t, fatal, "server still running; its output so far:\nnot listening on anything yet")

	var bad Buffer
	fmt.Fprint(&bad, "listening on somewhere\n")
	s = Go(func() error { <-exit; return nil }, &bad)
	addr, fatal = listenAddress(t, s, 10*time.Second)
	require.Empty(t, addr)
	require.Contains(t, fatal, "the server's listening line names no HOST:PORT")
}

// TestListenAddressProcess: a server in a process of its own, started on
// port 0, is reached at the address ListenAddress returns.
func TestListenAddressProcess(t *testing.T) {
	if os.Getenv("MLX5KIT_EMULATED") != "" {
		t.Skip("a test binary for another CPU cannot re-execute itself under qemu-user")
	}
	s := Watch(Start(t, envArgs, nil, "-listen"))
	addr := s.ListenAddress(t, 30*time.Second)
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
	require.NotEqual(t, "0", port)
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	require.NoError(t, s.Wait(), s.Report())
}

// TestPerftestReport: the calibration message is taken out of perftest's
// output wherever it falls, and said; output without it is unchanged.
func TestPerftestReport(t *testing.T) {
	table := " #bytes #iterations    t_min[usec]\n 64      200          1.00\n"
	out, uncalibrated := PerftestReport(table)
	require.False(t, uncalibrated)
	require.Equal(t, table, out)

	with := " #bytes #iterations    t_min[usec]\nCorrelation coefficient r^2: 0.42 < 0.9\n 64      200          inf\n"
	out, uncalibrated = PerftestReport(with)
	require.True(t, uncalibrated)
	require.Equal(t, " #bytes #iterations    t_min[usec]\n 64      200          inf\n", out)
}

// serving returns a server that has printed text and runs until the test
// ends.
func serving(t *testing.T, text string) *Server {
	var out Buffer
	fmt.Fprint(&out, text)
	exit := make(chan struct{})
	t.Cleanup(func() { close(exit) })
	return Go(func() error { <-exit; return nil }, &out)
}
