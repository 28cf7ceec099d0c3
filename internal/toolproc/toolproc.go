// Package toolproc runs a command's main function in a separate process
// from its tests: the test binary re-executes itself as the child, with
// the command's arguments in an environment variable.
package toolproc

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
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
	cx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(cx, os.Args[0], "-test.run=^"+childTest+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), env+"="+strings.Join(args, "\n")), vars...)
	var out Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s as a child process: %v", os.Args[0], err)
	}
	return cmd, &out
}

// ServeParams runs serve on a fresh loopback listener, connects to it,
// writes params in big-endian binary as a tool's client writes its
// parameters, and returns what serve returns, failing t if it has not
// returned within 20 s.
func ServeParams(t testing.TB, serve func(net.Listener) error, params any) error {
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
	select {
	case err := <-errc:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not answer")
		return nil
	}
}
