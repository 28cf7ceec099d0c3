package main

import (
	"bytes"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestStreamFlagForms: -b, -e, -m and -T in perftest's short and long
// forms set their fields.
func TestStreamFlagForms(t *testing.T) {
	for _, form := range [][]string{{"-b"}, {"--bidirectional"}, {"-b", "-a"}} {
		require.True(t, testConfig(t, append([]string{"write_bw"}, form...)...).bidir, "%q", form)
	}
	for _, form := range [][]string{{"-e"}, {"--events"}, {"-eF"}} {
		c := testConfig(t, append([]string{"send_lat"}, form...)...)
		require.True(t, c.events, "%q", form)
		require.True(t, c.endConfig().Events)
	}
	for _, form := range [][]string{{"-m", "1024"}, {"-m1024"}, {"--mtu=1024"}, {"--mtu", "1024"}} {
		require.Equal(t, 1024, testConfig(t, append([]string{"read_lat"}, form...)...).mtu, "%q", form)
	}
	for _, form := range [][]string{{"-T", "96"}, {"-T96"}, {"--tclass=96"}, {"--tos", "96"}} {
		c := testConfig(t, append([]string{"write_lat"}, form...)...)
		require.Equal(t, 96, c.tclass, "%q", form)
		require.Equal(t, uint8(96), c.endConfig().TrafficClass)
	}
	for _, m := range []string{"write_bw", "read_bw", "send_bw", "atomic_bw"} {
		require.True(t, testConfig(t, m, "-b").bidir, m)
	}
	t.Setenv("MLX5KIT_KEY", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"read_lat", "-b"}, "-b: bidirectional is only available in the bandwidth modes (write_bw, read_bw, send_bw, atomic_bw), not read_lat"},
		{[]string{"write_bw", "-e", "-D", "2"}, "-e: -D and --run_infinitely do not work with events"},
		{[]string{"write_lat", "-e", "--perftest-peer", "--accept-unauthenticated", "host"}, "-e with --perftest-peer: perftest's write_lat polls the buffer's last byte"},
		{[]string{"write_lat", "-m", "4000"}, "-m 4000: want 256, 512, 1024, 2048 or 4096"},
		{[]string{"write_lat", "-T", "300"}, "-T 300: want 0 to 255"},
	} {
		var out, errOut bytes.Buffer
		require.Equal(t, 2, run(tc.args, &out, &errOut), "%q", tc.args)
		require.Empty(t, out.String())
		require.Equal(t, 1, strings.Count(errOut.String(), "\n"), "one line: %q", errOut.String())
		require.Contains(t, errOut.String(), "mlx5kit-perf: "+tc.want)
	}
}

// requireBandwidthTable reads out's table as perftest's (header, rows in
// perftest's format) and returns its rows.
func requireBandwidthTable(t *testing.T, out string, n int) []bwRow {
	t.Helper()
	rows := perftestTable(t, out, cResultFmt)
	require.Len(t, rows, n, out)
	var r []bwRow
	for i, l := range rowLines(out, cResultFmt, n) {
		requireRow(t, cReportFmt, l, rows[i])
		// The model's rates vary a lot on a loaded machine: a tiny
		// message's MiB/s may print as 0.00, its Mpps not.
		b := bwRow{int(atof(t, rows[i][0])), int(atof(t, rows[i][1])), atof(t, rows[i][2]), atof(t, rows[i][3]), atof(t, rows[i][4])}
		require.Greater(t, b.mpps, 0.0, l)
		require.GreaterOrEqual(t, b.peak, b.avg*0.999, l)
		perMB := (1 << 20) / float64(b.size) / 1e6
		require.InDelta(t, b.avg*perMB, b.mpps, 0.006*perMB+2e-6, l)
		r = append(r, b)
	}
	return r
}

// TestSendBW runs send_bw as ib_send_bw would be run, both ends in this
// process: SENDs of every size into receives reposted as they complete
// (5000 messages through 128 receives), the data checked, perftest's title
// and table, and address lines without RKey and VAddr.
func TestSendBW(t *testing.T) {
	out := runOK(t, "ib_send_bw", "--provider", "sim", "-F", "-a", "--max-size", "8192", "--warmup", "50")
	require.Contains(t, out, cResultLine+"                    Send BW Test\n")
	require.Regexp(t, `(?m)^ local address: LID 0x01 QPN 0x[0-9a-f]+ PSN (0x[0-9a-f]+|000000)$`, out)
	rows := requireBandwidthTable(t, out, 13)
	for i, r := range rows {
		require.Equal(t, 2<<i, r.size)
		require.Equal(t, 5000, r.iters, "perftest's default for bandwidth")
	}
	out = runOK(t, "send_bw", "--provider", "sim", "-s", "70000", "-n", "300", "-r", "16", "-t", "8")
	require.Equal(t, 70000, requireBandwidthTable(t, out, 1)[0].size)
}

// TestBidirectional runs -b for each bandwidth mode with both ends in this
// process: perftest's Bidirectional title, a TX depth line, the rates of
// both directions summed, each end's data checked.
func TestBidirectional(t *testing.T) {
	for _, tc := range []struct {
		mode, title string
		args        []string
		rows        int
	}{
		{"write_bw", "RDMA_Write Bidirectional BW Test", []string{"-s", "4096"}, 1},
		{"read_bw", "RDMA_Read Bidirectional BW Test", []string{"-a", "--max-size", "512"}, 9},
		{"send_bw", "Send Bidirectional BW Test", []string{"-a", "--max-size", "512"}, 9},
		{"atomic_bw", "Atomic FETCH_AND_ADD Bidirectional BW Test", nil, 1},
		{"atomic_bw", "Atomic CMP_AND_SWAP Bidirectional BW Test", []string{"-A", "CMP_AND_SWAP"}, 1},
		{"write_bw", "RDMA_Write Bidirectional Post List BW Test", []string{"-l", "4", "-s", "64"}, 1},
	} {
		t.Run(tc.title, func(t *testing.T) {
			out := runOK(t, append([]string{tc.mode, "--provider", "sim", "-b", "-n", "400", "--warmup", "20"}, tc.args...)...)
			require.Contains(t, out, cResultLine+"                    "+tc.title+"\n")
			require.Contains(t, out, "a goroutine posting and polling on each")
			rows := requireBandwidthTable(t, out, tc.rows)
			for _, r := range rows {
				require.Equal(t, 400, r.iters, "#iterations is one end's")
			}
		})
	}
	// The rates of the two directions add up, as perftest's report adds
	// the peer's to its own; #iterations stays this end's.
	a := bandwidth{n: 100, bytes: 100 * 4096, seconds: 0.001, peakBytesSec: 5e8}
	b := bandwidth{n: 100, bytes: 100 * 4096, seconds: 0.004, peakBytesSec: 2e8}
	var one, two, sum bytes.Buffer
	cfg := testConfig(t, "write_bw", "-s", "4096")
	require.NoError(t, writeBandwidthRow(&one, cfg, 4096, a))
	require.NoError(t, writeBandwidthRow(&two, cfg, 4096, b))
	require.NoError(t, writeBandwidthRow(&sum, cfg, 4096, sumRates(a, b)))
	field := func(s string, i int) float64 { return atof(t, strings.Fields(s)[i]) }
	require.Equal(t, "100", strings.Fields(sum.String())[1])
	for _, i := range []int{2, 3} {
		require.InDelta(t, field(one.String(), i)+field(two.String(), i), field(sum.String(), i), 0.011, "column %d", i)
	}
	require.InDelta(t, field(one.String(), 4)+field(two.String(), 4), field(sum.String(), 4), 1e-6)
}

// serveAndDial runs serve with the server's arguments and dial with the
// client's on 127.0.0.1, and returns both outputs.
func serveAndDial(t *testing.T, serverArgs, clientArgs []string) (server, client string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var serverOut bytes.Buffer
	serverErr := make(chan error, 1)
	go func() { serverErr <- serve(testConfig(t, serverArgs...), ln, &serverOut, &bytes.Buffer{}) }()
	var clientOut bytes.Buffer
	require.NoError(t, dial(testConfig(t, append(clientArgs, "-client", ln.Addr().String())...), &clientOut))
	require.NoError(t, <-serverErr, serverOut.String())
	return serverOut.String(), clientOut.String()
}

// TestStreamsServerClient runs send_bw and -b with a server and a client
// over TCP: the server takes -b from the client; both print a table, as
// perftest's do (send_bw's server its receive rate, without a peak), and
// each checks its data.
func TestStreamsServerClient(t *testing.T) {
	so, co := serveAndDial(t, []string{"write_lat", "-provider", "sim"},
		[]string{"send_bw", "-provider", "sim", "-a", "--max-size", "1024", "-n", "300", "--warmup", "10"})
	require.Len(t, requireBandwidthTable(t, co, 10), 10)
	require.Contains(t, so, " RX depth        : 310\n", "perftest's default for send_bw, 512, capped at the messages of a size")
	require.NotContains(t, so, "TX depth")
	rows := perftestTable(t, so, cResultFmt)
	require.Len(t, rows, 10, so)
	for i, r := range rows {
		require.Equal(t, fmt.Sprint(2<<i), r[0])
		require.Equal(t, "300", r[1])
		require.Equal(t, "0.00", r[2], "no peak on the receiving end")
		require.Greater(t, atof(t, r[4]), 0.0, "the receive rate")
		require.InDelta(t, atof(t, r[3])*(1<<20)/float64(int(2)<<i)/1e6, atof(t, r[4]), 0.006*(1<<20)/float64(int(2)<<i)/1e6+2e-6)
	}
	require.Contains(t, so, "done")

	for _, m := range []string{"write_bw", "send_bw", "read_bw", "atomic_bw"} {
		t.Run(m+" -b", func(t *testing.T) {
			so, co := serveAndDial(t, []string{"write_lat", "-provider", "sim"},
				[]string{m, "-provider", "sim", "-b", "-n", "300", "--warmup", "10", "-s", "8"})
			for _, out := range []string{so, co} {
				require.Regexp(t, `Bidirectional BW Test\n`, out)
				require.Contains(t, out, " TX depth        : 64\n", "perftest prints it on both ends of -b")
				r := requireBandwidthTable(t, out, 1)
				require.Equal(t, 300, r[0].iters)
			}
		})
	}
}

// TestEvents: with -e every mode sleeps on completion events instead of
// busy-polling (the CQ's Notifier slept) and prints perftest's events line.
func TestEvents(t *testing.T) {
	for _, m := range modeNames {
		t.Run(m, func(t *testing.T) {
			args, rows := []string{m, "--provider", "sim", "-e", "-n", "200", "--warmup", "10"}, 1
			if !strings.HasPrefix(m, "atomic") {
				args, rows = append(args, "-a", "--max-size", "64"), 6
			}
			out := runOK(t, args...)
			require.Contains(t, out, cResultLine+"                    ")
			require.Contains(t, out, "Test\n Test with events. Using sim0_comp0\n Dual-port ")
			if strings.HasSuffix(m, "_lat") {
				require.Len(t, latencyRows(t, out), rows)
			} else {
				requireBandwidthTable(t, out, rows)
			}
		})
	}
	out := runOK(t, "write_bw", "--provider", "sim", "-e", "-b", "-n", "200")
	require.Contains(t, out, "RDMA_Write Bidirectional BW Test\n Test with events.")

	for _, m := range []mode{sendLat, writeBW, sendBW} {
		// Whether a wait finds its completion already there or sleeps
		// depends on the scheduling of the model's rounds (a slow
		// machine, or an emulated one, can answer every wait at once):
		// a few fresh pairs, each checked whole, until one has slept.
		var sleeps, events uint64
		for try := 0; try < 5 && sleeps == 0; try++ {
			cfg := testConfig(t, m.String(), "-e", "-n", "100", "--warmup", "0", "-s", "64")
			a, b := newPair(t, cfg)
			require.NotNil(t, a.Notifier)
			_, err := sizeRun(&bytes.Buffer{}, cfg, 64, a, b, cycles.Frequency())
			require.NoError(t, err)
			require.NoError(t, firstErr(verifyActive(cfg, a, 64), verifyPassive(cfg, b, 64)))
			sleeps = a.Notifier.Sleeps() + b.Notifier.Sleeps()
			events += a.Notifier.Events() + b.Notifier.Events()
		}
		require.Positive(t, sleeps, "%v: a wait slept on the completion channel", m)
		require.Positive(t, events, "%v", m)
	}
	cfg := testConfig(t, "send_lat")
	a, _ := newPair(t, cfg)
	require.Nil(t, a.Notifier, "without -e the ends busy-poll")
}

// TestMTU: -m sets the path MTU both ends announce and connect with and
// perftest's Mtu line; above the port's active MTU it is refused.
func TestMTU(t *testing.T) {
	out := runOK(t, "ib_write_bw", "--provider", "sim", "-m", "1024", "-n", "200", "-s", "5000")
	require.Contains(t, out, fmt.Sprintf(goFormat(cMTU), 1024))
	requireBandwidthTable(t, out, 1)
	out = runOK(t, "send_lat", "--provider", "sim", "--mtu=256", "-n", "100", "-s", "1000")
	require.Contains(t, out, fmt.Sprintf(goFormat(cMTU), 256))
	latencyRows(t, out)

	cfg := testConfig(t, "write_bw", "-m", "512")
	a, b := newPair(t, config{}) // connected at the port's MTU
	require.Equal(t, ctx.MTU4096, a.endpoint().MTU)
	require.Equal(t, ctx.MTU4096, b.peer.MTU)
	m, err := mtuFor(cfg.mtu, ctx.MTU4096, 1, "sim0")
	require.NoError(t, err)
	require.Equal(t, ctx.MTU512, m)
	a.mtu = m
	require.Equal(t, ctx.MTU512, a.endpoint().MTU, "the MTU announced")

	_, err = mtuFor(4096, ctx.MTU1024, 1, "mlx5_0")
	require.EqualError(t, err, "-m 4096: above the active MTU of port 1 of mlx5_0 (1024 bytes)")
	_, err = mtuFor(2048, ctx.MTU1024, 2, "mlx5_1")
	require.ErrorContains(t, err, "-m 2048: above the active MTU of port 2 of mlx5_1")
	m, err = mtuFor(0, ctx.MTU1024, 1, "mlx5_0")
	require.NoError(t, err)
	require.Zero(t, m, "no -m: the port's")
}

// TestTrafficClass: -T goes into the queue pair's configuration and, on
// RoCE, data flows with it; on InfiniBand by LID the report says it has no
// GRH to go in.
func TestTrafficClass(t *testing.T) {
	out := runOK(t, "write_lat", "--provider", "sim", "-T", "96", "-n", "100")
	require.Contains(t, out, "note:    -T 96: the path to the peer goes by LID, with no GRH: the traffic class is not sent\n")
	latencyRows(t, out)
	require.Nil(t, pathNotes(testConfig(t, "write_lat", "-T", "96"), ctx.LinkLayerEthernet, endpointWithLID(0)))
	require.Nil(t, pathNotes(testConfig(t, "write_lat"), ctx.LinkLayerInfiniBand, endpointWithLID(1)), "no -T, no note")

	// RoCE: the path has a GRH with the traffic class.
	cfg := testConfig(t, "send_bw", "-T", "96", "-n", "200", "--warmup", "0", "-s", "256")
	f := sim.New(sim.Options{Mode: sim.Engine, Strict: true, LinkLayer: ctx.LinkLayerEthernet})
	c, err := f.Open("sim0")
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()
	defer func() { require.NoError(t, c.Close()) }()
	a, err := newEndOn("client", c, cfg)
	require.NoError(t, err)
	defer a.close()
	b, err := newEndOn("server", c, cfg)
	require.NoError(t, err)
	defer b.close()
	require.NoError(t, firstErr(a.connect(b.endpoint()), b.connect(a.endpoint())))
	var row bytes.Buffer
	_, err = sizeRun(&row, cfg, 256, a, b, cycles.Frequency())
	require.NoError(t, err)
	require.NoError(t, verifyPassive(cfg, b, 256))
	require.Regexp(t, regexp.MustCompile(`^ 256 +200 `), row.String())
}

// endpointWithLID is a peer's endpoint with only its LID set.
func endpointWithLID(lid uint16) endpoint.Endpoint { return endpoint.Endpoint{LID: lid} }

// TestStreamBothAllocatesNothing: the duplex loop, sending and taking
// SENDs with their receives reposted, allocates nothing per stream.
func TestStreamBothAllocatesNothing(t *testing.T) {
	for _, m := range []mode{sendBW, writeBW, readBW, atomicBW} {
		size := 512
		if m.atomic() {
			size = atomicSize
		}
		cfg := testConfig(t, m.String(), "-s", fmt.Sprint(size), "-b")
		a, b := newPair(t, cfg)
		st := newStamps(64, cfg.batch())
		var rx recvTimes
		recvN := 0
		if m == sendBW {
			recvN = 64
		}
		round := func() {
			if err := a.streamBoth(m, size, 64, 0, cfg.qd, cfg.batch(), st, &rx, nil); err != nil {
				t.Fatal(err)
			}
			if err := b.streamBoth(m, size, 0, recvN, cfg.qd, cfg.batch(), st, &rx, nil); err != nil {
				t.Fatal(err)
			}
		}
		round()
		require.Zero(t, testing.AllocsPerRun(20, round), "%v", m)
		require.Zero(t, b.early)
	}
}

// TestStreamsDuration runs send_bw and -b for a time (-D 1), in one
// process and between a server and a client: rounds of -n each way until
// the second has passed, the count whole rounds, the same on both ends,
// the average rate over about the second (both directions with -b), and
// the data and the counters of the atomics checked after it.
func TestStreamsDuration(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	const n = 500
	// row checks the one line of out and returns its count; dirs is 2
	// with -b, whose rate adds both directions; deciding is the end that
	// decides when the rounds stop (the client, or the one process);
	// wall is how long the run took, in seconds.
	row := func(t *testing.T, out string, dirs float64, deciding, peak bool, wall float64) float64 {
		t.Helper()
		rows := perftestTable(t, out, cResultFmt)
		require.Len(t, rows, 1, out)
		msgs, rate := atof(t, rows[0][1]), atof(t, rows[0][4])
		require.GreaterOrEqual(t, msgs, float64(n), out)
		require.Zero(t, int(msgs)%n, "whole rounds of -n: %s", out)
		require.Greater(t, rate, 0.0, out)
		// The rounds fill about the second: at least all of it on the
		// deciding end; the other end's span begins at its first
		// completion, later by as long as the scheduler keeps it from
		// running (seen: 17 ms), and with -b the peer's rounds start a
		// little later. No more than the whole run took: how far the
		// last round goes past the second depends on the load of the
		// machine.
		secs := msgs * dirs / (rate * 1e6)
		low := 0.99
		if dirs > 1 || !deciding {
			low = 0.7
		}
		require.Greater(t, secs, low, out)
		require.LessOrEqual(t, secs, wall*1.01, out)
		if peak {
			require.GreaterOrEqual(t, atof(t, rows[0][2]), atof(t, rows[0][3])*0.999, out)
		} else {
			require.Equal(t, "0.00", rows[0][2], "no peak on the receiving end")
		}
		return msgs
	}
	for _, tc := range []struct {
		args []string
		dirs float64
	}{
		{[]string{"send_bw"}, 1},
		{[]string{"write_bw", "-b"}, 2},
	} {
		args := append(append([]string{}, tc.args...), "--provider", "sim", "-D", "1", "-s", "4096", "-n", fmt.Sprint(n), "--warmup", "10")
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			start := time.Now()
			out := runOK(t, args...)
			row(t, out, tc.dirs, true, true, time.Since(start).Seconds())
		})
		t.Run(strings.Join(tc.args, " ")+" server/client", func(t *testing.T) {
			start := time.Now()
			so, co := serveAndDial(t, []string{"write_lat", "-provider", "sim"}, args)
			wall := time.Since(start).Seconds()
			msgs := row(t, co, tc.dirs, true, true, wall)
			require.Equal(t, msgs, row(t, so, tc.dirs, false, tc.dirs > 1, wall), "both ends ran the same rounds")
			require.Contains(t, so, "done")
		})
	}
	// --run_infinitely: a line a second, each of whole rounds.
	for _, args := range [][]string{{"send_bw"}, {"write_bw", "-b"}} {
		cfg := testConfig(t, append(args, "--provider", "sim", "--run_infinitely", "-D", "1", "-s", "64", "-n", fmt.Sprint(n))...)
		cfg.reports = 2
		var out bytes.Buffer
		require.NoError(t, local(cfg, &out), "%q", args)
		rows := perftestTable(t, out.String(), cResultFmt)
		require.Len(t, rows, 2, out.String())
		for _, r := range rows {
			require.Equal(t, "64", r[0])
			require.Zero(t, int(atof(t, r[1]))%n, "whole rounds: %s", out.String())
		}
	}
	// The server checks the counters the client's atomics incremented:
	// one per message of every round.
	start := time.Now()
	so, co := serveAndDial(t, []string{"write_lat", "-provider", "sim"},
		[]string{"atomic_bw", "-b", "-provider", "sim", "-D", "1", "-n", fmt.Sprint(n), "--warmup", "10"})
	wall := time.Since(start).Seconds()
	require.Equal(t, row(t, co, 2, true, true, wall), row(t, so, 2, false, true, wall))
}

// TestRemoteRounds: the client marks each round and the end on the TCP
// connection; the server follows the marks, and a byte that is no mark (a
// failed client's sync status) ends its run with ErrPeerFailed.
func TestRemoteRounds(t *testing.T) {
	cfg := testConfig(t, "send_bw", "-D", "1")
	counter := cycles.Frequency()
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	client, server := remoteRounds(cfg, c, true, counter), remoteRounds(cfg, s, false, counter)
	// The client's first round always follows; once the interval has
	// passed since the first round began, none does.
	var fresh, old timedRates
	old.rounds, old.first = 1, cycles.Now()-2*uint64(counter.Ticks(cfg.interval()))
	for _, tc := range []struct {
		t    *timedRates
		more bool
	}{{&fresh, true}, {&old, false}} {
		got, errs := make(chan bool, 1), make(chan error, 1)
		go func() {
			ok, err := server(nil)
			got <- ok
			errs <- err
		}()
		ok, err := client(tc.t)
		require.NoError(t, err)
		require.Equal(t, tc.more, ok)
		require.NoError(t, <-errs)
		require.Equal(t, tc.more, <-got, "the server follows the client")
	}
	go func() { _ = perftool.Sync(c, cfg.timeout, fmt.Errorf("failed")) }()
	_, err := server(nil)
	require.ErrorIs(t, err, perftool.ErrPeerFailed)
}
