package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
	"github.com/mlx5kit/mlx5kit/sim"
)

// envToolArgs carries the arguments of TestToolChild, the test binary
// re-executed as a separate process running the command.
const envToolArgs = "MLX5KIT_PINGPONG_TEST_ARGS"

// TestToolChild runs the command in the child process a test started
// with toolProcess.
func TestToolChild(t *testing.T) {
	toolproc.Child(t, envToolArgs, func(args []string) int {
		// As main does; Main exits, so the return is not reached.
		perftool.Main(func() int { return run(args, os.Stdout, os.Stderr) })
		return 0
	})
}

// toolProcess starts the command in a process of its own.
func toolProcess(t *testing.T, env []string, args ...string) (*exec.Cmd, *toolproc.Buffer) {
	return toolproc.Start(t, envToolArgs, env, args...)
}

// listenWait is how long a test waits for its server, started on port 0,
// to say the address it listens on (toolproc's ListenAddress): a server
// listens before it opens a device, a process of its own soon after it
// starts.
const listenWait = 30 * time.Second

// TestServerClientTwoProcesses runs -server and -client in two processes on
// the software HCA: they join the default shared fabric and measure across
// it.
func TestServerClientTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two processes")
	}
	noFabric := sim.EnvFabric + "=" // the tools' own default applies
	server := toolproc.Watch(toolProcess(t, []string{noFabric}, "-provider", "sim", "-server", "127.0.0.1:0"))
	addr := server.ListenAddress(t, listenWait)
	require.True(t, strings.HasPrefix(addr, "127.0.0.1:") && addr != "127.0.0.1:0", addr)
	out := server.RetryClient(t, 50, 50*time.Millisecond, toolproc.Refused, func() (string, error) {
		client, cout := toolProcess(t, []string{noFabric}, "-provider", "sim", "-client", addr, "-iters", "2000", "-size", "8")
		err := client.Wait()
		return cout.String(), err
	})
	require.NoError(t, server.Wait(), "server: %s", server.Output())
	require.Equal(t, 2000, parseTable(t, out).iters, out)
	require.Contains(t, out, "client of "+addr)
	t.Logf("client:\n%s", out)
}

// fabricFiles returns a function that lists the /dev/shm files of the
// shared fabric name, and removes whatever is left of them when t ends.
func fabricFiles(t *testing.T, name string) func() []string {
	files := func() []string {
		m, err := filepath.Glob("/dev/shm/mlx5kit-" + name + "-*")
		require.NoError(t, err)
		return m
	}
	t.Cleanup(func() {
		for _, f := range files() {
			_ = os.Remove(f)
		}
	})
	return files
}

// TestServerClientLeaveTheFabric: -server and -client, each in a process
// of its own on a shared fabric, give their slots back as they exit, with
// their ring files (up to 32 MiB a ring), and the last one out removes the
// fabric's registry: /dev/shm keeps nothing of the fabric.
func TestServerClientLeaveTheFabric(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two processes")
	}
	name := fmt.Sprintf("pingpong-leave-%d", os.Getpid())
	files := fabricFiles(t, name)
	env := []string{sim.EnvFabric + "=" + name}
	server := toolproc.Watch(toolProcess(t, env, "-provider", "sim", "-server", "127.0.0.1:0"))
	addr := server.ListenAddress(t, listenWait)
	server.RetryClient(t, 50, 50*time.Millisecond, toolproc.Refused, func() (string, error) {
		client, cout := toolProcess(t, env, "-provider", "sim", "-client", addr, "-iters", "200", "-size", "8")
		err := client.Wait()
		return cout.String(), err
	})
	require.NoError(t, server.Wait(), "server: %s", server.Output())
	require.Empty(t, files())

	// The same on the emulated kernel (the mlx5 provider over libmlx5),
	// whose software HCA is not sim.Default: before, its ring file and
	// the registry stayed.
	emulated := append(env, "MLX5KIT_EMULATE=1")
	p, out := toolProcess(t, emulated, "-provider", "mlx5", "-iters", "200", "-size", "8")
	require.NoError(t, p.Wait(), "%s", out)
	require.Contains(t, out.String(), "t_typical")
	require.Empty(t, files())
}

// TestServerSignalLeavesTheFabric: a -server on a shared fabric stopped
// by SIGINT or SIGTERM while it waits for its client leaves the fabric
// (perftool.Main) and exits with 130 or 143: before, the signal ended it
// and its ring file and the fabric's registry stayed in /dev/shm.
func TestServerSignalLeavesTheFabric(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		name := fmt.Sprintf("pingpong-signal-%d-%d", sig, os.Getpid())
		files := fabricFiles(t, name)
		env := []string{sim.EnvFabric + "=" + name}
		cmd, out := toolProcess(t, env, "-provider", "sim", "-server", "127.0.0.1:0", "-timeout", "1m")
		server := toolproc.Watch(cmd, out)
		server.ListenAddress(t, listenWait)
		require.Eventually(t, func() bool { return len(files()) > 0 }, listenWait, 10*time.Millisecond,
			"the server joined no fabric: %s", out)
		require.NoError(t, cmd.Process.Signal(sig))
		err := server.Wait()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%v: %s", sig, out)
		require.Equal(t, 128+int(sig), exit.ExitCode(), "%v: %s", sig, out)
		require.Empty(t, files(), "%v", sig)
	}
}

// fabricEnv returns the environment of a test's two processes: a shared
// fabric of their own, whose files are removed at the test's end.
func fabricEnv(t *testing.T, test string) []string {
	name := fmt.Sprintf("pingpong-%s-%d", test, os.Getpid())
	t.Cleanup(func() {
		files, _ := filepath.Glob("/dev/shm/mlx5kit-" + name + "-*")
		for _, f := range files {
			_ = os.Remove(f)
		}
	})
	return []string{sim.EnvFabric + "=" + name}
}

// TestServerSeesClientKilled: a -server whose client is killed with
// SIGKILL in the middle of the run ends soon after with an error that says
// so (RETRY_EXC_ERR where a reply was in flight, else the client's closed
// connection), not at its timeout.
func TestServerSeesClientKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two processes")
	}
	env := fabricEnv(t, "killed")
	const timeout = time.Minute
	server := toolproc.Watch(toolProcess(t, env, "-provider", "sim", "-server", "127.0.0.1:0", "-timeout", timeout.String()))
	addr := server.ListenAddress(t, listenWait)
	client, cout := toolProcess(t, env, "-provider", "sim", "-client", addr, "-iters", "1000000000", "-size", "8", "-timeout", timeout.String())
	require.Eventually(t, func() bool { return strings.Contains(server.Output(), "answering") }, listenWait, 10*time.Millisecond,
		"server:\n%s\nclient:\n%s", server.Output(), cout)
	time.Sleep(200 * time.Millisecond) // well into the run
	killed := time.Now()
	require.NoError(t, client.Process.Signal(syscall.SIGKILL))
	_ = client.Wait()
	err := server.Wait()
	require.Error(t, err, "server:\n%s", server.Output())
	require.Less(t, time.Since(killed), timeout/3, "the server waited for its timeout:\n%s", server.Output())
	require.Regexp(t, `RETRY_EXC_ERR|the peer closed its connection: it exited or was killed`, server.Output())
	t.Logf("server:\n%s", server.Output())
}

// TestServerSeesClientFailed: a client whose wait fails tells the server
// so before it exits. The server is stopped until the client has failed
// (with RETRY_EXC_ERR, or at its -timeout when no message was in flight)
// and exited; resumed, the server stops with the peer's failure, not with
// the closed connection of a peer that exited or was killed.
func TestServerSeesClientFailed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two processes")
	}
	env := fabricEnv(t, "failed")
	scmd, sout := toolProcess(t, env, "-provider", "sim", "-server", "127.0.0.1:0", "-timeout", "1m")
	server := toolproc.Watch(scmd, sout)
	addr := server.ListenAddress(t, listenWait)
	client, cout := toolProcess(t, env, "-provider", "sim", "-client", addr, "-iters", "1000000000", "-size", "8", "-timeout", "1s")
	require.Eventually(t, func() bool { return strings.Contains(server.Output(), "answering") }, listenWait, 10*time.Millisecond,
		"server:\n%s\nclient:\n%s", server.Output(), cout)
	time.Sleep(200 * time.Millisecond) // well into the run
	require.NoError(t, scmd.Process.Signal(syscall.SIGSTOP))
	// The client fails within its -timeout, waits as long again for the
	// stopped server's word and exits.
	cerr := make(chan error, 1)
	go func() { cerr <- client.Wait() }()
	select {
	case err := <-cerr:
		require.Error(t, err, "client:\n%s", cout)
	case <-time.After(20 * time.Second):
		_ = scmd.Process.Signal(syscall.SIGCONT)
		t.Fatalf("the client did not end while the server was stopped:\n%s", cout)
	}
	require.NoError(t, scmd.Process.Signal(syscall.SIGCONT))
	require.Error(t, server.Wait(), "server:\n%s", server.Output())
	require.Contains(t, server.Output(), perftool.ErrPeerFailed.Error(), "server:\n%s\nclient:\n%s", server.Output(), cout)
	t.Logf("server:\n%s\nclient:\n%s", server.Output(), cout)
}
