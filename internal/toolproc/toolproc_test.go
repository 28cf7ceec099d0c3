package toolproc

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const envArgs = "MLX5KIT_TOOLPROC_TEST_ARGS"

func TestToolChild(t *testing.T) {
	Child(t, envArgs, func(args []string) int {
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
	var out Buffer
	fmt.Fprint(&out, "listening on 127.0.0.1:1234\n")
	exit := make(chan struct{})
	defer close(exit)
	s := Go(func() error { <-exit; return nil }, &out)
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
