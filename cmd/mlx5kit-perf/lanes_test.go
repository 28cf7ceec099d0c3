package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
	"github.com/mlx5kit/mlx5kit/sim"
)

// addressLines returns the report's address lines of side ("local" or
// "remote"), each checked against perftest's BASIC_ADDR_FMT (with
// READ_FMT, RDMA_FMT and DC_FMT after it as the line has them).
func addressLines(t *testing.T, out, side string) []string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^ ` + side + ` address: LID (0x[0-9a-f]{2,}|0{4}) QPN (0x[0-9a-f]{4,}|0{6}) PSN (0x[0-9a-f]{4,}|0{6})` +
		`( OUT 0x[0-9a-f]{2,})?( RKey (0x[0-9a-f]{6,}|0{8}) VAddr (0x[0-9a-f]{14,}|0{16}))?( SRQn (0x[0-9a-f]{6,}|0{8}))?$`)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, " "+side+" address:") {
			require.Regexp(t, re, l)
			lines = append(lines, l)
		}
	}
	return lines
}

// TestConnectionUD runs send_lat over UD queue pairs on the software HCA:
// perftest's info block says UD, the address lines carry no buffer, the
// table parses, -a stops at the path MTU and a larger -s is refused.
func TestConnectionUD(t *testing.T) {
	out := runOK(t, "ib_send_lat", "--provider", "sim", "-F", "-c", "UD", "-n", "200", "--warmup=10", "-s", "1000")
	require.Contains(t, out, "UD SEND/RECV ping-pong")
	require.Contains(t, out, fmt.Sprintf(cConnection, "UD", "OFF"))
	require.Contains(t, out, fmt.Sprintf(cNumberOfQueuePairs, 1, "IB"))
	require.Contains(t, out, fmt.Sprintf(goFormat(cMTU), 4096))
	require.Contains(t, out, fmt.Sprintf(cMaxInline, 188), "perftest's UD default (DEF_INLINE_SEND_UD)")
	local, remote := addressLines(t, out, "local"), addressLines(t, out, "remote")
	require.Len(t, local, 1)
	require.Len(t, remote, 1)
	require.NotContains(t, local[0], "RKey")
	rows := perftestTable(t, out, cResultFmtLat)
	require.Len(t, rows, 1)
	require.Equal(t, []string{"1000", "200"}, rows[0][:2])
	requireRow(t, cReportFmtLat, rowLines(out, cResultFmtLat, 1)[0], rows[0])
	latencyRows(t, out)

	out = runOK(t, "send_lat", "--provider", "sim", "-c", "UD", "-a", "-n", "20", "--warmup=0")
	rows = perftestTable(t, out, cResultFmtLat)
	require.Len(t, rows, 12, "2 to 4096, the model's MTU")
	require.Equal(t, "4096", rows[len(rows)-1][0])

	var o, e bytes.Buffer
	// Beyond every MTU: refused before a device opens, as a usage error.
	require.Equal(t, 2, run([]string{"send_lat", "--provider", "sim", "-c", "UD", "-s", "8192"}, &o, &e))
	require.Contains(t, e.String(), "-s 8192: a UD datagram carries at most the path MTU, at most 4096 bytes")
	require.NotContains(t, o.String(), "#bytes")
}

// TestConnectionDC runs every mode over DC (a DCI to the peer's DCT,
// receives through an SRQ) on the software HCA: perftest's info block says
// DC with an SRQ, the address lines end in the SRQ number, and each table
// parses with the data checked.
func TestConnectionDC(t *testing.T) {
	for _, m := range modeNames {
		t.Run(m, func(t *testing.T) {
			args := []string{"ib_" + m, "--provider", "sim", "-F", "-c", "DC", "-n", "200", "--warmup=10"}
			if !strings.HasPrefix(m, "atomic") {
				args = append(args, "-s", "1000")
			}
			out := runOK(t, args...)
			require.Contains(t, out, fmt.Sprintf(cConnection, "DC", "ON"))
			require.Contains(t, out, "mlx5kit-perf "+m+": DC ")
			if !strings.HasPrefix(m, "read") && !strings.HasPrefix(m, "atomic") {
				require.Contains(t, out, fmt.Sprintf(cMaxInline, 150), "perftest's DC default (DEF_INLINE_DC)")
			}
			local, remote := addressLines(t, out, "local"), addressLines(t, out, "remote")
			require.Len(t, local, 1)
			require.Len(t, remote, 1)
			srqn := regexp.MustCompile(` SRQn (\S+)$`)
			require.Regexp(t, srqn, local[0])
			require.Regexp(t, srqn, remote[0])
			if strings.HasSuffix(m, "_lat") {
				rows := latencyRows(t, out)
				require.Len(t, rows, 1)
				require.Equal(t, 200, rows[0].iters)
			} else {
				rows := bandwidthRows(t, out)
				require.Len(t, rows, 1)
				require.Equal(t, 200, rows[0].iters)
			}
		})
	}
}

// TestMultipleQueuePairs runs the bandwidth modes over -q 4 (RC and DC):
// perftest's info block counts them, each has its address lines, the
// table counts -n per queue pair, and each queue pair moved a share.
func TestMultipleQueuePairs(t *testing.T) {
	for _, conn := range []string{"RC", "DC"} {
		for _, m := range []mode{writeBW, readBW, atomicBW} {
			t.Run(conn+"/"+m.String(), func(t *testing.T) {
				out := runOK(t, "ib_"+m.String(), "--provider", "sim", "-F", "-c", conn, "-q", "4", "-n", "100", "--warmup=0")
				require.Contains(t, out, fmt.Sprintf(cNumberOfQueuePairs, 4, "IB"))
				local, remote := addressLines(t, out, "local"), addressLines(t, out, "remote")
				require.Len(t, local, 4)
				require.Len(t, remote, 4)
				qpn := regexp.MustCompile(`QPN (\S+)`)
				seen := map[string]bool{}
				for _, l := range append(local, remote...) {
					seen[qpn.FindStringSubmatch(l)[1]] = true
				}
				require.Len(t, seen, 8, "eight queue pairs:\n%s", out)
				rows := bandwidthRows(t, out)
				require.Equal(t, 400, rows[0].iters, "perftest counts -n on each queue pair")
			})
		}
	}

	// The atomics of different queue pairs are not ordered: each has its
	// own counter, and CMP_AND_SWAP's compare values follow it.
	for _, conn := range []string{"RC", "DC"} {
		out := runOK(t, "atomic_bw", "--provider", "sim", "-c", conn, "-q", "4", "-A", "CMP_AND_SWAP", "-n", "500", "--warmup=30")
		require.Equal(t, 2000, bandwidthRows(t, out)[0].iters)
	}

	// perftest's JSON names them too.
	file := filepath.Join(t.TempDir(), "out.json")
	runOK(t, "write_bw", "--provider", "sim", "-c", "DC", "-q", "2", "-n", "50", "--out_json_file="+file)
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var doc struct {
		TestInfo map[string]any `json:"test_info"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	require.Equal(t, 2.0, doc.TestInfo["Number_of_qps"])
	require.Equal(t, "DC", doc.TestInfo["Connection_type"])
	require.Equal(t, "ON", doc.TestInfo["Using_SRQ"])

	// Each queue pair completes its round-robin share of a stream.
	for _, conn := range []string{"RC", "DC"} {
		cfg := testConfig(t, "write_bw", "-c", conn, "-q", "4", "-s", "64", "-t", "8", "-l", "2")
		a, b := newLanePair(t, cfg)
		n := cfg.streamIters()
		require.Equal(t, 5000*4, n)
		n = 200
		st := newStamps(n, cfg.batch())
		require.NoError(t, a.stream(writeBW, 64, n, cfg.qd, cfg.batch(), st))
		require.Equal(t, []int{50, 50, 50, 50}, a.laneCounts(), conn)
		require.NoError(t, b.verify(64, false, 0))
	}
}

// newLanePair builds two ends with lanes, connected to each other, on a
// private software HCA in engine mode with strict checks.
func newLanePair(t *testing.T, cfg config) (a, b *end) {
	t.Helper()
	f := sim.New(sim.Options{Mode: sim.Engine, Strict: true})
	c, err := f.Open("sim0")
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, c.Close())
		require.NoError(t, f.Close())
		require.NoError(t, f.CheckViolations())
	})
	for _, name := range []string{"client", "server"} {
		x, err := newEndOn(name, c, cfg)
		require.NoError(t, err)
		x.recv = x.End.Recv[cfg.grh():]
		require.NoError(t, x.addLanes(cfg, c))
		t.Cleanup(func() {
			require.NoError(t, x.closeLanes())
			require.NoError(t, x.close())
		})
		if a == nil {
			a = x
		} else {
			b = x
		}
	}
	require.NoError(t, connectEnds(a, b))
	return a, b
}

// TestLanesAllocateNothing: a latency round trip over UD and over DC and a
// stream over four queue pairs allocate nothing.
func TestLanesAllocateNothing(t *testing.T) {
	for _, args := range [][]string{{"send_lat", "-c", "UD"}, {"write_lat", "-c", "DC"}, {"send_lat", "-c", "DC"}, {"read_lat", "-c", "DC"}, {"atomic_lat", "-c", "DC"}} {
		cfg := testConfig(t, append(args, "-s", "8")...)
		a, b := newLanePair(t, cfg)
		step := localStep(cfg.mode, a, b, 8)
		seq := uint32(0)
		for ; seq < 10; seq++ {
			require.NoError(t, step(seq))
		}
		allocs := testing.AllocsPerRun(200, func() {
			if err := step(seq); err != nil {
				t.Fatal(err)
			}
			seq++
		})
		require.Zero(t, allocs, "%q", args)
		require.NoError(t, firstErr(a.drain(), b.drain()))
	}
	for _, conn := range []string{"RC", "DC"} {
		cfg := testConfig(t, "write_bw", "-c", conn, "-q", "4", "-s", "32")
		a, _ := newLanePair(t, cfg)
		st := newStamps(256, cfg.batch())
		require.NoError(t, a.stream(writeBW, 32, 256, cfg.qd, cfg.batch(), st))
		allocs := testing.AllocsPerRun(20, func() {
			if err := a.stream(writeBW, 32, 256, cfg.qd, cfg.batch(), st); err != nil {
				t.Fatal(err)
			}
		})
		require.Zero(t, allocs, conn)
	}
}

// TestLaneRefusals: what perftest refuses of -c and -q is refused with
// one line, and nothing runs.
func TestLaneRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"write_lat", "-c", "UD"}, "-c UD: UD connection only possible in SEND verb (as in perftest): write_lat posts RDMA_Write"},
		{[]string{"read_bw", "--connection=UD"}, "-c UD: UD connection only possible in SEND verb"},
		{[]string{"atomic_lat", "-c", "UD"}, "-c UD: UD connection only possible in SEND verb"},
		{[]string{"write_lat", "-q", "2"}, "-q 2: Multiple QPs only available on bw tests (as in perftest): write_lat measures latency"},
		{[]string{"send_lat", "--qp=4", "-c", "UD"}, "-q 4: Multiple QPs only available on bw tests"},
		{[]string{"send_lat", "-c", "UD", "-s", "8192"}, "-s 8192: a UD datagram carries at most the path MTU, at most 4096 bytes"},
		{[]string{"send_bw", "-c", "UD", "--size=4097"}, "-s 4097: a UD datagram carries at most the path MTU, at most 4096 bytes"},
		{[]string{"write_bw", "-q", "0"}, "-q: 0: want 1 to 256 queue pairs"},
		{[]string{"write_bw", "-q", "100000"}, "-q: 100000: want 1 to 256 queue pairs"},
		{[]string{"write_bw", "-q", "x"}, `-q: "x" is not an integer`},
		{[]string{"write_bw", "-c", "UC"}, `-c: "UC" is not supported: mlx5kit-perf measures RC, UD or DC`},
		{[]string{"write_lat", "-c", "DC", "--perftest-peer", "--accept-unauthenticated", "host"}, "--perftest-peer runs one RC queue pair"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			require.Equal(t, 2, run(tc.args, &out, &errOut))
			require.Empty(t, out.String())
			line := errOut.String()
			require.Equal(t, 1, strings.Count(line, "\n"), "one line: %q", line)
			require.True(t, strings.HasPrefix(line, "mlx5kit-perf: "), line)
			require.Contains(t, line, tc.want)
		})
	}
}

// TestLanesServerClient runs UD and DC and -q with the server in this
// process and the client under perftest's name, as two programs would.
func TestLanesServerClient(t *testing.T) {
	t.Setenv("MLX5KIT_KEY", "0123456789abcdef0123456789abcdef")
	for _, tc := range []struct {
		prog string
		args []string
		qps  int
	}{
		{"ib_send_lat", []string{"-c", "UD"}, 1},
		{"ib_write_lat", []string{"-c", "DC"}, 1},
		{"ib_write_bw", []string{"-q", "3"}, 3},
		{"ib_atomic_bw", []string{"-c", "DC", "-q", "2"}, 2},
	} {
		t.Run(tc.prog+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			// The server on a port it chooses, which it prints; the
			// client as perftest's, with -p.
			var serverOut, serverErr toolproc.Buffer
			server := toolproc.Go(func() error {
				return toolproc.ExitStatus(runAs(tc.prog, append([]string{"--provider=sim", "--server", "127.0.0.1:0"}, tc.args...), &serverOut, &serverErr))
			}, &serverOut, &serverErr)
			_, port, err := net.SplitHostPort(server.ListenAddress(t, listenWait))
			require.NoError(t, err)
			out := server.RetryClient(t, 50, 20*time.Millisecond, toolproc.Refused, func() (string, error) {
				var o, e bytes.Buffer
				if err := toolproc.ExitStatus(runAs(tc.prog, append([]string{"--provider=sim", "-p", port, "-n", "100", "-F", "127.0.0.1"}, tc.args...), &o, &e)); err != nil {
					return o.String() + e.String(), err
				}
				return o.String(), nil
			})
			require.NoError(t, server.Wait(), serverErr.String())
			so := serverOut.String()
			for _, s := range []string{out, so} {
				require.Len(t, addressLines(t, s, "local"), tc.qps)
				require.Len(t, addressLines(t, s, "remote"), tc.qps)
				require.Contains(t, s, fmt.Sprintf(cNumberOfQueuePairs, tc.qps, "IB"))
			}
			if strings.HasSuffix(tc.prog, "_lat") {
				require.Equal(t, 100, latencyRows(t, out)[0].iters)
			} else {
				require.Equal(t, 100*tc.qps, bandwidthRows(t, out)[0].iters)
			}
			// Each end's queue pairs are the other's remote ones.
			require.Equal(t, qpns(addressLines(t, out, "local")), qpns(addressLines(t, so, "remote")))
			require.Equal(t, qpns(addressLines(t, so, "local")), qpns(addressLines(t, out, "remote")))
		})
	}
}

// qpns returns the QPN of each address line.
func qpns(lines []string) []string {
	var n []string
	for _, l := range lines {
		n = append(n, regexp.MustCompile(`QPN (\S+)`).FindStringSubmatch(l)[1])
	}
	return n
}

// TestLanesTwoProcesses runs UD and DC with the server and the client in
// two processes on the software HCA, joined in one shared fabric.
func TestLanesTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two processes per case")
	}
	fabric := sim.EnvFabric + "=perf-lanes-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		files, _ := filepath.Glob("/dev/shm/mlx5kit-perf-lanes-" + strconv.Itoa(os.Getpid()) + "-*")
		for _, f := range files {
			_ = os.Remove(f)
		}
	})
	for _, args := range [][]string{{"send_lat", "-c", "UD"}, {"send_lat", "-c", "DC"}, {"read_bw", "-c", "DC", "-q", "2"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			server := toolproc.Watch(toolProcess(t, []string{fabric}, append(args, "-provider", "sim", "-server", "127.0.0.1:0")...))
			addr := server.ListenAddress(t, listenWait)
			out := server.RetryClient(t, 50, 50*time.Millisecond, toolproc.Refused, func() (string, error) {
				client, cout := toolProcess(t, []string{fabric}, append(args, "-provider", "sim", "-client", addr, "-iters", "200", "-size", "8")...)
				err := client.Wait()
				return cout.String(), err
			})
			require.NoError(t, server.Wait(), "server: %s", server.Output())
			require.Contains(t, out, fmt.Sprintf(cConnection, args[2], map[bool]string{true: "ON", false: "OFF"}[args[2] == "DC"]))
			if strings.HasSuffix(args[0], "_lat") {
				require.Equal(t, 200, latencyRows(t, out)[0].iters, out)
			} else {
				require.Equal(t, 400, bandwidthRows(t, out)[0].iters, out)
			}
		})
	}
}

// TestLaneInlineLimitPerType: -I above what a UD or DCI WQE holds (the
// device's RC limit is larger) takes the type's limit, as perftest does,
// instead of failing the lane's creation.
func TestLaneInlineLimitPerType(t *testing.T) {
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware})
	require.NoError(t, err)
	a, err := c.Query()
	require.NoError(t, err)
	require.NoError(t, c.Close())
	for _, tc := range []struct {
		args []string
		typ  ctx.QPType
	}{
		{[]string{"send_lat", "-c", "UD"}, ctx.QPTypeUD},
		{[]string{"write_bw", "-c", "DC"}, ctx.QPTypeDCI},
	} {
		lim := a.SendLimits(tc.typ).MaxInline
		require.Less(t, lim, a.MaxInline, "%v holds less inline than RC", tc.typ)
		over := fmt.Sprint(lim + 10)
		out := runOK(t, append(tc.args, "--provider", "sim", "-I", over, "-s", over, "-n", "100")...)
		require.Contains(t, out, fmt.Sprintf("Max inline data : %d[B]", lim), out)
	}
}
