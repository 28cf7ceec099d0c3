package main

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// TestSendBWOverLanes runs send_bw over UD, over DC and over several queue
// pairs with both ends in this process: the receiving end reposts on the
// queue (or SRQ) that took each SEND, UD's receives keep the GRH space in
// front, perftest's default size is lowered to the path MTU over UD, and
// #iterations counts -n per queue pair.
func TestSendBWOverLanes(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		size, iters int
	}{
		{[]string{"-c", "UD"}, 4096, 300},
		{[]string{"-c", "UD", "-s", "1000", "-q", "3"}, 1000, 900},
		{[]string{"-c", "DC", "-s", "1000"}, 1000, 300},
		{[]string{"-c", "DC", "-q", "4", "-s", "70000", "-r", "16"}, 70000, 1200},
		{[]string{"-q", "4", "-s", "100"}, 100, 1200},
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			out := runOK(t, append([]string{"ib_send_bw", "--provider", "sim", "-F", "-n", "300", "--warmup", "20"}, tc.args...)...)
			require.Contains(t, out, cResultLine+"                    Send BW Test\n")
			rows := requireBandwidthTable(t, out, 1)
			if tc.size == 4096 {
				require.Contains(t, out, "note:    -s: a UD datagram carries at most the path MTU: the size is 4096 bytes (perftest: Max msg size in UD is MTU 4096, Changing to this MTU)\n")
			} else {
				require.NotContains(t, out, "Max msg size")
			}
			require.Equal(t, tc.size, rows[0].size)
			require.Equal(t, tc.iters, rows[0].iters)
		})
	}
	// -a over UD stops at the path MTU; a larger -s is refused.
	out := runOK(t, "send_bw", "--provider", "sim", "-c", "UD", "-a", "-n", "50", "--warmup", "0")
	rows := requireBandwidthTable(t, out, 12)
	require.Equal(t, 4096, rows[11].size)
	var o, e bytes.Buffer
	// Beyond every MTU: refused before a device opens, as a usage error.
	require.Equal(t, 2, run([]string{"send_bw", "--provider", "sim", "-c", "UD", "-s", "8192"}, &o, &e))
	require.Contains(t, e.String(), "-s 8192: a UD datagram carries at most the path MTU, at most 4096 bytes")
	// Fewer receives than sends in flight lose datagrams over UD.
	o.Reset()
	e.Reset()
	require.Equal(t, 2, run([]string{"send_bw", "--provider", "sim", "-c", "UD", "-r", "16", "-t", "64"}, &o, &e))
	require.Equal(t, "mlx5kit-perf: -c UD with -r 16 below -t 64: a datagram that finds no receive posted is lost (UD has no RNR retry), so send_bw needs -r of at least -t\n", e.String())
	require.Empty(t, o.String())
	runOK(t, "send_bw", "--provider", "sim", "-c", "UD", "-r", "16", "-t", "16", "-n", "300", "--warmup", "10")
	runOK(t, "send_bw", "--provider", "sim", "-c", "UD", "-n", "20", "--warmup", "0", "-t", "64") // -r capped at the 20 messages

	// Each queue pair takes its round-robin share, and the data arrives
	// after UD's GRH space.
	for _, conn := range []string{"RC", "UD", "DC"} {
		cfg := testConfig(t, "send_bw", "-c", conn, "-q", "4", "-s", "512", "-t", "8", "-l", "2", "-n", "100", "--warmup", "0")
		a, b := newLanePair(t, cfg)
		var row bytes.Buffer
		n, err := sizeRun(&row, cfg, 512, a, b, cycles.Frequency())
		require.NoError(t, err, conn)
		require.Equal(t, 400, n, conn)
		require.Equal(t, []int{100, 100, 100, 100}, a.laneCounts(), conn)
		require.NoError(t, verifyPassive(cfg, b, 512), conn)
		require.Equal(t, cfg.grh(), len(b.End.Recv)-len(b.recv), conn)
	}
}

// TestBidirectionalOverLanes runs -b over several queue pairs and over
// DC, both ends in this process and as a server and a client: every
// queue pair of both ends streams (#iterations counts -n per queue pair),
// and each end's data is checked, the atomics' counters of every queue
// pair included.
func TestBidirectionalOverLanes(t *testing.T) {
	for _, m := range []string{"write_bw", "read_bw", "send_bw", "atomic_bw"} {
		for _, conn := range []string{"RC", "DC", "UD"} {
			if conn == "UD" && m != "send_bw" {
				continue
			}
			t.Run(m+"/"+conn, func(t *testing.T) {
				args := []string{m, "--provider", "sim", "-b", "-c", conn, "-q", "2", "-n", "300", "--warmup", "20"}
				if m != "atomic_bw" {
					args = append(args, "-s", "1024")
				}
				out := runOK(t, args...)
				require.Contains(t, out, "Bidirectional")
				require.Contains(t, out, fmt.Sprintf(cNumberOfQueuePairs, 2, "IB"))
				require.Equal(t, 600, requireBandwidthTable(t, out, 1)[0].iters)
			})
		}
	}
	out := runOK(t, "atomic_bw", "--provider", "sim", "-b", "-q", "3", "-A", "CMP_AND_SWAP", "-n", "200", "--warmup", "10")
	require.Equal(t, 600, requireBandwidthTable(t, out, 1)[0].iters)

	// Both directions use every lane.
	cfg := testConfig(t, "write_bw", "-b", "-c", "DC", "-q", "3", "-s", "64", "-n", "90", "--warmup", "0", "-l", "1")
	a, b := newLanePair(t, cfg)
	_, err := duplexLocal(&bytes.Buffer{}, cfg, 64, a, b, cycles.Frequency())
	require.NoError(t, err)
	require.Equal(t, []int{90, 90, 90}, a.laneCounts())
	require.Equal(t, []int{90, 90, 90}, b.laneCounts())

	for _, args := range [][]string{
		{"write_bw", "-b", "-q", "2"},
		{"send_bw", "-b", "-c", "DC", "-q", "2"},
		{"send_bw", "-c", "UD", "-q", "2"},
		{"atomic_bw", "-b", "-c", "DC", "-q", "2"},
	} {
		t.Run(fmt.Sprint("server and client ", args), func(t *testing.T) {
			so, co := serveAndDial(t, []string{"write_lat", "-provider", "sim"},
				append(args, "-provider", "sim", "-n", "200", "--warmup", "10", "-s", "8"))
			for _, out := range []string{so, co} {
				require.Contains(t, out, fmt.Sprintf(cNumberOfQueuePairs, 2, "IB"))
				rows := perftestTable(t, out, cResultFmt) // send_bw's server prints no peak
				require.Len(t, rows, 1, out)
				require.Equal(t, "400", rows[0][1])
			}
		})
	}
}

// TestLaneFlagsServerClient runs -e, -m and -T over DC and UD queue pairs
// with a server and a client, each end taking them from its own command
// line as perftest's do: both report the MTU and the events, and move
// every queue pair's share.
func TestLaneFlagsServerClient(t *testing.T) {
	for _, args := range [][]string{
		{"send_bw", "-c", "DC", "-q", "2", "-s", "3000"},
		{"send_bw", "-c", "UD", "-q", "2"},
		{"write_bw", "-b", "-q", "3", "-s", "3000"},
	} {
		t.Run(fmt.Sprint(args), func(t *testing.T) {
			flags := []string{"-provider", "sim", "-e", "-m", "1024", "-T", "8"}
			so, co := serveAndDial(t, append([]string{"write_lat"}, flags...),
				append(append(args, flags...), "-n", "100", "--warmup", "10"))
			for _, out := range []string{so, co} {
				require.Contains(t, out, fmt.Sprintf(goFormat(cMTU), 1024))
				require.Contains(t, out, "Test with events. Using sim0_comp0\n")
				rows := perftestTable(t, out, cResultFmt)
				require.Len(t, rows, 1, out)
				require.Equal(t, strconv.Itoa(100*atoi(t, args[indexOf(args, "-q")+1])), rows[0][1], out)
			}
			if args[2] == "UD" {
				require.Contains(t, co, "the size is 1024 bytes", "UD's datagram is at most -m")
			}
		})
	}
}

// TestEventsOverLanes: with -e the streams and round trips over UD, DC
// and several queue pairs sleep on the CQ they all share.
func TestEventsOverLanes(t *testing.T) {
	for _, args := range [][]string{
		{"send_bw", "-c", "UD", "-q", "2"},
		{"send_bw", "-c", "DC"},
		{"send_bw", "-q", "3", "-b"},
		{"write_bw", "-c", "DC", "-q", "2", "-b"},
		{"send_lat", "-c", "UD"},
	} {
		t.Run(fmt.Sprint(args), func(t *testing.T) {
			out := runOK(t, append(args, "--provider", "sim", "-e", "-n", "200", "--warmup", "10", "-s", "512")...)
			require.Contains(t, out, "Test with events. Using sim0_comp0\n")
		})
	}
	for _, args := range [][]string{
		{"send_bw", "-c", "UD", "-q", "2"},
		{"send_bw", "-c", "DC", "-q", "2"},
	} {
		// Whether a wait finds its completion already there or sleeps
		// depends on the scheduling of the model's rounds: a few
		// fresh pairs, each checked whole, until one has slept.
		var sleeps uint64
		for try := 0; try < 5 && sleeps == 0; try++ {
			cfg := testConfig(t, append(args, "-e", "-n", "100", "--warmup", "0", "-s", "64", "-l", "2")...)
			a, b := newLanePair(t, cfg)
			require.NotNil(t, a.Notifier)
			_, err := sizeRun(&bytes.Buffer{}, cfg, 64, a, b, cycles.Frequency())
			require.NoError(t, err)
			require.NoError(t, firstErr(verifyActive(cfg, a, 64), verifyPassive(cfg, b, 64)))
			require.Equal(t, []int{100, 100}, a.laneCounts(), "%v", args)
			sleeps = uint64(a.Notifier.Sleeps() + b.Notifier.Sleeps())
		}
		require.Positive(t, sleeps, "%v: a wait slept on the completion channel", args)
	}
}

// TestMTUOverLanes: -m caps what every queue pair announces and the path
// MTU it connects with, over -q, UD and DC; over UD it is the largest
// datagram, so send_bw's default size follows it and a larger -s is
// refused.
func TestMTUOverLanes(t *testing.T) {
	for _, conn := range []string{"RC", "UD", "DC"} {
		cfg := testConfig(t, "send_bw", "-c", conn, "-q", "3", "-m", "1024")
		a, b := newLanePairOn(t, cfg, sim.Options{}, ctx.MTU1024)
		for _, x := range []*end{a, b} {
			for i, ep := range x.endpoints() {
				require.Equal(t, ctx.MTU1024, ep.MTU, "%s: queue pair %d announces", conn, i)
			}
			for i, l := range x.lanes.all {
				require.Equal(t, ctx.MTU1024, l.peer.MTU, "%s: queue pair %d connects with", conn, i)
			}
		}
	}
	// The DCIs and DCTs go to RTR with it.
	rec, log := transporttest.NewRecording(t, sim.Options{})
	cfg := testConfig(t, "write_bw", "-c", "DC", "-q", "2")
	x, err := newEndOn("client", rec.Ctx[0], cfg)
	require.NoError(t, err)
	x.mtu = ctx.MTU512
	require.NoError(t, x.addLanes(cfg, rec.Ctx[0]))
	for _, l := range x.lanes.all {
		for _, qpn := range []uint32{l.dci.QPN(), l.dct.QPN()} {
			rtr, ok := log.Last(qpn, ctx.QPStateRTR)
			require.True(t, ok)
			require.Equal(t, ctx.MTU512, rtr.PathMTU)
		}
	}
	require.NoError(t, x.closeLanes())
	require.NoError(t, x.close())

	out := runOK(t, "send_bw", "--provider", "sim", "-c", "UD", "-m", "1024", "-n", "100", "--warmup", "0")
	require.Contains(t, out, fmt.Sprintf(goFormat(cMTU), 1024))
	require.Equal(t, 1024, requireBandwidthTable(t, out, 1)[0].size)
	var o, e bytes.Buffer
	require.Equal(t, 1, run([]string{"send_lat", "--provider", "sim", "-c", "UD", "-m", "1024", "-s", "2000"}, &o, &e))
	require.Contains(t, e.String(), "-s 2000: a UD datagram carries at most the path MTU, 1024 bytes")
	for _, args := range [][]string{{"write_bw", "-c", "DC", "-q", "2"}, {"read_bw", "-q", "2", "-b"}} {
		out := runOK(t, append(args, "--provider", "sim", "-m", "512", "-n", "100", "--warmup", "0", "-s", "3000")...)
		require.Contains(t, out, fmt.Sprintf(goFormat(cMTU), 512), "%v", args)
		requireBandwidthTable(t, out, 1)
	}
}

// newLanePairOn is newLanePair on a software HCA with opts, each end with
// the MTU mtu of -m (0: none) before its lanes are made.
func newLanePairOn(t *testing.T, cfg config, opts sim.Options, mtu ctx.MTU) (a, b *end) {
	t.Helper()
	opts.Mode, opts.Strict = sim.Engine, true
	f := sim.New(opts)
	c, err := f.Open("sim0")
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, c.Close())
		require.NoError(t, f.Close())
		require.NoError(t, f.CheckViolations())
	})
	var ends []*end
	for _, name := range []string{"client", "server"} {
		x, err := newEndOn(name, c, cfg)
		require.NoError(t, err)
		x.mtu = mtu
		x.recv = x.End.Recv[cfg.grh():]
		require.NoError(t, x.addLanes(cfg, c))
		t.Cleanup(func() {
			require.NoError(t, x.closeLanes())
			require.NoError(t, x.close())
		})
		ends = append(ends, x)
	}
	require.NoError(t, connectEnds(ends[0], ends[1]))
	return ends[0], ends[1]
}

// TestTrafficClassOverLanes: -T reaches the GRH of every lane's path on
// RoCE: the UD receiver finds it in the GRH in front of each datagram, and
// the address handles of UD and DC and the RTR paths of RC and DCT carry it.
func TestTrafficClassOverLanes(t *testing.T) {
	cfg := testConfig(t, "send_bw", "-c", "UD", "-q", "2", "-T", "96", "-s", "256", "-n", "50", "--warmup", "0")
	a, b := newLanePairOn(t, cfg, sim.Options{LinkLayer: ctx.LinkLayerEthernet}, 0)
	_, err := sizeRun(&bytes.Buffer{}, cfg, 256, a, b, cycles.Frequency())
	require.NoError(t, err)
	require.NoError(t, verifyPassive(cfg, b, 256))
	g, err := transport.ParseGRH(b.End.Recv[:cfg.grh()])
	require.NoError(t, err)
	require.Equal(t, uint8(96), g.TrafficClass, "the GRH of the last datagram")

	for _, conn := range []string{"RC", "UD", "DC"} {
		e, log := transporttest.NewRecording(t, sim.Options{LinkLayer: ctx.LinkLayerEthernet})
		cfg := testConfig(t, "send_bw", "-c", conn, "-q", "2", "-T", "40")
		x, err := newEndOn("client", e.Ctx[0], cfg)
		require.NoError(t, err)
		y, err := newEndOn("server", e.Ctx[0], cfg)
		require.NoError(t, err)
		for _, z := range []*end{x, y} {
			z.recv = z.End.Recv[cfg.grh():]
			require.NoError(t, z.addLanes(cfg, e.Ctx[0]))
		}
		require.NoError(t, connectEnds(x, y))
		seen := 0
		for _, ah := range log.AddressHandles() {
			require.True(t, ah.GlobalRoute)
			require.Equal(t, uint8(40), ah.TrafficClass, conn)
			seen++
		}
		for _, z := range []*end{x, y} {
			for _, l := range z.lanes.all {
				switch {
				case l.rc != nil:
					rtr, ok := log.Last(l.rc.QPN(), ctx.QPStateRTR)
					require.True(t, ok)
					require.Equal(t, uint8(40), rtr.Path.TrafficClass, conn)
					seen++
				case l.dct != nil:
					rtr, ok := log.Last(l.dct.QPN(), ctx.QPStateRTR)
					require.True(t, ok)
					require.Equal(t, uint8(40), rtr.Path.TrafficClass, "DCT")
				}
			}
		}
		require.Equal(t, 4, seen, "%s: two lanes on each end", conn)
		for _, z := range []*end{x, y} {
			require.NoError(t, z.closeLanes())
			require.NoError(t, z.close())
		}
	}
}

// TestLaneStreamBothAllocatesNothing: the duplex loop over UD, DC and
// several RC queue pairs, sending and taking SENDs with their receives
// reposted on the queue (or SRQ) that took them, allocates nothing.
func TestLaneStreamBothAllocatesNothing(t *testing.T) {
	for _, conn := range []string{"RC", "UD", "DC"} {
		for _, m := range []mode{sendBW, writeBW, atomicBW} {
			if conn == "UD" && m != sendBW {
				continue
			}
			size := 512
			if m.atomic() {
				size = atomicSize
			}
			cfg := testConfig(t, m.String(), "-c", conn, "-q", "2", "-s", fmt.Sprint(size), "-b")
			a, b := newLanePair(t, cfg)
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
			require.Zero(t, testing.AllocsPerRun(20, round), "%s %v", conn, m)
			require.Zero(t, b.early)
		}
	}
}

// TestServiceLevelOverLanes: -S reaches the DC initiators' address
// handles and, as perftest sets the DCT's ah_attr.sl, the DCTs' RTR path,
// whose SL is the priority of their responses on RoCE; the DCTs' path had
// SL 0.
func TestServiceLevelOverLanes(t *testing.T) {
	e, log := transporttest.NewRecording(t, sim.Options{LinkLayer: ctx.LinkLayerEthernet})
	cfg := testConfig(t, "send_bw", "-c", "DC", "-q", "2", "-S", "3")
	x, err := newEndOn("client", e.Ctx[0], cfg)
	require.NoError(t, err)
	y, err := newEndOn("server", e.Ctx[0], cfg)
	require.NoError(t, err)
	for _, z := range []*end{x, y} {
		z.recv = z.End.Recv[cfg.grh():]
		require.NoError(t, z.addLanes(cfg, e.Ctx[0]))
	}
	require.NoError(t, connectEnds(x, y))
	for _, ah := range log.AddressHandles() {
		require.Equal(t, uint8(3), ah.SL)
	}
	dcts := 0
	for _, z := range []*end{x, y} {
		for _, l := range z.lanes.all {
			if l.dct != nil {
				rtr, ok := log.Last(l.dct.QPN(), ctx.QPStateRTR)
				require.True(t, ok)
				require.Equal(t, uint8(3), rtr.Path.SL, "DCT")
				dcts++
			}
		}
	}
	require.Equal(t, 4, dcts, "two lanes on each end")
	for _, z := range []*end{x, y} {
		require.NoError(t, z.closeLanes())
		require.NoError(t, z.close())
	}
}
