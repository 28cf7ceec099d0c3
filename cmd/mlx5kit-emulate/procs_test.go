//go:build cgo && linux

package main

import (
	"context"
	"fmt"
	"go/build"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/toolproc"
)

// The launcher is built once per test binary, and the preload library
// with it through the launcher's own build into a private cache.
var launcher struct {
	once      sync.Once
	path, lib string
	cache     string
	err       error
}

func buildLauncher(t *testing.T) (path, cache string) {
	t.Helper()
	launcher.once.Do(func() {
		dir, err := os.MkdirTemp("", "mlx5kit-emulate-test-")
		if err != nil {
			launcher.err = err
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(build.Default.GOROOT, "bin", "go")
		}
		launcher.path = filepath.Join(dir, "mlx5kit-emulate")
		if out, err := exec.Command(goTool, "build", "-o", launcher.path, ".").CombinedOutput(); err != nil {
			launcher.err = fmt.Errorf("go build: %w: %s", err, out)
			return
		}
		launcher.cache = filepath.Join(dir, "cache")
		// The launcher builds the library from the checkout holding the
		// working directory into $XDG_CACHE_HOME.
		cmd := exec.Command(launcher.path, "-print-lib")
		cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+launcher.cache, envLib+"=")
		out, err := cmd.Output()
		if err != nil {
			launcher.err = fmt.Errorf("mlx5kit-emulate -print-lib: %w", err)
			return
		}
		launcher.lib = strings.TrimSpace(string(out))
	})
	require.NoError(t, launcher.err)
	require.FileExists(t, launcher.lib)
	require.True(t, strings.HasPrefix(launcher.lib, launcher.cache), "library %s outside the cache %s", launcher.lib, launcher.cache)
	return launcher.path, launcher.cache
}

func TestMain(m *testing.M) {
	code := m.Run()
	if launcher.path != "" {
		_ = os.RemoveAll(filepath.Dir(launcher.path))
	}
	os.Exit(code)
}

// runPair runs a server and its client, each as mlx5kit-emulate -fabric
// <private> -names names -link link -- prog args..., the client with localhost added,
// both bounded by limit, and returns their outputs.
func runPair(t *testing.T, names, link, prog string, args []string, portFlag string, limit time.Duration) (server, client string) {
	t.Helper()
	return runPairOn(t, false, names, link, prog, args, portFlag, limit)
}

// runPairOn is runPair on a private shared fabric, or with tcp on a TCP
// link of its own over 127.0.0.1 (the server's end listens), its key in
// the environment.
func runPairOn(t *testing.T, tcp bool, names, link, prog string, args []string, portFlag string, limit time.Duration) (server, client string) {
	t.Helper()
	path, err := exec.LookPath(prog)
	if err != nil {
		t.Skipf("%s is not installed (Debian package %s; scripts/deps.sh installs it)", prog, debianPackage(prog))
	}
	exe, cache := buildLauncher(t)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	// The fabric of a server started again on another port is a fresh
	// one, the port in its name; so is a link.
	var fabric, linkAddr string
	command := func(port int, listen bool, extra ...string) *exec.Cmd {
		join := []string{"-fabric", fabric}
		if tcp {
			join = []string{"-tcp", linkAddr}
			if listen {
				join[1] = "listen:" + linkAddr
			}
		}
		argv := append(join, "-names", names, "-link", link, "--", path)
		argv = append(append(argv, args...), portFlag, strconv.Itoa(port))
		cmd := exec.CommandContext(ctx, exe, append(argv, extra...)...)
		cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+cache, envLib+"=", envTCPKey+"=emulate-test-link-key")
		cmd.WaitDelay = time.Second
		return cmd
	}
	// The programs take the port with portFlag and do not say which
	// port they bound: ServeOnPort waits until the server's own socket
	// listens on it, on another port where another process took it.
	srv, port := toolproc.ServeOnPort(t, limit, func(port int) *exec.Cmd {
		if tcp {
			linkAddr = freeAddr(t)
			return command(port, true)
		}
		f := fmt.Sprintf("emutest-%d-%d", os.Getpid(), port)
		fabric = f
		t.Cleanup(func() {
			// The sweepers remove the files; a failed test may leave
			// them.
			files, _ := filepath.Glob("/dev/shm/mlx5kit-" + f + "-*")
			for _, f := range files {
				_ = os.Remove(f)
			}
		})
		return command(port, true)
	})
	cliOut, cliErr := command(port, false, "localhost").CombinedOutput()
	srvErr := srv.Wait()
	require.NoError(t, ctx.Err(), "%s pair ran past %v\nserver:\n%s\nclient:\n%s", prog, limit, srv.Output(), cliOut)
	require.NoError(t, cliErr, "%s client\n%s\nserver:\n%s", prog, cliOut, srv.Output())
	require.NoError(t, srvErr, "%s server\n%s\nclient:\n%s", prog, srv.Output(), cliOut)
	if tcp {
		return srv.Output(), string(cliOut)
	}
	// The programs exit without leaving the fabric: the launchers'
	// sweepers remove their ring files and the registry.
	var left []string
	require.Eventually(t, func() bool {
		left, _ = filepath.Glob("/dev/shm/mlx5kit-" + fabric + "-*")
		return len(left) == 0
	}, 10*time.Second, 10*time.Millisecond, "files of fabric %s after both programs exited: %v", fabric, &left)
	return srv.Output(), string(cliOut)
}

// freeAddr returns 127.0.0.1 and a port no socket used a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func debianPackage(prog string) string {
	if strings.HasPrefix(prog, "ibv_") {
		return "ibverbs-utils"
	}
	return "perftest"
}

// TestRdmaCorePingPongTwoProcesses runs Debian's ibverbs-utils pingpong
// programs, server and client in two processes, through the launcher on
// one software fabric: the two emulated kernels join it and their QPs
// reach each other.
func TestRdmaCorePingPongTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the preload library and runs two processes per case")
	}
	for _, c := range []struct {
		prog, names, link string
		args              []string
	}{
		{"ibv_rc_pingpong", "mlx5", "infiniband", []string{"-d", "mlx5_0", "-n", "200"}},
		{"ibv_rc_pingpong", "sim", "ethernet", []string{"-d", "sim0", "-g", "1", "-n", "200"}},
		{"ibv_ud_pingpong", "mlx5", "infiniband", []string{"-d", "mlx5_0", "-n", "200"}},
		{"ibv_srq_pingpong", "mlx5", "infiniband", []string{"-d", "mlx5_0", "-n", "200"}},
		// UC: the model's RC QP without acknowledgement.
		{"ibv_uc_pingpong", "mlx5", "infiniband", []string{"-d", "mlx5_0", "-n", "200"}},
		{"ibv_uc_pingpong", "mlx5", "ethernet", []string{"-d", "mlx5_0", "-g", "1", "-n", "200"}},
		// CQE timestamps: the device reports its clock's mask.
		{"ibv_rc_pingpong", "mlx5", "infiniband", []string{"-d", "mlx5_0", "-t", "-n", "200"}},
		// UD on RoCE from the IPv4 GID: CREATE_AH resolves the peer
		// process's GID to its port's MAC.
		{"ibv_ud_pingpong", "mlx5", "ethernet", []string{"-d", "mlx5_0", "-g", "3", "-c", "-n", "200"}},
	} {
		t.Run(c.prog+"/"+c.names+"/"+c.link+strings.Join(c.args[2:len(c.args)-2], ""), func(t *testing.T) {
			srv, cli := runPair(t, c.names, c.link, c.prog, c.args, "-p", time.Minute)
			for name, out := range map[string]string{"server": srv, "client": cli} {
				require.Contains(t, out, "200 iters in", "%s:\n%s", name, out)
				require.Contains(t, out, "remote address:", "%s:\n%s", name, out)
				if slices.Contains(c.args, "-t") {
					require.Contains(t, out, "Average receive completion clock cycles = ", "%s:\n%s", name, out)
				}
			}
		})
	}
}

// TestPerftestTwoProcesses runs Debian's perftest programs, server and
// client in two processes, through the launcher: the TCP exchange of the
// QP numbers, LIDs or GIDs, keys and addresses, then the RC traffic on the
// software fabric.
func TestPerftestTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the preload library and runs two processes per case")
	}
	for _, c := range []struct {
		prog, link, header string
		extra              []string
	}{
		{"ib_write_lat", "infiniband", "t_typical[usec]", nil},
		// 900 bytes inline: a 1 KiB send WQE (max_sq_desc_sz 1024), as
		// on a ConnectX.
		{"ib_write_lat", "infiniband", "t_typical[usec]", []string{"-I", "900", "-s", "900"}},
		{"ib_write_lat", "ethernet", "t_typical[usec]", nil},
		{"ib_read_lat", "infiniband", "t_typical[usec]", nil},
		{"ib_send_lat", "infiniband", "t_typical[usec]", nil},
		{"ib_atomic_lat", "infiniband", "t_typical[usec]", nil},
		{"ib_write_bw", "infiniband", "BW average[MB/sec]", nil},
		// Completion events: each test arms after an event, polls once,
		// and goes on as if a message came.
		{"ib_send_lat", "infiniband", "t_typical[usec]", []string{"-e"}},
		{"ib_read_lat", "infiniband", "t_typical[usec]", []string{"-e"}},
		{"ib_atomic_lat", "infiniband", "t_typical[usec]", []string{"-e"}},
		// UC: WRITE and SEND, latency and bandwidth.
		{"ib_write_lat", "infiniband", "t_typical[usec]", []string{"-c", "UC"}},
		{"ib_send_lat", "infiniband", "t_typical[usec]", []string{"-c", "UC"}},
		{"ib_write_bw", "infiniband", "BW average[MB/sec]", []string{"-c", "UC"}},
		{"ib_send_bw", "infiniband", "BW average[MB/sec]", []string{"-c", "UC"}},
		// Several queue pairs, both directions, an SRQ, reads in flight,
		// compare-and-swap, UD on InfiniBand.
		{"ib_write_bw", "infiniband", "BW average[MB/sec]", []string{"-q", "4"}},
		{"ib_send_bw", "infiniband", "BW average[MB/sec]", []string{"-b"}},
		{"ib_send_bw", "infiniband", "BW average[MB/sec]", []string{"--use-srq"}},
		{"ib_read_bw", "infiniband", "BW average[MB/sec]", []string{"-o", "4"}},
		{"ib_atomic_lat", "infiniband", "t_typical[usec]", []string{"-A", "CMP_AND_SWAP"}},
		{"ib_send_bw", "infiniband", "BW average[MB/sec]", []string{"-c", "UD"}},
	} {
		t.Run(c.prog+"/"+c.link+strings.Join(c.extra, ""), func(t *testing.T) {
			_, cli := runPair(t, "mlx5", c.link, c.prog, append([]string{"-d", "mlx5_0", "-F", "-n", "200"}, c.extra...), "-p", time.Minute)
			require.Contains(t, cli, "Device         : mlx5_0", "client:\n%s", cli)
			if slices.Contains(c.extra, "-I") {
				require.Contains(t, cli, "Max inline data : 900[B]", "client:\n%s", cli)
			}
			if slices.Contains(c.extra, "UC") {
				require.Contains(t, cli, "Connection type : UC", "client:\n%s", cli)
			}
			require.Contains(t, cli, c.header, "client:\n%s", cli)
			if slices.Contains(c.extra, "-q") {
				// perftest counts every queue pair's iterations.
				requireResultRowOf(t, cli, 4*200)
				return
			}
			requireResultRow(t, cli)
		})
	}
}

// TestTwoProcessesOverTCPLink runs an rdma-core pingpong and a perftest
// pair through the launcher with -tcp: the two emulated kernels' software
// HCAs join a TCP link over 127.0.0.1 (the server's listens), as on two
// hosts, instead of a shared fabric.
func TestTwoProcessesOverTCPLink(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the preload library and runs two processes per case")
	}
	for _, c := range []struct {
		prog, want string
		args       []string
	}{
		{"ibv_rc_pingpong", "200 iters in", []string{"-d", "mlx5_0", "-n", "200"}},
		{"ib_write_lat", "t_typical[usec]", []string{"-d", "mlx5_0", "-F", "-n", "200"}},
		{"ib_read_lat", "t_typical[usec]", []string{"-d", "mlx5_0", "-F", "-n", "200"}},
	} {
		t.Run(c.prog, func(t *testing.T) {
			srv, cli := runPairOn(t, true, "mlx5", "infiniband", c.prog, c.args, "-p", time.Minute)
			require.Contains(t, cli, c.want, "client:\n%s", cli)
			require.Contains(t, srv+cli, "remote address:", "server:\n%s\nclient:\n%s", srv, cli)
			// The QPs are numbered in the link's slots (128 and up),
			// above every shared fabric's.
			qpns := regexp.MustCompile(`QPN[ :]+0x([0-9a-f]+)`).FindAllStringSubmatch(srv+cli, -1)
			require.Len(t, qpns, 4, "server:\n%s\nclient:\n%s", srv, cli)
			for _, m := range qpns {
				n, err := strconv.ParseUint(m[1], 16, 32)
				require.NoError(t, err)
				require.GreaterOrEqual(t, n>>16, uint64(0x81), "QPN %#x is not a link slot's", n)
			}
		})
	}
}

// TestPerftestDCTwoProcesses runs perftest's DC tests, server and client
// in two processes: perftest moves its DCI to RTR with an address vector,
// which the kernels whose modify_dci_qp_is_ok takes IB_QP_AV accept. The
// latency tests give each end a DCI and a DCT, and create the DCI on the
// DCT's SRQ, which mlx5_ib takes (the emulated kernel answered
// EOPNOTSUPP, and perftest "Unable to create QP").
func TestPerftestDCTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the preload library and runs two processes per case")
	}
	for _, c := range []struct {
		prog, header string
	}{
		{"ib_write_bw", "BW average[MB/sec]"},
		{"ib_send_bw", "BW average[MB/sec]"},
		{"ib_read_bw", "BW average[MB/sec]"},
		{"ib_atomic_bw", "BW average[MB/sec]"},
		{"ib_write_lat", "t_typical[usec]"},
		{"ib_send_lat", "t_typical[usec]"},
		{"ib_read_lat", "t_typical[usec]"},
		{"ib_atomic_lat", "t_typical[usec]"},
	} {
		t.Run(c.prog, func(t *testing.T) {
			_, cli := runPair(t, "mlx5", "infiniband", c.prog, []string{"-d", "mlx5_0", "-F", "-n", "200", "-c", "DC"}, "-p", time.Minute)
			require.Contains(t, cli, "Connection type : DC", "client:\n%s", cli)
			require.Contains(t, cli, c.header, "client:\n%s", cli)
			requireResultRow(t, cli)
		})
	}
}

// TestPerftestUDOnRoCETwoProcesses runs perftest's UD tests on RoCE ports,
// server and client in two processes. perftest chooses an IPv4 GID (index
// 3) and creates an address handle to the other end's: the emulated
// kernel's CREATE_AH resolves it to the MAC of the other process's port,
// as a host's neighbour table does for the hosts of its subnet. It used
// to know only its own process's ports and refused with ETIMEDOUT
// ("Failed to create AH").
func TestPerftestUDOnRoCETwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the preload library and runs two processes per case")
	}
	for _, c := range []struct {
		prog, header string
	}{
		{"ib_send_lat", "t_typical[usec]"},
		{"ib_send_bw", "BW average[MB/sec]"},
	} {
		t.Run(c.prog, func(t *testing.T) {
			_, cli := runPair(t, "mlx5", "ethernet", c.prog, []string{"-d", "mlx5_0", "-F", "-n", "200", "-c", "UD"}, "-p", time.Minute)
			require.Contains(t, cli, "Connection type : UD", "client:\n%s", cli)
			require.Contains(t, cli, "Link type       : Ethernet", "client:\n%s", cli)
			require.Contains(t, cli, c.header, "client:\n%s", cli)
			requireResultRow(t, cli)
		})
	}
}

// requireResultRow requires a row for 200 iterations in the report of one
// of Debian's perftest programs, with a number after the iterations; "inf"
// or "nan" there where perftest says it could not measure the CPU's clock
// rate (toolproc.PerftestReport), which a loaded machine can make it.
func requireResultRow(t *testing.T, out string) {
	t.Helper()
	requireResultRowOf(t, out, 200)
}

// requireResultRowOf is requireResultRow for a row of n iterations.
func requireResultRowOf(t *testing.T, out string, n int) {
	t.Helper()
	report, uncalibrated := toolproc.PerftestReport(out)
	row := fmt.Sprintf(`(?m)^\s*\d+\s+%d\s+\d`, n)
	if uncalibrated {
		row = fmt.Sprintf(`(?m)^\s*\d+\s+%d\s+(\d|inf|-?nan)`, n)
	}
	require.Regexp(t, row, report, "a result row for %d iterations:\n%s", n, out)
}

// TestRequireResultRowUncalibrated: a row of inf times passes where
// perftest said it could not measure the clock rate.
func TestRequireResultRowUncalibrated(t *testing.T) {
	requireResultRow(t, " #bytes #iterations    t_min[usec]\nCorrelation coefficient r^2: 0.35 < 0.9\n 2       200          inf\n")
	requireResultRow(t, " #bytes #iterations    t_min[usec]\n 2       200          1.02\n")
}

// TestSweeperRemovesFiles: a program under the launcher that opened the
// device (and so joined the fabric) leaves no file in /dev/shm once it has
// exited, and the process that removes them is not the program's child.
func TestSweeperRemovesFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the preload library")
	}
	devinfo, err := exec.LookPath("ibv_devinfo")
	if err != nil {
		t.Skipf("ibv_devinfo is not installed (Debian package ibverbs-utils; scripts/deps.sh installs it)")
	}
	exe, cache := buildLauncher(t)
	fabric := fmt.Sprintf("emusweep-%d", os.Getpid())
	files := func() []string {
		f, _ := filepath.Glob("/dev/shm/mlx5kit-" + fabric + "-*")
		return f
	}
	t.Cleanup(func() {
		for _, f := range files() {
			_ = os.Remove(f)
		}
	})
	// dash's read is a builtin: the shell has no child of its own when
	// it reads the list of its children.
	script := `read c < /proc/$$/task/$$/children; echo "children:$c"; ` + devinfo + ` -d mlx5_0 && ls /dev/shm/mlx5kit-` + fabric + `-registry`
	cmd := exec.Command(exe, "-fabric", fabric, "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+cache, envLib+"=")
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "children:\n", "the program has no child when it starts:\n%s", out)
	require.Contains(t, string(out), "hca_id:\tmlx5_0", "%s", out)
	require.Contains(t, string(out), "mlx5kit-"+fabric+"-registry", "the program joined the fabric:\n%s", out)
	var left []string
	require.Eventually(t, func() bool { left = files(); return len(left) == 0 }, 10*time.Second, 10*time.Millisecond, "files left: %v", &left)
}
