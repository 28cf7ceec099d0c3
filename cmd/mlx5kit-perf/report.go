package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
)

// perftest's report lines, as its src/perftest_parameters.h defines them
// (RESULT_LINE, RESULT_FMT, RESULT_FMT_G, RESULT_FMT_LAT, RESULT_FMT_LAT_DUR,
// REPORT_FMT, REPORT_FMT_EXT, REPORT_FMT_LAT, REPORT_FMT_LAT_DUR), C's
// conversions (%lu, %lf, PRIu64) written the Go way.
const (
	resultLine      = "---------------------------------------------------------------------------------------\n"
	resultFmt       = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
	resultFmtG      = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	resultFmtLat    = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	resultFmtLatDur = " #bytes        #iterations       t_avg[usec]    tps average"
	reportFmt       = " %-7d    %-10d       %-7.2f            %-7.2f\t\t     %-7.6f"
	reportFmtExt    = " %-7d    %d           %-7.6f            %-7.6f            %-7.6f"
	reportFmtLat    = " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f"
	reportFmtLatDur = " %-7d       %d            %-7.2f        %-7.2f"

	// A latency test run for a time (-D) gets the percentiles perftest
	// leaves out, in two more columns.
	resultFmtLatDurExt = "    99% percentile[usec]   99.9% percentile[usec]"
	reportFmtLatDurExt = "     %-7.2f                %-7.2f"
)

// Units of perftest's bandwidth (format_factor in print_report_bw): MiB,
// or 10^9 bits with --report_gbits.
const (
	mebibyte = 1 << 20
	gigabit  = 125000000
)

// verb is perftest's name of what the mode posts (testsStr).
func (m mode) verb() string {
	switch m {
	case sendLat, sendBW:
		return "Send"
	case readLat, readBW:
		return "RDMA_Read"
	case atomicLat, atomicBW:
		return "Atomic"
	}
	return "RDMA_Write"
}

// title is perftest's name of the test, words joined by sep.
func (c config) title(sep string) string {
	w := []string{c.mode.verb()}
	if c.mode.atomic() {
		w = append(w, c.atomicType)
	}
	if c.mode.latency() {
		w = append(w, "Latency")
	} else {
		if c.bidir {
			w = append(w, "Bidirectional")
		}
		if c.postList > 1 {
			w = append(w, "Post", "List")
		}
		w = append(w, "BW")
	}
	return strings.Join(append(w, "Test"), sep)
}

// address is what perftest prints of an end: its queue pair, its buffer
// and its GID.
type address struct {
	lid        uint16
	qpn, psn   uint32
	outReads   int
	rkey       uint32
	vaddr      uint64
	gid        [16]byte
	hasGID     bool
	showRemote bool // RDMA_WRITE and RDMA_READ print the buffer
	showReads  bool // RDMA_READ prints the reads outstanding
	side       string
	srqn       uint32 // DC: the SRQ behind the end's DCT
	showSRQN   bool
}

// addressOf describes ep, the endpoint of an end on side ("local" or
// "remote"), in mode m: its first region is where writes land, its second
// where reads come from.
func addressOf(side string, m mode, ep endpoint.Endpoint, outReads int, gid bool) address {
	a := address{side: side, lid: ep.LID, qpn: ep.QPN, psn: ep.PSN, gid: ep.GID, hasGID: gid, outReads: outReads}
	a.showRemote = m != sendLat && m != sendBW && !m.atomic()
	a.showReads = m == readLat || m == readBW
	r := 0
	if a.showReads {
		r = 1
	}
	if len(ep.Regions) > r {
		a.rkey, a.vaddr = ep.Regions[r].RemoteKey, ep.Regions[r].Address
	}
	return a
}

// cHex formats v as C's printf does with "%#0<width>x": the width counts
// the 0x, and a zero gets no 0x.
func cHex(width int, v uint64) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, v)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 0), v)
}

// String is the address as perftest's ctx_print_pingpong_data prints it
// (BASIC_ADDR_FMT, READ_FMT, RDMA_FMT and PERF_GID_FMT in its
// src/perftest_communication.h), newline included.
func (a address) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", a.side, cHex(4, uint64(a.lid)), cHex(6, uint64(a.qpn)), cHex(6, uint64(a.psn)))
	if a.showReads {
		fmt.Fprintf(&b, " OUT %s", cHex(4, uint64(a.outReads)))
	}
	if a.showRemote {
		fmt.Fprintf(&b, " RKey %s VAddr %s", cHex(8, uint64(a.rkey)), cHex(16, a.vaddr))
	}
	if a.showSRQN {
		fmt.Fprintf(&b, " SRQn %s", cHex(8, uint64(a.srqn)))
	}
	b.WriteByte('\n')
	if a.hasGID {
		b.WriteString(" GID: ")
		for i, x := range a.gid {
			if i > 0 {
				b.WriteByte(':')
			}
			fmt.Fprintf(&b, "%02d", x) // perftest prints the bytes in decimal
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// info is what the report says before its table.
type info struct {
	notes         []string // mlx5kit-perf's notes on the flags
	device        string   // as perftool.Open describes it
	deviceName    string
	ends          string
	counter       cycles.Info
	link          ctx.LinkLayer
	mtu           int
	gidIndex      int // -1: none printed
	inline        int
	outReads      int
	local, remote address
	// locals and remotes replace local and remote with a line per queue
	// pair (-c UD|DC, -q).
	locals, remotes []address
	// server: perftest's server, the end a client connects to; unless it
	// speaks perftest's loop (--perftest-peer) or measures (-b, send_bw),
	// no table follows.
	server bool
}

// linkName is perftest's link_layer_str.
func linkName(l ctx.LinkLayer) string {
	switch l {
	case ctx.LinkLayerInfiniBand:
		return "IB"
	case ctx.LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unknown"
}

// writeInfo prints mlx5kit-perf's own lines (the mode, the device, how the
// ends ran, the counter), then perftest's information block
// (ctx_print_test_info), the two ends' addresses and, on the measuring
// end, the table's header.
// With --output it prints nothing: perftest then prints only the numbers.
func writeInfo(w io.Writer, cfg config, in info) error {
	if cfg.output != "" {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "mlx5kit-perf %s: %s\n", cfg.mode, cfg.describeMode())
	perftool.WriteSetting(&b, in.device, in.ends, in.counter)
	for _, n := range in.notes {
		fmt.Fprintf(&b, "note:    %s\n", n)
	}
	if !cfg.mode.latency() {
		fmt.Fprintf(&b, "rates:   BW average over first doorbell to last completion, BW peak the best over up to %d batches of %d\n", peakWindow, cfg.batch())
	}
	b.WriteString(resultLine)
	fmt.Fprintf(&b, "                    %s\n", cfg.title(" "))
	if cfg.events {
		// perftest names the completion vector its channel uses; this
		// end's channel is the CQ's own, vector 0.
		fmt.Fprintf(&b, " Test with events. Using %s_comp%d\n", in.deviceName, 0)
	}
	fmt.Fprintf(&b, " Dual-port       : OFF\t\tDevice         : %s\n", in.deviceName)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : IB\n", cfg.qps())
	fmt.Fprintf(&b, " Connection type : %v\t\tUsing SRQ      : %s\n", cfg.conn, cfg.srqOnOff())
	switch {
	case in.server && !cfg.bidir: // perftest prints the TX depth on the client only, or both ways
	case cfg.mode.latency():
		fmt.Fprintf(&b, " TX depth        : 1\n")
	default:
		fmt.Fprintf(&b, " TX depth        : %d\n", cfg.qd)
	}
	if cfg.postList > 1 {
		fmt.Fprintf(&b, " Post List       : %d\n", cfg.postList)
	}
	if (cfg.mode == sendLat || cfg.mode == sendBW) && (in.server || cfg.bidir) { // perftest prints the RX depth on the server only, or both ways
		fmt.Fprintf(&b, " RX depth        : %d\n", cfg.rxDepth)
	}
	if !cfg.mode.latency() {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", cfg.batch())
		fmt.Fprintf(&b, " CQE Poll Batch  : %d\n", pollBatch)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", in.mtu)
	fmt.Fprintf(&b, " Link type       : %s\n", linkName(in.link))
	if in.gidIndex >= 0 {
		fmt.Fprintf(&b, " GID index       : %d\n", in.gidIndex)
	}
	if cfg.mode.oneSided() {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", in.outReads)
	} else {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", in.inline)
	}
	b.WriteString(" rdma_cm QPs\t : OFF\n")
	b.WriteString(" Data ex. method : Ethernet\n")
	b.WriteString(resultLine)
	writeAddresses(&b, in)
	b.WriteString(resultLine)
	switch {
	case in.server && !cfg.serverReports() && !cfg.perftestPeer: // perftest's own server reports its latency too
	case cfg.mode.latency() && cfg.timed():
		b.WriteString(resultFmtLatDur + resultFmtLatDurExt + "\n")
	case cfg.mode.latency():
		b.WriteString(resultFmtLat + "\n")
	case cfg.reportGbits:
		b.WriteString(resultFmtG + "\n")
	default:
		b.WriteString(resultFmt + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeFooter ends the table as perftest does.
func writeFooter(w io.Writer, cfg config) error {
	if cfg.output != "" {
		return nil
	}
	_, err := io.WriteString(w, resultLine)
	return err
}

// timed reports whether the test runs for a time (-D, --run_infinitely)
// instead of a count.
func (c config) timed() bool { return c.duration > 0 || c.infinite }

// writeLatencyRow prints one size's latency line by perftest's rules;
// ping-pongs report half the round trip.
func writeLatencyRow(w io.Writer, cfg config, size int, l *latency, counter cycles.Info) error {
	r, err := l.PerftestSummary(counter, cfg.mode.rttFactor())
	if err != nil {
		return err
	}
	if cfg.output == outputLatency {
		_, err = fmt.Fprintf(w, "%f\n", r.Avg)
	} else {
		_, err = fmt.Fprintf(w, reportFmtLat+"\n", size, r.Count, r.Min, r.Max, r.Typical, r.Avg, r.Stdev, r.Percentile99, r.Percentile999)
	}
	if err != nil {
		return err
	}
	results := map[string]any{"avg_lat": round6(r.Avg)}
	if cfg.output == "" {
		results = map[string]any{"MsgSize": size, "n_iterations": r.Count, "t_min": round2(r.Min), "t_max": round2(r.Max),
			"t_typical": round2(r.Typical), "t_avg": round2(r.Avg), "t_stdev": round2(r.Stdev),
			"percentile_99": round2(r.Percentile99), "percentile_99.9": round2(r.Percentile999)}
	}
	return writeJSON(cfg, results)
}

// rttFactor is what a measured time is divided by: 2 for a ping-pong's
// round trip (perftest's rtt_factor).
func (m mode) rttFactor() float64 {
	if m.pingPong() {
		return 2
	}
	return 1
}

// writeLatencyDurationRow prints the line of a latency test run for a
// time: n iterations in total ticks, as perftest's
// print_report_lat_duration, then the 99th and 99.9th percentiles.
func writeLatencyDurationRow(w io.Writer, cfg config, size, n int, total uint64, l *latency, counter cycles.Info) error {
	div := cfg.mode.rttFactor()
	sec := counter.Nanoseconds(float64(total)) / 1e9
	avg := sec * 1e6 / div / float64(n)
	tps := float64(n) / sec
	r := l.Summarize(counter, div)
	var err error
	if cfg.output == outputLatency {
		_, err = fmt.Fprintf(w, "%f\n", avg)
	} else {
		_, err = fmt.Fprintf(w, reportFmtLatDur+reportFmtLatDurExt+"\n", size, n, avg, tps, r.Percentile99, r.Percentile999)
	}
	if err != nil {
		return err
	}
	results := map[string]any{"t_avg": round6(avg)}
	if cfg.output == "" {
		results = map[string]any{"MsgSize": size, "n_iterations": n, "t_avg": round2(avg), "tps_average": round2(tps),
			"percentile_99": round2(r.Percentile99), "percentile_99.9": round2(r.Percentile999)}
	}
	return writeJSON(cfg, results)
}

// writeBandwidthRow prints one size's bandwidth line as perftest's
// print_full_bw_report: MiB/s, or Gb/s with --report_gbits (six decimals
// when under 0.1 Gb/s).
func writeBandwidthRow(w io.Writer, cfg config, size int, bw bandwidth) error {
	unit := float64(mebibyte)
	if cfg.reportGbits {
		unit = gigabit
	}
	avg := bw.bytes / bw.seconds / unit
	peak := bw.peakBytesSec / unit
	msgs := float64(bw.n)
	if bw.msgs > 0 {
		msgs = bw.msgs
	}
	rate := msgs / bw.seconds / 1e6
	var err error
	switch {
	case cfg.output == outputBandwidth:
		_, err = fmt.Fprintf(w, "%f\n", avg)
	case cfg.output == outputMessageRate:
		_, err = fmt.Fprintf(w, "%f\n", rate)
	case cfg.reportGbits && avg < 0.1:
		_, err = fmt.Fprintf(w, reportFmtExt+"\n", size, bw.n, peak, avg, rate)
	default:
		_, err = fmt.Fprintf(w, reportFmt+"\n", size, bw.n, peak, avg, rate)
	}
	if err != nil {
		return err
	}
	// perftest's JSON has two decimals of BW, six with --report_gbits
	// under 0.1 Gb/s (REPORT_FMT_JSON, REPORT_FMT_EXT_JSON), and six of
	// the rest.
	roundBW := round2
	if cfg.reportGbits && avg < 0.1 {
		roundBW = round6
	}
	var results map[string]any
	switch cfg.output {
	case outputBandwidth:
		results = map[string]any{"bw_avg": round6(avg)}
	case outputMessageRate:
		results = map[string]any{"msgRate_avg": round6(rate)}
	default:
		results = map[string]any{"MsgSize": size, "n_iterations": bw.n, "BW_peak": roundBW(peak), "BW_average": roundBW(avg), "MsgRate": round6(rate)}
	}
	return writeJSON(cfg, results)
}

// round2 rounds to the two decimals perftest prints.
func round2(v float64) float64 { return math.Round(v*100) / 100 }

// round6 rounds to the six decimals perftest prints with %lf and %.6lf.
func round6(v float64) float64 { return math.Round(v*1e6) / 1e6 }

// writeJSON writes --out_json's file: perftest's "test_info" and
// "results" objects. As perftest, each size replaces the file, so with -a
// it holds the last.
func writeJSON(cfg config, results map[string]any) error {
	if !cfg.outJSON {
		return nil
	}
	doc := map[string]any{
		"test_info": map[string]any{
			"test": cfg.title("_"), "Dual_port": "OFF", "Device": cfg.device, "Number_of_qps": cfg.qps(),
			"Transport_type": "IB", "Connection_type": cfg.conn.String(), "Using_SRQ": cfg.srqOnOff(),
		},
		"results": results,
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfg.jsonFile, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--out_json_file: %w", err)
	}
	return nil
}
