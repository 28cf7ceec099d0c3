// Package toolproc runs a command's main function in a separate process
// from its tests: the test binary re-executes itself as the child, with
// the command's arguments in an environment variable.
package toolproc

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

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
// and errors are collected in the returned buffer once it has exited.
func Start(t testing.TB, env string, vars []string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(cx, os.Args[0], "-test.run=^"+childTest+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), env+"="+strings.Join(args, "\n")), vars...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s as a child process: %v", os.Args[0], err)
	}
	return cmd, &out
}
