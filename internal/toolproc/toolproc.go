// Package toolproc runs a command's main function in a separate process
// from its tests: the test binary re-executes itself as the child, with
// the command's arguments in an environment variable. It also holds the
// helpers the tools' tests share (TCPPair, ServeOnPort).
package toolproc

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer collects output that one goroutine writes while another may
// read it: a test prints a running peer's output when it fails, and the
// race detector holds a bytes.Buffer read beside its writer a race even
// when the read is only a message's argument. The zero value is empty and
// ready.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what has been written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// childTest is the name of the test function that runs the command in
// the child process.
const childTest = "TestToolChild"

// Child runs the command with the arguments of the environment variable
// env (one per line) and exits with its status; it skips the test unless a
// parent test started this process with Start. Call it from a test named
// TestToolChild.
func Child(t *testing.T, env string, run func(args []string) int) {
	args := os.Getenv(env)
	if args == "" {
		t.Skip("runs only as the child process of a test")
	}
	os.Exit(run(strings.Split(args, "\n")))
}

// Start starts the command in a process of its own with args, passing
// them in the environment variable env, and the extra environment vars.
// The process is killed after a minute or when the test ends; its output
// and errors are collected in the returned buffer, which may be read while
// the process runs.
func Start(t testing.TB, env string, vars []string, args ...string) (*exec.Cmd, *Buffer) {
	t.Helper()
	cmd := command(t, env, vars, args...)
	var out Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s as a child process: %v", os.Args[0], err)
	}
	return cmd, &out
}

// command returns the command that Start starts, not started: the test
// binary running the command with args (in the environment variable env)
// and the extra environment vars, killed after a minute or when the test
// ends.
func command(t testing.TB, env string, vars []string, args ...string) *exec.Cmd {
	cx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(cx, os.Args[0], "-test.run=^"+childTest+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), env+"="+strings.Join(args, "\n")), vars...)
	return cmd
}

// ServeParams runs serve on a fresh loopback listener, connects to it,
// writes params in big-endian binary as a tool's client writes its
// parameters, and returns what serve returns and what the client read
// from the server until the server closed the connection (a refusal's
// reason is in it), failing t if serve has not returned within 20 s.
func ServeParams(t testing.TB, serve func(net.Listener) error, params any) (answer string, err error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- serve(ln) }()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := binary.Write(conn, binary.BigEndian, params); err != nil {
		t.Fatal(err)
	}
	read := make(chan string, 1)
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		b, _ := io.ReadAll(conn)
		conn.Close() // the server waits for the client's close
		read <- string(b)
	}()
	select {
	case err := <-errc:
		return <-read, err
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not answer")
		return "", nil
	}
}

// Server is a server a test runs beside the clients it starts, in a
// process of its own (Watch) or in a goroutine (Go), watched in the
// background so that the test sees when it has exited: a client retried
// while the server is not listening yet has no use once the server is
// gone.
type Server struct {
	out  []fmt.Stringer
	done chan struct{}
	err  error
}

// Watch watches cmd, started, as a server whose output out collects; its
// Wait replaces cmd.Wait, which only it may call.
func Watch(cmd *exec.Cmd, out ...fmt.Stringer) *Server {
	return Go(cmd.Wait, out...)
}

// Go runs serve in a goroutine as a server whose output out collects; the
// server has exited when serve returns.
func Go(serve func() error, out ...fmt.Stringer) *Server {
	s := &Server{out: out, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = serve()
	}()
	return s
}

// Exited reports whether the server has exited.
func (s *Server) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Wait waits for the server to exit and returns its error (for a
// process, what cmd.Wait returned).
func (s *Server) Wait() error {
	<-s.done
	return s.err
}

// Output returns what the server has written so far.
func (s *Server) Output() string {
	var b strings.Builder
	for _, o := range s.out {
		b.WriteString(o.String())
	}
	return b.String()
}

// Report describes the server for a failure's message: its exit status
// and output once it has exited, else its output so far.
func (s *Server) Report() string {
	if s.Exited() {
		status := "exit status 0"
		if s.err != nil {
			status = s.err.Error()
		}
		return fmt.Sprintf("server exited (%s):\n%s", status, s.Output())
	}
	return "server still running; its output so far:\n" + s.Output()
}

// listening matches the line the kit's tools print once their server
// listens (internal/perftool's Run), a whole line: a line still being
// written has no newline yet.
var listening = regexp.MustCompile(`(?m)^listening on (\S+)\r?\n`)

// ListenAddress waits until the server's output has the line "listening
// on HOST:PORT" that the kit's tools print once their server listens, and
// returns HOST:PORT: a server started on port 0 (127.0.0.1:0) tells its
// clients the port it got, where a port found free beforehand may be taken
// by another process before the server listens on it. t fails at once, with
// the server's Report, when the server exits before printing the line or
// timeout passes without it.
func (s *Server) ListenAddress(t testing.TB, timeout time.Duration) string {
	t.Helper()
	var addr, failed string
	listened := s.await(timeout, 5*time.Millisecond, func(exited bool) bool {
		// Once the server has exited, all its output is there, so a
		// line it wrote just before it exited is still found.
		if m := listening.FindStringSubmatch(s.Output()); m != nil {
			if _, _, err := net.SplitHostPort(m[1]); err != nil {
				failed = fmt.Sprintf("the server's listening line names no HOST:PORT: %v", err)
			}
			addr = m[1]
			return true
		}
		if exited {
			failed = "the server exited before it listened"
		}
		return exited
	})
	switch {
	case !listened:
		failed = fmt.Sprintf("the server did not listen within %v", timeout)
	case failed == "":
		return addr
	}
	t.Fatalf("%s\n%s", failed, s.Report())
	return ""
}

// await calls check at once, then every tick and as soon as the server
// exits, until check returns true, and returns true; it returns false
// where timeout passes first. check is told whether the server had exited
// before it was called (once it has, all its output is there and its
// sockets are closed), and must return true once it has.
func (s *Server) await(timeout, tick time.Duration, check func(exited bool) bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for !check(s.Exited()) {
		select {
		case <-s.done:
		case <-ticker.C:
		case <-deadline.C:
			return false
		}
	}
	return true
}

// RetryClient runs clients of the server, one at a time, until one
// succeeds, and returns that one's output. try runs one client and
// returns its output and error. A client that failed is run again after
// pause while the server runs, again holds for its output (the server is
// not listening yet; nil: any failure) and fewer than tries clients have
// run. Otherwise t fails with the last client's output, the first's when
// it differs, and the server's Report: a server that exited before a
// client reached it (it failed before it listened, or with an earlier
// client) ends the retries at once, with its exit status.
func (s *Server) RetryClient(t testing.TB, tries int, pause time.Duration, again func(out string) bool, try func() (string, error)) string {
	t.Helper()
	var first string
	for n := 1; ; n++ {
		out, err := try()
		if err == nil {
			return out
		}
		if n == 1 {
			first = out
		}
		var why string
		switch {
		case s.Exited():
			why = "the server exited"
		case again != nil && !again(out):
			why = "the client failed"
		case n >= tries:
			why = "no client reached the server"
		}
		if why != "" {
			msg := fmt.Sprintf("%s; client %d of at most %d: %v:\n%s", why, n, tries, err, out)
			if n > 1 && out != first {
				msg += "\nthe first client:\n" + first
			}
			t.Fatalf("%s\n%s", msg, s.Report())
			return ""
		}
		time.Sleep(pause)
	}
}

// ExitStatus is the error of a command's main function that returned
// code, as Go returns one for a process: nil for 0, else "exit status
// code".
func ExitStatus(code int) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("exit status %d", code)
}

// Refused reports whether a client's output says that it could not
// connect, as when nothing listens on the port yet: the kit's tools print
// their dial's error ("connection refused"), Debian's perftest "Couldn't
// connect to HOST:PORT". perftest's other messages that speak of a
// connection ("Unable to set up socket connection", "Unable to Connect
// the HCA's through the link") come after it connected, and do not match.
func Refused(out string) bool {
	return strings.Contains(out, "connection refused") || strings.Contains(out, "Couldn't connect to ")
}

// perftestUncalibrated begins the message Debian's perftest prints when it
// could not measure the CPU's clock rate.
const perftestUncalibrated = "Correlation coefficient r^2: "

// PerftestReport returns out, the output of one of Debian's perftest
// programs, without the lines of the message perftest prints when it could
// not measure the CPU's clock rate, and whether it printed one. perftest
// fits the time-stamp counter against gettimeofday over a few
// milliseconds; a process preempted meanwhile (a loaded machine) gets a fit
// with r² below 0.9, and perftest then divides its cycle counts by a rate
// of 0: the times in its latency table read inf (or nan), and its
// bandwidths 0. The message goes to stderr: in output combined with
// stdout it can fall inside the table.
func PerftestReport(out string) (report string, uncalibrated bool) {
	if !strings.Contains(out, perftestUncalibrated) {
		return out, false
	}
	lines := strings.SplitAfter(out, "\n")
	kept := lines[:0]
	for _, l := range lines {
		if !strings.Contains(l, perftestUncalibrated) {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, ""), true
}
