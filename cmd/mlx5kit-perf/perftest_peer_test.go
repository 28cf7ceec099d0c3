package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestPerftestRecordFormat checks the queue pair record against perftest's
// KEY_PRINT_FMT and KEY_PRINT_FMT_GID: fixed widths, lower-case hex, the
// sizes perftest reads (59 and 108 bytes with the NUL), and a round trip.
func TestPerftestRecordFormat(t *testing.T) {
	d := perftestDest{LID: 0x41, OutReads: 16, QPN: 0x20100, PSN: 0xa2cf67, RKey: 0x24a, VAddr: 0x7f0a6c51e000}
	for i := range d.GID {
		d.GID[i] = byte(0xf0 + i)
	}
	plain := d.encode(false)
	require.Len(t, plain, perftestKeySize)
	require.Equal(t, "0041:0010:020100:a2cf67:0000024a:00007f0a6c51e000:00000000\x00", string(plain))
	withGID := d.encode(true)
	require.Len(t, withGID, perftestKeySizeGID)
	require.Equal(t, "0041:0010:020100:a2cf67:0000024a:00007f0a6c51e000:"+
		"f0:f1:f2:f3:f4:f5:f6:f7:f8:f9:fa:fb:fc:fd:fe:ff:00000000:\x00", string(withGID))

	got, err := decodePerftestDest(plain, false)
	require.NoError(t, err)
	want := d
	want.GID = ctx.GID{}
	require.Equal(t, want, got)
	got, err = decodePerftestDest(withGID, true)
	require.NoError(t, err)
	require.Equal(t, d, got)

	for _, bad := range []string{
		"0041:0010:020100:a2cf67:0000024a:00007f0a6c51e000\x00",           // a field short
		"0041:0010:02010g:a2cf67:0000024a:00007f0a6c51e000:00000000\x00",  // not hex
		"0041:0010:1020100:a2cf67:0000024a:00007f0a6c51e000:00000000\x00", // QPN above 24 bits
	} {
		_, err := decodePerftestDest([]byte(bad), false)
		require.ErrorIs(t, err, errPerftestPeer, "%q", bad)
	}
	_, err = decodePerftestDest(plain, true)
	require.ErrorIs(t, err, errPerftestPeer, "a record without the GID read as one with it")
}

// TestPerftestPeerFlags checks what --perftest-peer refuses: running
// without accepting that the exchange is unauthenticated, a key, a mode
// other than write_lat and send_lat, no peer, timed runs, -a with another
// top size, and -n below 4 (n-1 samples, the 2 largest left out).
func TestPerftestPeerFlags(t *testing.T) {
	t.Setenv(perftool.EnvKey, "")
	peer := []string{"--perftest-peer", "--accept-unauthenticated"}
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("0123456789abcdef0123456789abcdef"), 0o600))
	requireRejected(t,
		[]string{"write_lat", "--perftest-peer", "localhost"},
		append([]string{"write_lat", "--key-file", keyFile, "localhost"}, peer...),
		append([]string{"read_lat", "localhost"}, peer...),
		append([]string{"write_bw", "localhost"}, peer...),
		append([]string{"write_lat"}, peer...),
		append([]string{"write_lat", "-D", "2", "localhost"}, peer...),
		append([]string{"write_lat", "-a", "--max-size", "65536", "localhost"}, peer...),
		append([]string{"send_lat", "-n", "3", "localhost"}, peer...),
	)
	var out, errOut bytes.Buffer
	require.Equal(t, 2, run([]string{"write_lat", "--perftest-peer", "localhost"}, &out, &errOut))
	require.Contains(t, errOut.String(), "--accept-unauthenticated")

	cfg, code := parseFlags(append([]string{"send_lat", "-n", "50", "localhost"}, peer...), &errOut)
	require.Equal(t, -1, code, errOut.String())
	require.True(t, cfg.perftestPeer)
	cfg, code = parseFlags(append([]string{"write_lat", "-n", "50", "localhost"}, peer...), &errOut)
	require.Equal(t, -1, code, errOut.String())
	require.True(t, cfg.perftestPeer)
	require.Equal(t, "localhost:18515", cfg.client)
	// ib_write_lat's rule: no server given, wait for one on -p, on every
	// address, which perftest's exchange allows without a key.
	cfg, code = parseCommandLine("ib_write_lat", peer, &out, &errOut)
	require.Equal(t, -1, code, errOut.String())
	require.Equal(t, ":18515", cfg.server)

	t.Setenv(perftool.EnvKey, "0123456789abcdef0123456789abcdef")
	requireRejected(t, append([]string{"write_lat", "localhost"}, peer...))
}

// TestPerftestPeerTwoProcesses runs --perftest-peer at both ends, server
// and client in two processes on one software fabric: perftest's exchange
// and loops of write_lat and send_lat against themselves, every size of
// -a up to 8 MiB.
func TestPerftestPeerTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two processes per mode")
	}
	t.Setenv(perftool.EnvKey, "")
	removeFabrics(t, "perftest-peer-")
	for _, m := range []string{"write_lat", "send_lat"} {
		t.Run(m, func(t *testing.T) {
			fabric := sim.EnvFabric + "=perftest-peer-" + strconv.Itoa(os.Getpid()) + "-" + m
			server := toolproc.Watch(toolProcess(t, []string{fabric}, m, "--provider", "sim", "--perftest-peer", "--accept-unauthenticated",
				"-n", "20", "-a", "--server", "127.0.0.1:0"))
			addr := server.ListenAddress(t, listenWait)
			out := server.RetryClient(t, 50, 50*time.Millisecond, toolproc.Refused, func() (string, error) {
				client, cout := toolProcess(t, []string{fabric}, m, "--provider", "sim", "--perftest-peer", "--accept-unauthenticated",
					"-n", "20", "-a", "--client", addr)
				err := client.Wait()
				return cout.String(), err
			})
			require.NoError(t, server.Wait(), "server: %s", server.Output())
			for name, o := range map[string]string{"server": server.Output(), "client": out} {
				rows := latencyRows(t, o)
				require.Len(t, rows, 23, "%s: sizes 2 to 8 MiB:\n%s", name, o)
				for i, r := range rows {
					require.Equal(t, 2<<i, r.size, "%s:\n%s", name, o)
					require.Equal(t, 20, r.iters, "%s:\n%s", name, o)
				}
				require.Contains(t, o, "speaking perftest's exchange", name)
				// perftest's block: the TX depth on the client, the RX
				// depth of send_lat on the server.
				require.Equal(t, name == "client", strings.Contains(o, " TX depth        : "), "%s:\n%s", name, o)
				require.Equal(t, name == "server" && m == "send_lat", strings.Contains(o, " RX depth        : "), "%s:\n%s", name, o)
			}
		})
	}
}

// TestPerftestInterop runs mlx5kit-perf against Debian's ib_write_lat and
// ib_send_lat on one software fabric, both ways: perftest as the server
// (through mlx5kit-emulate) and the kit as the client, then the kit as
// the server and perftest as the client. Each pair has a minute.
func TestPerftestInterop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mlx5kit-emulate and its preload library and runs two processes per case")
	}
	for _, p := range []string{"ib_write_lat", "ib_send_lat"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (Debian package perftest; scripts/deps.sh installs it)", p)
		}
	}
	t.Setenv(perftool.EnvKey, "")
	removeFabrics(t, "perftest-interop-")
	dir := t.TempDir()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	launcher := filepath.Join(dir, "mlx5kit-emulate")
	out, err := exec.Command(goTool, "build", "-o", launcher, "../mlx5kit-emulate").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	env := append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(dir, "cache"), "MLX5KIT_EMULATE_LIB=")
	cmd := exec.Command(launcher, "-print-lib")
	cmd.Env = env
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "mlx5kit-emulate -print-lib: %s", out)

	// On RoCE (-link ethernet) the kit's end runs under the launcher too,
	// with --provider mlx5, or on the software HCA of its own process
	// with MLX5KIT_SIM_LINK_LAYER=ethernet (viaSim), which gives it
	// Ethernet ports.
	for i, c := range []struct {
		prog                    string
		kitServer, roce, viaSim bool
	}{{"ib_write_lat", false, false, false}, {"ib_write_lat", true, false, false}, {"ib_send_lat", false, false, false}, {"ib_send_lat", true, false, false},
		{"ib_write_lat", false, true, false}, {"ib_send_lat", true, true, false},
		{"ib_write_lat", true, true, true}, {"ib_send_lat", false, true, true}} {
		prog, kitServer, roce, viaSim := c.prog, c.kitServer, c.roce, c.viaSim
		name := prog + "/" + map[bool]string{false: "perftest-server", true: "kit-server"}[kitServer]
		if roce {
			name += "/roce"
		}
		if viaSim {
			name += "/sim"
		}
		t.Run(name, func(t *testing.T) {
			base := fmt.Sprintf("perftest-interop-%d-%d", os.Getpid(), i)
			fabric := base
			// The port of the exchange, which perftest takes with -p
			// at both ends: the kit's server listens on port 0 and
			// prints the port it got (below); Debian's perftest does
			// not say which port it bound, so for it a port found
			// free, which another process may take before it
			// listens: toolproc.ServeOnPort waits until perftest's own
			// socket listens on it, and starts it again on another
			// port where another process took it (below).
			var port string
			mode := strings.TrimPrefix(prog, "ib_")
			cx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			launch := func() []string {
				l := []string{"-fabric", fabric}
				if roce {
					l = append(l, "-link", "ethernet")
				}
				return l
			}
			perftest := func(extra ...string) *exec.Cmd {
				c := exec.CommandContext(cx, launcher, append(append(launch(), "--", prog, "-d", "mlx5_0", "-F", "-n", "200", "-s", "64", "-p", port), extra...)...)
				c.Env, c.WaitDelay = env, time.Second
				return c
			}
			kit := func(extra ...string) *exec.Cmd {
				args := []string{"-test.run=^TestToolChild$", "-test.count=1"}
				toolArgs := append([]string{mode, "--provider", "sim", "--perftest-peer", "--accept-unauthenticated", "-n", "200", "-s", "64"}, extra...)
				c := exec.CommandContext(cx, os.Args[0], args...)
				c.Env = append(os.Environ(), sim.EnvFabric+"="+fabric)
				switch {
				case viaSim:
					c.Env = append(c.Env, sim.EnvLinkLayer+"=ethernet")
					toolArgs = append(toolArgs, "-x", "3")
				case roce:
					c = exec.CommandContext(cx, launcher, append(append(launch(), "--", os.Args[0]), args...)...)
					c.Env = env
					toolArgs = append([]string{mode, "--provider", "mlx5", "-d", "mlx5_1", "-x", "3"}, toolArgs[3:]...)
				}
				c.Env = append(c.Env, envToolArgs+"="+strings.Join(toolArgs, "\n"))
				c.WaitDelay = time.Second
				return c
			}
			var server *toolproc.Server
			cli := func() *exec.Cmd { return kit("-p", port, "127.0.0.1") }
			if kitServer {
				cli = func() *exec.Cmd { return perftest("127.0.0.1") }
				srv := kit("--server", "127.0.0.1:0")
				var srvOut toolproc.Buffer
				srv.Stdout, srv.Stderr = &srvOut, &srvOut
				require.NoError(t, srv.Start())
				server = toolproc.Watch(srv, &srvOut)
				// cli reads port when it runs, after this.
				var err error
				_, port, err = net.SplitHostPort(server.ListenAddress(t, listenWait))
				require.NoError(t, err)
			} else {
				// perftest started again on another port runs on a
				// fresh fabric, the port in its name; the kit's
				// client, started after, joins the last one.
				server, _ = toolproc.ServeOnPort(t, time.Minute, func(p int) *exec.Cmd {
					port = strconv.Itoa(p)
					fabric = base + "-" + port
					return perftest()
				})
			}
			// A client is tried again only while the server is not
			// listening yet; once the server has exited, or a client
			// failed otherwise, the test fails with both outputs.
			notListening := func(out string) bool { return cx.Err() == nil && toolproc.Refused(out) }
			cliOut := server.RetryClient(t, 100, 100*time.Millisecond, notListening, func() (string, error) {
				out, err := cli().CombinedOutput()
				return string(out), err
			})
			require.NoError(t, server.Wait(), "server:\n%s\nclient:\n%s", server.Output(), cliOut)
			for name, o := range map[string]string{"server": server.Output(), "client": cliOut} {
				parse := latencyRows
				if (name == "server") != kitServer {
					parse = perftestLatencyRows
				}
				rows := parse(t, o)
				require.Len(t, rows, 1, "%s:\n%s", name, o)
				require.Equal(t, 64, rows[0].size, "%s:\n%s", name, o)
				require.Equal(t, 200, rows[0].iters, "%s:\n%s", name, o)
				if roce {
					require.Contains(t, o, "Link type       : Ethernet", "%s:\n%s", name, o)
				}
				// Both ends print ctx_print_test_info's depth lines by
				// role: the TX depth on the client, ib_send_lat's RX
				// depth on the server.
				require.Equal(t, name == "client", strings.Contains(o, " TX depth        : "), "%s:\n%s", name, o)
				require.Equal(t, name == "server" && prog == "ib_send_lat", strings.Contains(o, " RX depth        : "), "%s:\n%s", name, o)
				// perftest's complaints go to stderr, its exit status
				// 0 all the same: ib_send_lat's close exchange (a
				// last swap of records and "done") once left
				// "Failed to close connection between server and
				// client".
				for _, bad := range []string{"Failed", "Couldn't", "Unable"} {
					require.NotContains(t, o, bad, "%s:\n%s", name, o)
				}
			}
		})
	}
}

// removeFabrics removes, when the test ends, the shared-memory files of the
// fabrics this process named prefix<pid>-...
func removeFabrics(t *testing.T, prefix string) {
	t.Cleanup(func() {
		files, _ := filepath.Glob("/dev/shm/mlx5kit-" + prefix + strconv.Itoa(os.Getpid()) + "-*")
		for _, f := range files {
			_ = os.Remove(f)
		}
	})
}

// perftestPair runs perftestRun at both ends in this process, over a pipe:
// a server with serverArgs and a client with clientArgs (each after the
// mode and the flags every --perftest-peer end takes), and returns their
// reports.
func perftestPair(t *testing.T, mode string, serverArgs, clientArgs []string) (server, client string) {
	t.Helper()
	peer := []string{mode, "-provider", "sim", "--perftest-peer", "--accept-unauthenticated", "--timeout", "10s"}
	scfg := testConfig(t, append(append(slices.Clone(peer), serverArgs...), "--server", "127.0.0.1:0")...)
	ccfg := testConfig(t, append(append(slices.Clone(peer), clientArgs...), "127.0.0.1")...)
	server, client, errs := runPerftestPair(t, scfg, ccfg, 30*time.Second)
	for _, err := range errs {
		require.NoError(t, err, "server:\n%s\nclient:\n%s", server, client)
	}
	return server, client
}

// runPerftestPair runs perftestRun as the server with scfg and as the
// client with ccfg in this process, over a pipe, and returns their
// reports and both errors (in the order they returned); t fails if they
// have not both returned within limit.
func runPerftestPair(t *testing.T, scfg, ccfg config, limit time.Duration) (server, client string, errs []error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var sout, cout toolproc.Buffer
	errc := make(chan error, 2)
	go func() { errc <- perftestRun(scfg, a, true, &sout) }()
	go func() { errc <- perftestRun(ccfg, b, false, &cout) }()
	for range 2 {
		select {
		case err := <-errc:
			errs = append(errs, err)
		case <-time.After(limit):
			t.Fatalf("perftestRun did not return\nserver:\n%s\nclient:\n%s", sout.String(), cout.String())
		}
	}
	return sout.String(), cout.String(), errs
}

// TestPerftestPeerReportsPathMTU: the ends take the smaller of the two
// MTUs perftest's exchange swaps, and both reports say it; before, the end
// with the larger -m printed its own (Mtu : 4096[B] on a 1024-byte path),
// where perftest prints the one it connects with.
func TestPerftestPeerReportsPathMTU(t *testing.T) {
	t.Setenv(perftool.EnvKey, "")
	for _, m := range []string{"write_lat", "send_lat"} {
		t.Run(m, func(t *testing.T) {
			sout, cout := perftestPair(t, m, []string{"-n", "20", "-s", "4096"}, []string{"-n", "20", "-s", "4096", "-m", "1024"})
			for name, o := range map[string]string{"server": sout, "client": cout} {
				require.Contains(t, o, " Mtu             : 1024[B]\n", "%s:\n%s", name, o)
				rows := latencyRows(t, o)
				require.Len(t, rows, 1, "%s:\n%s", name, o)
				require.Equal(t, 20, rows[0].iters, "%s:\n%s", name, o)
			}
		})
	}
}

// TestPerftestPeerTimesFromPostToPost: against perftest, a sample is the
// time from one of the end's posts to its next, as perftest's tposted
// deltas, so each is a whole round trip. The peer here (the kit's end,
// driven by hand) waits 2 ms before each answer, so no half round trip is
// shorter than 1 ms. Before, each iteration was timed from its wait to its
// completion: the server's first write_lat sample was one write and its
// ACK, and its first send_lat sample the wait for a message that had
// already come, a few microseconds printed as t_min.
func TestPerftestPeerTimesFromPostToPost(t *testing.T) {
	t.Setenv(perftool.EnvKey, "")
	const n, size, pause = 10, 64, 2 * time.Millisecond
	for _, m := range []string{"write_lat", "send_lat"} {
		t.Run(m, func(t *testing.T) {
			args := []string{m, "-provider", "sim", "--perftest-peer", "--accept-unauthenticated", "--timeout", "10s", "-n", strconv.Itoa(n), "-s", strconv.Itoa(size)}
			scfg := testConfig(t, append(slices.Clone(args), "--server", "127.0.0.1:0")...)
			ccfg := testConfig(t, append(slices.Clone(args), "127.0.0.1")...)
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			var out toolproc.Buffer // read on a timeout, while the server may still write
			errc := make(chan error, 1)
			go func() { errc <- perftestRun(scfg, a, true, &out) }()
			k, err := perftestConnect(ccfg, b, false)
			require.NoError(t, err)
			defer k.s.Close()
			x := k.x
			if m == "write_lat" {
				for i := range uint32(n) {
					require.NoError(t, x.awaitLastByte(size, i+1))
					time.Sleep(pause)
					require.NoError(t, x.postWrite(size, i+1))
					require.NoError(t, x.drain())
				}
			} else {
				_, err := k.p.record(k.mine, k.gid)
				require.NoError(t, err)
				for i := range uint32(n) {
					if i > 0 {
						time.Sleep(pause)
					}
					require.NoError(t, x.Post(perftool.OpSend, size, i, true))
					require.NoError(t, x.awaitSend(size, i))
				}
				require.NoError(t, x.drain())
				require.NoError(t, k.p.close(k.mine, k.gid), "ib_send_lat's close exchange")
			}
			select {
			case err := <-errc:
				require.NoError(t, err, out.String())
			case <-time.After(30 * time.Second):
				t.Fatalf("perftestRun did not return:\n%s", out.String())
			}
			rows := latencyRows(t, out.String())
			require.Len(t, rows, 1, out.String())
			require.Equal(t, n, rows[0].iters, out.String())
			require.GreaterOrEqual(t, rows[0].tMin, float64(pause.Microseconds())/2, "a sample shorter than the peer's pause:\n%s", out.String())
		})
	}
}

// TestServePerftestClient: a server without --perftest-peer that perftest's
// client (its version string first) reaches says what the client speaks
// and which flag speaks it, at once.
func TestServePerftestClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write(append([]byte("6.06"), make([]byte, 12)...))
	require.NoError(t, err)
	var out bytes.Buffer
	err = serve(testConfig(t, "write_lat", "-provider", "sim"), ln, &out, &bytes.Buffer{})
	require.ErrorIs(t, err, perftool.ErrPerftestClient)
	require.ErrorContains(t, err, "--perftest-peer speaks it")
}

// TestDialPerftestServerHint: a client without --perftest-peer that reaches
// perftest's server (its version string first) points at --perftest-peer,
// with a key ($MLX5KIT_KEY) or without.
func TestDialPerftestServerHint(t *testing.T) {
	for _, key := range []string{"", "the key of both ends, 32 bytes.."} {
		t.Setenv(perftool.EnvKey, key)
		addr := toolproc.ServeOne(t, func(c net.Conn) {
			_, _ = c.Write(append([]byte("6.06"), make([]byte, 12)...))
			_, _ = io.Copy(io.Discard, c)
		})
		err := dial(testConfig(t, "write_lat", "-provider", "sim", "-client", addr), &bytes.Buffer{})
		require.ErrorIs(t, err, perftool.ErrPerftestServer, "key %q", key)
		require.ErrorContains(t, err, "--perftest-peer speaks it")
	}
}

// TestPerftestPeerSeesPeerGone: an end of --perftest-peer whose peer
// closes the TCP connection (perftest exited or was killed) while the end
// waits for its message stops within about perftool.PeerCheck with
// endpoint.ErrPeerGone, not at --timeout; before, it waited the whole
// timeout.
func TestPerftestPeerSeesPeerGone(t *testing.T) {
	t.Setenv(perftool.EnvKey, "")
	for _, m := range []string{"write_lat", "send_lat"} {
		t.Run(m, func(t *testing.T) {
			args := []string{m, "-provider", "sim", "--perftest-peer", "--accept-unauthenticated", "--timeout", "20s", "-n", "10", "-s", "64"}
			scfg := testConfig(t, append(slices.Clone(args), "--server", "127.0.0.1:0")...)
			ccfg := testConfig(t, append(slices.Clone(args), "127.0.0.1")...)
			a, b := toolproc.TCPPair(t)
			errc := make(chan error, 1)
			go func() { errc <- perftestRun(scfg, a, true, &bytes.Buffer{}) }()
			k, err := perftestConnect(ccfg, b, false)
			require.NoError(t, err)
			defer k.s.Close()
			if m == "send_lat" {
				_, err := k.p.record(k.mine, k.gid)
				require.NoError(t, err)
			}
			// The peer goes before its first message: the server waits
			// for it (send_lat) or for the answer to its own (write_lat).
			require.NoError(t, b.Close())
			start := time.Now()
			select {
			case err := <-errc:
				require.ErrorIs(t, err, endpoint.ErrPeerGone)
				require.Less(t, time.Since(start), 5*time.Second)
			case <-time.After(15 * time.Second):
				t.Fatal("perftestRun did not see its peer gone")
			}
		})
	}
}
