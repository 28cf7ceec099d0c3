package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/devicetest"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
	"github.com/mlx5kit/mlx5kit/sim"
)

// latRow and bwRow are table lines.
type latRow struct {
	size, iters                                int
	tMin, tMax, typical, avg, stdev, p99, p999 float64
}

type bwRow struct {
	size, iters     int
	peak, avg, mpps float64
}

// tableRows returns the fields of every line after the line naming the
// columns, each checked to hold want numbers.
func tableRows(t *testing.T, out string, want int) [][]float64 {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	start := -1
	for i, l := range lines {
		if strings.Contains(l, "#bytes") {
			start = i + 1
			break
		}
	}
	require.GreaterOrEqual(t, start, 0, "no table in:\n%s", out)
	var rows [][]float64
	for _, l := range lines[start:] {
		if strings.HasPrefix(l, "-----") {
			break // perftest's RESULT_LINE ends the table
		}
		f := strings.Fields(l)
		require.Len(t, f, want, "table line %q", l)
		r := make([]float64, want)
		for k := range f {
			v, err := strconv.ParseFloat(f[k], 64)
			require.NoError(t, err, "column %d of %q", k, l)
			r[k] = v
		}
		rows = append(rows, r)
	}
	require.NotEmpty(t, rows, out)
	return rows
}

// latencyRows parses a latency table and checks that its numbers are sane:
// positive, ordered, and below the timeout.
func latencyRows(t *testing.T, out string) []latRow {
	t.Helper()
	return checkLatencyRows(t, out, out)
}

// perftestLatencyRows is latencyRows for a report Debian's perftest
// printed: its t_stdev is the square root of a variance that rounding can
// make slightly negative when nearly every sample is the same, printed as
// "-nan"; that column alone may hold it, and reads as 0. Where perftest
// could not measure the CPU's clock rate (toolproc.PerftestReport) its
// times are not numbers: only each row's size and iterations are read.
func perftestLatencyRows(t *testing.T, out string) []latRow {
	t.Helper()
	report, uncalibrated := toolproc.PerftestReport(out)
	if uncalibrated {
		var rows []latRow
		for _, f := range perftestRowsLoose(t, report) {
			require.Len(t, f, 9, "table line %q:\n%s", f, out)
			rows = append(rows, latRow{size: atoi(t, f[0]), iters: atoi(t, f[1])})
		}
		return rows
	}
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if f := strings.Fields(l); len(f) == 9 && (f[6] == "-nan" || f[6] == "nan") {
			f[6] = "0"
			lines[i] = strings.Join(f, " ")
		}
	}
	return checkLatencyRows(t, strings.Join(lines, "\n"), out)
}

// checkLatencyRows checks the latency table in table; messages show out.
func checkLatencyRows(t *testing.T, table, out string) []latRow {
	t.Helper()
	var rows []latRow
	for _, v := range tableRows(t, table, 9) {
		r := latRow{int(v[0]), int(v[1]), v[2], v[3], v[4], v[5], v[6], v[7], v[8]}
		require.Greater(t, r.tMin, 0.0, out)
		require.LessOrEqual(t, r.tMin, r.typical, out)
		require.LessOrEqual(t, r.typical, r.p99, out)
		require.LessOrEqual(t, r.p99, r.p999, out)
		// Percentiles come from histogram buckets, a few percent wide.
		require.LessOrEqual(t, r.p999, r.tMax*1.07, out)
		require.LessOrEqual(t, r.tMin, r.avg, out)
		require.LessOrEqual(t, r.avg, r.tMax, out)
		require.GreaterOrEqual(t, r.stdev, 0.0, out)
		require.LessOrEqual(t, r.stdev, r.tMax-r.tMin+0.01, out)
		require.Less(t, r.tMax, 10e6, "above the 10 s timeout a message cannot have completed")
		rows = append(rows, r)
	}
	return rows
}

// bandwidthRows parses a bandwidth table and checks that its numbers are
// sane: a positive message rate, peak not below average, and the rate the
// average divided by the size.
func bandwidthRows(t *testing.T, out string) []bwRow {
	t.Helper()
	var rows []bwRow
	for _, v := range tableRows(t, out, 5) {
		r := bwRow{int(v[0]), int(v[1]), v[2], v[3], v[4]}
		// The average is printed to 0.01 MiB/s: a small size on a loaded
		// machine prints 0.00, so the rate (to 1e-6 Mpps) must be above 0.
		require.GreaterOrEqual(t, r.avg, 0.0, out)
		require.Greater(t, r.mpps, 0.0, out)
		require.GreaterOrEqual(t, r.peak, r.avg*0.999, out)
		// The average is printed to 0.01 MB/s, the rate to 1e-6 Mpps.
		perMB := (1 << 20) / float64(r.size) / 1e6
		require.InDelta(t, r.avg*perMB, r.mpps, 0.006*perMB+2e-6, out)
		rows = append(rows, r)
	}
	return rows
}

func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run(args, &out, &errOut), "stderr: %s\nstdout: %s", errOut.String(), out.String())
	return out.String()
}

// TestModesOnSoftwareHCA runs every mode with both ends in this process on
// the software HCA, for a size inline and one sent by SGE; each run checks
// its data before printing.
func TestModesOnSoftwareHCA(t *testing.T) {
	for _, m := range modeNames {
		for _, size := range []int{8, 5000} {
			if strings.HasPrefix(m, "atomic") && size != atomicSize {
				continue
			}
			t.Run(m+"/"+strconv.Itoa(size), func(t *testing.T) {
				out := runOK(t, m, "-provider", "sim", "-size", strconv.Itoa(size), "-iters", "300", "-warmup", "20")
				require.Contains(t, out, "mlx5kit-perf "+m+": ")
				require.Contains(t, out, "(software, provider sim)")
				require.Contains(t, out, "the software HCA, not a NIC")
				if strings.HasSuffix(m, "_lat") {
					r := latencyRows(t, out)
					require.Len(t, r, 1)
					require.Equal(t, size, r[0].size)
					require.Equal(t, 300, r[0].iters)
				} else {
					r := bandwidthRows(t, out)
					require.Len(t, r, 1)
					require.Equal(t, size, r[0].size)
					require.Equal(t, 300, r[0].iters)
				}
				t.Logf("\n%s", out)
			})
		}
	}
}

// TestAllSizes runs -a: one line per power of two up to -max-size.
func TestAllSizes(t *testing.T) {
	out := runOK(t, "write_lat", "-provider", "sim", "-a", "-max-size", "1024", "-iters", "50", "-warmup", "5")
	rows := latencyRows(t, out)
	require.Len(t, rows, 10)
	for i, r := range rows {
		require.Equal(t, 2<<i, r.size)
	}
	out = runOK(t, "write_bw", "-provider", "sim", "-a", "-max-size", "256", "-iters", "100", "-warmup", "0", "-qd", "8")
	brows := bandwidthRows(t, out)
	require.Len(t, brows, 8)
	require.Contains(t, out, " TX depth        : 8\n")
	require.Contains(t, out, " CQ Moderation   : 8\n", "batches of 8 per doorbell")
}

// newPair builds two connected ends on a private software HCA in engine
// mode with strict checks.
func newPair(t *testing.T, cfg config) (a, b *end) {
	t.Helper()
	f := sim.New(sim.Options{Mode: sim.Engine, Strict: true})
	c, err := f.Open("sim0")
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, c.Close())
		require.NoError(t, f.Close())
		require.NoError(t, f.CheckViolations())
	})
	a, err = newEndOn("client", c, cfg)
	require.NoError(t, err)
	b, err = newEndOn("server", c, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, a.close())
		require.NoError(t, b.close())
	})
	require.NoError(t, a.connect(b.endpoint()))
	require.NoError(t, b.connect(a.endpoint()))
	return a, b
}

func testConfig(t *testing.T, args ...string) config {
	t.Helper()
	cfg, code := parseFlags(args, &bytes.Buffer{})
	require.Equal(t, -1, code, "%q", args)
	return cfg
}

// TestMeasuredLoopsAllocateNothing: one latency iteration of every
// latency mode (inline and by SGE) and a whole bandwidth stream allocate
// nothing.
func TestMeasuredLoopsAllocateNothing(t *testing.T) {
	for _, m := range []mode{writeLat, sendLat, readLat, atomicLat} {
		for _, size := range []int{32, 8192} {
			if m.atomic() {
				size = atomicSize
			}
			cfg := testConfig(t, m.String(), "-size", strconv.Itoa(size))
			a, b := newPair(t, cfg)
			step := localStep(m, a, b, size)
			seq := uint32(0)
			for ; seq < 10; seq++ {
				require.NoError(t, step(seq))
			}
			var l latency
			allocs := testing.AllocsPerRun(300, func() {
				if err := measureLatency(0, 1, &l, func(uint32) error { return step(seq) }); err != nil {
					t.Fatal(err)
				}
				seq++
			})
			require.Zero(t, allocs, "%v, %d bytes", m, size)
			require.NoError(t, firstErr(a.drain(), b.drain()))
		}
	}
	for _, m := range []mode{writeBW, readBW, atomicBW} {
		for _, size := range []int{32, 8192} {
			if m.atomic() {
				size = atomicSize
			}
			cfg := testConfig(t, m.String(), "-size", strconv.Itoa(size))
			a, _ := newPair(t, cfg)
			st := newStamps(256, cfg.batch())
			require.NoError(t, a.stream(m, size, 256, cfg.qd, cfg.batch(), st))
			allocs := testing.AllocsPerRun(20, func() {
				if err := a.stream(m, size, 256, cfg.qd, cfg.batch(), st); err != nil {
					t.Fatal(err)
				}
			})
			require.Zero(t, allocs, "%v, %d bytes", m, size)
		}
	}
}

// TestDataChecked: the data of each mode is where it should be after a
// run, and a corrupted or overlong message is reported.
func TestDataChecked(t *testing.T) {
	cfg := testConfig(t, "write_bw", "-size", "300", "-iters", "100", "-warmup", "0")
	a, b := newPair(t, cfg)
	require.Error(t, b.verify(300, false, 0), "nothing has arrived yet")
	n, err := sizeRun(&bytes.Buffer{}, cfg, 300, a, b, cycles.Frequency())
	require.NoError(t, err)
	require.Equal(t, 100, n)
	require.NoError(t, verifyPassive(cfg, b, 300))
	b.recv[200] ^= 0xff
	require.ErrorContains(t, b.verify(300, false, 0), "byte 200 of the 300-byte message")
	b.recv[200] ^= 0xff
	require.ErrorContains(t, b.verify(100, false, 0), "past the 100-byte message")

	cfg = testConfig(t, "read_lat", "-size", "64", "-iters", "10", "-warmup", "0")
	a, b = newPair(t, cfg)
	_, err = sizeRun(&bytes.Buffer{}, cfg, 64, a, b, cycles.Frequency())
	require.NoError(t, err)
	require.NoError(t, verifyActive(cfg, a, 64))
	require.Error(t, b.verify(64, false, 0), "a read leaves the server's area alone")

	cfg = testConfig(t, "send_lat", "-size", "64", "-iters", "10", "-warmup", "0")
	a, b = newPair(t, cfg)
	_, err = sizeRun(&bytes.Buffer{}, cfg, 64, a, b, cycles.Frequency())
	require.NoError(t, err)
	require.NoError(t, firstErr(verifyActive(cfg, a, 64), verifyPassive(cfg, b, 64)))
	require.Equal(t, []byte{0, 0, 0, 9}, b.recv[:4], "the last message's sequence number")
	require.Error(t, b.verify(64, true, 8), "a stale sequence number is seen")
	// A message of the wrong length fails the wait.
	require.NoError(t, a.postLatency(sendLat, 32, 10))
	require.ErrorContains(t, b.await(sendLat, 64, 10), "unexpected completion")
}

// TestServerClientOverTCP runs a server and a client in this process over
// 127.0.0.1 for every mode: they exchange endpoints over TCP, the server
// adopts the client's mode, sizes and counts, and each checks its data.
func TestServerClientOverTCP(t *testing.T) {
	for _, m := range modeNames {
		t.Run(m, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			var serverOut bytes.Buffer
			serverErr := make(chan error, 1)
			go func() {
				// The server starts from its own defaults.
				serverErr <- serve(testConfig(t, "write_lat", "-provider", "sim"), ln, &serverOut, &bytes.Buffer{})
			}()
			sizes, want := []string{"-a", "-max-size", "4096"}, 12
			if strings.HasPrefix(m, "atomic") {
				sizes, want = nil, 1
			}
			cfg := testConfig(t, append([]string{m, "-provider", "sim", "-iters", "200", "-warmup", "10", "-client", ln.Addr().String()}, sizes...)...)
			var clientOut bytes.Buffer
			require.NoError(t, dial(cfg, &clientOut))
			require.NoError(t, <-serverErr)
			out := clientOut.String()
			n := 0
			if strings.HasSuffix(m, "_lat") {
				n = len(latencyRows(t, out))
			} else {
				n = len(bandwidthRows(t, out))
			}
			require.Equal(t, want, n, out)
			require.Contains(t, out, "client of "+ln.Addr().String())
			require.Contains(t, serverOut.String(), "serving "+m)
			require.Contains(t, serverOut.String(), "done")
		})
	}
}

// TestServerWaitsForARunLongerThanItsTimeout: the server of a mode it
// only waits in (READ, WRITE, atomics: it posts nothing) waits for as long
// as its client measures, past its own -timeout, since the client says it
// is there (params.Alive, perftool.KeepAlive). It used to give up after
// -timeout ("synchronize with the peer: i/o timeout"), and the client then
// failed with RETRY_EXC_ERR.
func TestServerWaitsForARunLongerThanItsTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("measures for longer than the server's timeout")
	}
	for _, m := range []string{"read_bw", "write_bw", "atomic_lat"} {
		t.Run(m, func(t *testing.T) {
			// Runs of four times the work each, until one lasts a
			// second, more than three times the server's timeout.
			for iters := 2000; ; iters *= 4 {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				serverErr := make(chan error, 1)
				go func() {
					serverErr <- serve(testConfig(t, m, "-provider", "sim", "-timeout", "300ms"), ln, &bytes.Buffer{}, &bytes.Buffer{})
				}()
				cfg := testConfig(t, m, "-provider", "sim", "-iters", fmt.Sprint(iters), "-client", ln.Addr().String())
				start := time.Now()
				require.NoError(t, dial(cfg, &bytes.Buffer{}), "-n %d", iters)
				require.NoError(t, <-serverErr, "-n %d", iters)
				if time.Since(start) >= time.Second {
					return
				}
			}
		})
	}
}

// TestServerClientFlags goes through run with -server on port 0 and
// -client to the address the server prints.
func TestServerClientFlags(t *testing.T) {
	var serverOut, serverErr toolproc.Buffer
	server := toolproc.Go(func() error {
		return toolproc.ExitStatus(run([]string{"read_lat", "-provider", "sim", "-server", "127.0.0.1:0"}, &serverOut, &serverErr))
	}, &serverOut, &serverErr)
	addr := server.ListenAddress(t, listenWait)
	require.True(t, strings.HasPrefix(addr, "127.0.0.1:") && addr != "127.0.0.1:0", addr)
	out := server.RetryClient(t, 50, 20*time.Millisecond, toolproc.Refused, func() (string, error) {
		var o, e bytes.Buffer
		if err := toolproc.ExitStatus(run([]string{"send_lat", "-provider", "sim", "-client", addr, "-iters", "100", "-size", "8"}, &o, &e)); err != nil {
			return o.String() + e.String(), err
		}
		return o.String(), nil
	})
	require.NoError(t, server.Wait(), serverErr.String())
	require.Equal(t, 100, latencyRows(t, out)[0].iters)
	require.Contains(t, serverOut.String(), "serving send_lat")
}

// TestPeerFailureReported: an end that finds the data wrong makes its
// peer fail too.
func TestPeerFailureReported(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer a.Close()
	b, err := ln.Accept()
	require.NoError(t, err)
	defer b.Close()
	cfg := testConfig(t, "write_bw")
	errs := make(chan error, 1)
	go func() { errs <- sync(cfg, a, nil) }()
	require.NoError(t, sync(cfg, b, errTest), "the failed end hears from a fine one (and knows its own error)")
	require.ErrorContains(t, <-errs, "the peer failed")
}

var errTest = errors.New("the data is wrong")

// requireRejected runs the command with each argument list and requires
// exit status 2, a message on stderr and nothing on stdout.
func requireRejected(t *testing.T, argLists ...[]string) {
	t.Helper()
	for _, args := range argLists {
		var out, errOut bytes.Buffer
		require.Equal(t, 2, run(args, &out, &errOut), "%q", args)
		require.NotEmpty(t, errOut.String(), "%q", args)
		require.Empty(t, out.String(), "%q", args)
	}
}

func TestFlags(t *testing.T) {
	t.Setenv("MLX5KIT_KEY", "")
	requireRejected(t,
		[]string{},
		[]string{"-size", "8"},
		[]string{"write_latency"},
		[]string{"write_lat", "-size", "0"},
		[]string{"write_lat", "-size", "9000000"},
		[]string{"write_bw", "-qd", "0"},
		[]string{"write_lat", "-iters", "0"},
		[]string{"write_lat", "-max-size", "1"},
		[]string{"write_lat", "-inline", "-1"},
		[]string{"write_lat", "-provider", "verbs"},
		[]string{"write_lat", "-server", ":0", "-client", "localhost:1"},
		[]string{"write_lat", "-gid-index", "256"},
		[]string{"write_lat", "-ib-port", "0"},
		[]string{"write_lat", "host1", "host2"},
		[]string{"write_lat", "-nosuchflag"},
		[]string{"write_lat", "-server", ":18515"}, // other hosts reach it, and there is no key
	)
	cfg := testConfig(t, "read_bw")
	require.Equal(t, 65536, cfg.size, "bandwidth tests default to 64 KiB")
	require.Equal(t, 5000, cfg.iters)
	cfg = testConfig(t, "read_lat", "-a", "-max-size", "16")
	require.Equal(t, []int{2, 4, 8, 16}, cfg.sizes())
}

// perftest's one-letter flags set the same fields as the long names, and
// their values are checked the same way.
func TestPerftestFlagNames(t *testing.T) {
	long := testConfig(t, "write_bw", "-size", "64", "-iters", "300", "-qd", "32", "-inline", "0",
		"-device", "mlx5_1", "-ib-port", "2", "-gid-index", "3")
	short := testConfig(t, "write_bw", "-s", "64", "-n", "300", "-t", "32", "-I", "0",
		"-d", "mlx5_1", "-i", "2", "-x", "3")
	require.Equal(t, long, short)
	require.Equal(t, 64, short.size)
	require.Equal(t, 300, short.iters)
	require.Equal(t, 32, short.qd)
	require.Equal(t, "mlx5_1", short.device)
	require.Equal(t, 2, short.port)
	require.Equal(t, 3, short.gidIndex)
	// Registering the short names leaves the defaults alone.
	def := testConfig(t, "write_lat")
	require.Equal(t, []int{2, 1000, 64, 220, 1, -1}, []int{def.size, def.iters, def.qd, def.inline, def.port, def.gidIndex})
	require.Empty(t, def.device)
	requireRejected(t,
		[]string{"write_lat", "-s", "0"},
		[]string{"write_bw", "-t", "0"},
		[]string{"write_lat", "-n", "0"},
		[]string{"write_lat", "-I", "-1"},
		[]string{"write_lat", "-i", "0"},
		[]string{"write_lat", "-x", "256"},
	)
}

// TestHardwareModes runs every mode on the mlx5 device
// devicetest.RequireDevice names, each as a subtest. The atomic modes are
// skipped on a device that reports no atomics (atomic_cap
// IBV_ATOMIC_NONE, as some VFs do), as the scenario package's RCAtomics
// is.
func TestHardwareModes(t *testing.T) {
	name := devicetest.RequireDevice(t)
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware, Device: name})
	require.NoError(t, err, "open %s", name)
	attr, err := c.Query()
	require.NoError(t, err, "query %s", name)
	require.NoError(t, c.Close())
	for _, m := range modeNames {
		t.Run(m, func(t *testing.T) {
			size := "4096"
			if strings.HasPrefix(m, "atomic") {
				if !attr.AtomicHCA {
					t.Skipf("%s reports no 64-bit atomics executed by the HCA (atomic_cap IBV_ATOMIC_NONE)", name)
				}
				size = strconv.Itoa(atomicSize) // the atomic modes' only size
			}
			out := runOK(t, m, "-provider", "mlx5", "-device", name, "-size", size, "-iters", "5000")
			require.Contains(t, out, name)
			require.NotContains(t, out, "software HCA")
			t.Logf("\n%s", out)
		})
	}
}

// TestPerftestLatencyRowsUncalibrated: a perftest report whose times are
// inf, its clock-rate message inside the table, gives its rows' sizes and
// iterations.
func TestPerftestLatencyRowsUncalibrated(t *testing.T) {
	out := "-----\n #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n" +
		"Correlation coefficient r^2: 0.35 < 0.9\n" +
		" 64      200          inf            inf          inf                inf             -nan            inf                 inf     \n" +
		"-----\n"
	rows := perftestLatencyRows(t, out)
	require.Equal(t, []latRow{{size: 64, iters: 200}}, rows)
}
