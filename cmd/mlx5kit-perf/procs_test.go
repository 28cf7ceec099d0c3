package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
	"github.com/mlx5kit/mlx5kit/sim"
)

// envToolArgs carries the arguments of TestToolChild, the test binary
// re-executed as a separate process running the command.
const envToolArgs = "MLX5KIT_PERF_TEST_ARGS"

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

// TestServerClientTwoProcesses runs every mode with the server and the
// client in two processes on the software HCA, joined in one shared fabric.
func TestServerClientTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two processes per mode")
	}
	fabric := sim.EnvFabric + "=perf-test-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		files, _ := filepath.Glob("/dev/shm/mlx5kit-perf-test-" + strconv.Itoa(os.Getpid()) + "-*")
		for _, f := range files {
			_ = os.Remove(f)
		}
	})
	for _, m := range modeNames {
		t.Run(m, func(t *testing.T) {
			server := toolproc.Watch(toolProcess(t, []string{fabric}, m, "-provider", "sim", "-server", "127.0.0.1:0"))
			addr := server.ListenAddress(t, listenWait)
			out := server.RetryClient(t, 50, 50*time.Millisecond, toolproc.Refused, func() (string, error) {
				client, cout := toolProcess(t, []string{fabric}, m, "-provider", "sim", "-client", addr, "-iters", "200", "-size", "8")
				err := client.Wait()
				return cout.String(), err
			})
			require.NoError(t, server.Wait(), "server: %s", server.Output())
			require.Contains(t, server.Output(), "serving "+m)
			if strings.HasSuffix(m, "_lat") {
				require.Equal(t, 200, latencyRows(t, out)[0].iters, out)
			} else {
				require.Equal(t, 200, bandwidthRows(t, out)[0].iters, out)
			}
		})
	}
}
