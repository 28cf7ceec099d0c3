package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
)

// emulateLauncher builds mlx5kit-emulate into a temporary directory and
// returns it with the environment its runs need (its preload library
// built into a private cache).
func emulateLauncher(t *testing.T) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	launcher := filepath.Join(dir, "mlx5kit-emulate")
	out, err := exec.Command(goTool, "build", "-o", launcher, "../mlx5kit-emulate").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	// A private cache for the preload library, but the Go build cache of
	// this test's go (XDG_CACHE_HOME would move it too, and an empty one
	// rebuilds the standard library).
	gocache, err := exec.Command(goTool, "env", "GOCACHE").Output()
	require.NoError(t, err)
	env := append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(dir, "cache"), "GOCACHE="+strings.TrimSpace(string(gocache)),
		"MLX5KIT_EMULATE_LIB=", perftool.EnvKey+"=")
	cmd := exec.Command(launcher, "-print-lib")
	cmd.Env = env
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "mlx5kit-emulate -print-lib: %s", out)
	return launcher, env
}

// TestLanesEmulatedDevice runs -c UD, -c DC and -q through the hardware
// provider (libibverbs and libmlx5 on the emulated uverbs kernel), both
// ends in one process; then, where Debian's perftest is installed, runs
// its ib_send_lat -c UD and ib_write_bw -q 2 on the emulated device and
// checks that mlx5kit-perf prints the same info-block lines and address
// lines (read by one pattern) for the same command line.
func TestLanesEmulatedDevice(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mlx5kit-emulate and its preload library and runs processes under it")
	}
	launcher, env := emulateLauncher(t)
	cx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fabric := func() string { return fmt.Sprintf("perf-lanes-emu-%d-%d", os.Getpid(), time.Now().UnixNano()) }
	removeFabrics(t, "perf-lanes-emu-")
	kit := func(args ...string) string {
		t.Helper()
		c := exec.CommandContext(cx, launcher, "-fabric", fabric(), "--", os.Args[0], "-test.run=^TestToolChild$", "-test.count=1")
		c.Env = append(env, envToolArgs+"="+strings.Join(append(args, "--provider", "mlx5", "-d", "mlx5_0", "-F"), "\n"))
		c.WaitDelay = time.Second
		out, err := c.CombinedOutput()
		require.NoError(t, err, "%q:\n%s", args, out)
		o := string(out)
		require.Contains(t, o, "mlx5_0")
		require.NotContains(t, o, "software HCA", "the hardware provider ran")
		return o
	}
	ours := map[string]string{}
	for _, args := range [][]string{
		{"send_lat", "-c", "UD", "-n", "200", "-s", "1000"},
		{"write_lat", "-c", "DC", "-n", "200"},
		{"atomic_bw", "-c", "DC", "-q", "2", "-n", "100"},
		{"write_bw", "-q", "2", "-n", "100", "-s", "65536"},
	} {
		out := kit(args...)
		ours[args[0]] = out
		q := 1
		if i := indexOf(args, "-q"); i >= 0 {
			q, _ = strconv.Atoi(args[i+1])
		}
		require.Len(t, addressLines(t, out, "local"), q, out)
		require.Len(t, addressLines(t, out, "remote"), q, out)
		if strings.HasSuffix(args[0], "_lat") {
			require.Equal(t, 200, latencyRows(t, out)[0].iters, out)
		} else {
			require.Equal(t, 100*q, bandwidthRows(t, out)[0].iters, out)
		}
	}

	for _, p := range []string{"ib_send_lat", "ib_write_bw"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (Debian package perftest; scripts/deps.sh installs it)", p)
		}
	}
	block := regexp.MustCompile(`(?m)^ (Number of qps|Connection type|Mtu|Link type|Max inline data|TX depth) .*$`)
	for _, c := range []struct {
		mode string
		args []string
	}{
		{"send_lat", []string{"ib_send_lat", "-c", "UD", "-n", "200", "-s", "1000"}},
		{"write_bw", []string{"ib_write_bw", "-q", "2", "-n", "100", "-s", "65536", "-t", "64"}},
	} {
		theirs := emulatedPerftest(cx, t, launcher, env, fabric, c.args...)
		want := block.FindAllString(theirs, -1)
		require.NotEmpty(t, want, theirs)
		got := block.FindAllString(ours[c.mode], -1)
		for _, l := range want {
			if strings.HasPrefix(l, " Max inline data") && c.mode == "write_bw" {
				continue // perftest's bandwidth tests default to no inline data; mlx5kit-perf's -I is 220
			}
			require.Contains(t, got, l, "perftest:\n%s\nmlx5kit-perf:\n%s", theirs, ours[c.mode])
		}
		// The address lines follow one pattern, one per queue pair.
		for _, side := range []string{"local", "remote"} {
			require.Len(t, addressLines(t, ours[c.mode], side), len(addressLines(t, theirs, side)), theirs)
		}
		if c.mode == "write_bw" {
			require.Equal(t, bandwidthRows(t, ours[c.mode])[0].iters, atoi(t, perftestRowsLoose(t, theirs)[0][1]), "#iterations counts every queue pair's")
		}
	}
}

// emulatedPerftest runs Debian's perftest program args[0] with args[1:],
// a server and its client on one fabric under launcher (with env), and
// returns the client's output. perftest takes the port of its exchange
// with -p and does not say which port it bound: toolproc.ServeOnPort
// waits until the server's own socket listens on it, and starts it again
// on another port, on a fresh fabric, where another process took it.
func emulatedPerftest(cx context.Context, t *testing.T, launcher string, env []string, fabric func() string, args ...string) string {
	t.Helper()
	var f string
	run := func(port int, extra ...string) *exec.Cmd {
		c := exec.CommandContext(cx, launcher, append(append([]string{"-fabric", f, "--"}, args...), append([]string{"-d", "mlx5_0", "-F", "-p", strconv.Itoa(port)}, extra...)...)...)
		c.Env, c.WaitDelay = env, time.Second
		return c
	}
	server, port := toolproc.ServeOnPort(t, time.Minute, func(port int) *exec.Cmd {
		f = fabric()
		return run(port)
	})
	out := server.RetryClient(t, 100, 100*time.Millisecond, toolproc.Refused, func() (string, error) {
		out, err := run(port, "127.0.0.1").CombinedOutput()
		return string(out), err
	})
	require.NoError(t, server.Wait(), "%q server:\n%s", args, server.Output())
	return out
}

// indexOf returns the index of s in args, or -1.
func indexOf(args []string, s string) int {
	for i, a := range args {
		if a == s {
			return i
		}
	}
	return -1
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

// perftestRowsLoose returns the fields of the table rows of a perftest
// report whatever its header's unit (perftest's message that it could not
// measure the CPU's clock rate, which can fall inside the table, left out:
// toolproc.PerftestReport).
func perftestRowsLoose(t *testing.T, out string) [][]string {
	t.Helper()
	var rows [][]string
	in := false
	report, _ := toolproc.PerftestReport(out)
	for _, l := range strings.Split(report, "\n") {
		switch {
		case strings.HasPrefix(l, " #bytes"):
			in = true
		case in && strings.HasPrefix(l, "-----"):
			in = false
		case in:
			rows = append(rows, strings.Fields(l))
		}
	}
	require.NotEmpty(t, rows, out)
	return rows
}
