package main

import (
	"bytes"
	"encoding/binary"
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

	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
)

// perftest's own format strings, copied from its sources (linux-rdma/perftest),
// to check mlx5kit-perf's output against. PRIu64 is "lu" on the 64-bit
// Linux perftest runs on.
const pRIu64 = "lu"

// From src/perftest_parameters.h (upstream, whose bandwidth unit reads
// MiB/sec; Debian's perftest 4.5 prints the same 2^20-byte unit as MB/sec,
// and its REPORT_FMT has three spaces after the tabs where this has five).
const (
	cResultLine      = "---------------------------------------------------------------------------------------\n"
	cResultFmt       = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
	cResultFmtG      = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	cResultFmtLat    = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99" + "%" + " percentile[usec]   99.9" + "%" + " percentile[usec] "
	cResultFmtLatDur = " #bytes        #iterations       t_avg[usec]    tps average"
	cResultExt       = "\n"
	cReportFmt       = " %-7lu    %-10" + pRIu64 + "       %-7.2lf            %-7.2lf\t\t     %-7.6lf"
	cReportFmtExt    = " %-7lu    %" + pRIu64 + "           %-7.6lf            %-7.6lf            %-7.6lf"
	cReportFmtLat    = " %-7lu %" + pRIu64 + "          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f"
	cReportFmtLatDur = " %-7lu       %" + pRIu64 + "            %-7.2f        %-7.2f"
	cReportExt       = "\n"
)

// From ctx_print_test_info in src/perftest_parameters.c.
const (
	cDualPort           = " Dual-port       : %s\t\tDevice         : %s\n"
	cNumberOfQueuePairs = " Number of qps   : %d\t\tTransport type : %s\n"
	cConnection         = " Connection type : %s\t\tUsing SRQ      : %s\n"
	cTXDepth            = " TX depth        : %d\n"
	cCQMod              = " CQ Moderation   : %d\n"
	cMTU                = " Mtu             : %lu[B]\n"
	cLinkType           = " Link type       : %s\n"
	cMaxInline          = " Max inline data : %d[B]\n"
	cOutReads           = " Outstand reads  : %d\n"
	cRDMACM             = " rdma_cm QPs\t : %s\n"
	cDataEx             = " Data ex. method : %s"
)

// cConversion is a C conversion with a length modifier Go does not have.
var cConversion = regexp.MustCompile(`%([-0-9.]*)l([uf])`)

// goFormat turns a C format string into Go's: %lu is %d, %lf is %f.
func goFormat(c string) string {
	return cConversion.ReplaceAllStringFunc(c, func(m string) string {
		p := cConversion.FindStringSubmatch(m)
		if p[2] == "u" {
			return "%" + p[1] + "d"
		}
		return "%" + p[1] + "f"
	})
}

func TestGoFormat(t *testing.T) {
	require.Equal(t, " %-7d    %-10d       %-7.2f", goFormat(" %-7lu    %-10lu       %-7.2lf"))
	require.Equal(t, "%-7.2f %d", goFormat("%-7.2f %d"))
}

// The report's format strings are perftest's.
func TestFormatsArePerftests(t *testing.T) {
	require.Equal(t, cResultLine, resultLine)
	require.Equal(t, cResultFmt, resultFmt)
	require.Equal(t, cResultFmtG, resultFmtG)
	require.Equal(t, cResultFmtLat, resultFmtLat)
	require.Equal(t, cResultFmtLatDur, resultFmtLatDur)
	require.Equal(t, goFormat(cReportFmt), reportFmt)
	require.Equal(t, goFormat(cReportFmtExt), reportFmtExt)
	require.Equal(t, goFormat(cReportFmtLat), reportFmtLat)
	require.Equal(t, goFormat(cReportFmtLatDur), reportFmtLatDur)
}

// TestCHex: the values are what glibc's printf prints for the same
// conversions ("%#04x", "%#06x", "%#08x", "%#016llx"): the width counts
// the 0x, and zero has none.
func TestCHex(t *testing.T) {
	require.Equal(t, "0x01", cHex(4, 1))
	require.Equal(t, "0000", cHex(4, 0))
	require.Equal(t, "000000", cHex(6, 0))
	require.Equal(t, "0x0100", cHex(6, 0x100))
	require.Equal(t, "0x00024a", cHex(8, 0x24a))
	require.Equal(t, "0x007f489d481000", cHex(16, 0x7f489d481000))
	require.Equal(t, "0x123456", cHex(4, 0x123456), "a wider value is not cut")
}

// perftestTable reads a report as a parser written for perftest does: the
// header line, then rows of numbers up to the next RESULT_LINE. It
// requires the header to be one of perftest's and returns the rows.
func perftestTable(t *testing.T, out, header string) [][]string {
	t.Helper()
	lines := strings.Split(out, "\n")
	start := -1
	for i, l := range lines {
		if l == header {
			start = i + 1
			break
		}
	}
	require.GreaterOrEqual(t, start, 1, "no %q in:\n%s", header, out)
	require.Equal(t, strings.TrimSuffix(cResultLine, "\n"), lines[start-2], "RESULT_LINE before the header")
	var rows [][]string
	for _, l := range lines[start:] {
		if l+"\n" == cResultLine {
			return rows
		}
		f := strings.Fields(l)
		for _, x := range f {
			_, err := strconv.ParseFloat(x, 64)
			require.NoError(t, err, "row %q", l)
		}
		rows = append(rows, f)
	}
	t.Fatalf("no RESULT_LINE after the table:\n%s", out)
	return nil
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err)
	return v
}

// requireRow checks that line is what perftest's format c prints for the
// numbers the line holds.
func requireRow(t *testing.T, c, line string, fields []string) {
	t.Helper()
	args := make([]any, len(fields))
	for i, f := range fields {
		if n, err := strconv.Atoi(f); err == nil && i < 2 {
			args[i] = n
		} else {
			args[i] = atof(t, f)
		}
	}
	require.Equal(t, fmt.Sprintf(goFormat(c), args...), line)
}

// rowLines returns the lines of the table (as perftestTable found them).
func rowLines(out, header string, n int) []string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if l == header {
			return lines[i+1 : i+1+n]
		}
	}
	return nil
}

// TestPerftestOutputEndToEnd runs every mode as perftest's command line
// would, with both ends in this process on the software HCA, and reads
// the output as perftest's: the info block's lines, the header, each row
// printed by perftest's format.
func TestPerftestOutputEndToEnd(t *testing.T) {
	for _, m := range modeNames {
		for _, gbits := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/gbits=%v", m, gbits), func(t *testing.T) {
				args := []string{"ib_" + m, "--provider", "sim", "-F", "-n", "200", "--warmup=10"}
				nRows := 6
				if strings.HasPrefix(m, "atomic") {
					nRows = 1
				} else {
					args = append(args, "-a", "--max-size", "64")
				}
				if gbits {
					args = append(args, "--report_gbits")
				}
				out := runOK(t, args...)
				md, err := parseMode(m)
				require.NoError(t, err)
				require.Contains(t, out, cResultLine+"                    "+map[mode]string{writeLat: "RDMA_Write Latency Test", sendLat: "Send Latency Test",
					readLat: "RDMA_Read Latency Test", writeBW: "RDMA_Write BW Test", readBW: "RDMA_Read BW Test",
					atomicLat: "Atomic FETCH_AND_ADD Latency Test", atomicBW: "Atomic FETCH_AND_ADD BW Test", sendBW: "Send BW Test"}[md]+"\n")
				require.Contains(t, out, fmt.Sprintf(cDualPort, "OFF", "sim0"))
				require.Contains(t, out, fmt.Sprintf(cNumberOfQueuePairs, 1, "IB"))
				require.Contains(t, out, fmt.Sprintf(cConnection, "RC", "OFF"))
				require.Contains(t, out, fmt.Sprintf(goFormat(cMTU), 4096))
				require.Contains(t, out, fmt.Sprintf(cLinkType, "IB"))
				require.Contains(t, out, fmt.Sprintf(cRDMACM, "OFF"))
				require.Contains(t, out, fmt.Sprintf(cDataEx, "Ethernet")+"\n")
				require.Regexp(t, `(?m)^ local address: LID 0x01 QPN 0x[0-9a-f]{4,6} PSN (0x[0-9a-f]{4,6}|000000)`, out)
				require.Regexp(t, `(?m)^ remote address: LID 0x01 QPN 0x[0-9a-f]{4,6} PSN `, out)
				if md.oneSided() {
					require.Contains(t, out, fmt.Sprintf(cOutReads, 16))
					if md.atomic() {
						require.Regexp(t, `(?m)^ local address: LID 0x01 QPN 0x[0-9a-f]{4,6} PSN (0x[0-9a-f]{4,6}|000000)\n`, out)
					} else {
						require.Regexp(t, ` OUT 0x10 RKey 0x[0-9a-f]{6} VAddr 0x[0-9a-f]{14}\n`, out)
					}
				} else {
					require.Regexp(t, `Max inline data : \d+\[B\]`, out)
				}
				if md == writeLat || md == writeBW {
					require.Regexp(t, `PSN (0x[0-9a-f]{4,6}|000000) RKey 0x[0-9a-f]{6} VAddr 0x[0-9a-f]{14}\n`, out)
				}
				if md.latency() {
					require.Contains(t, out, fmt.Sprintf(cTXDepth, 1))
					rows := perftestTable(t, out, cResultFmtLat)
					require.Len(t, rows, nRows)
					for i, r := range rows {
						require.Len(t, r, 9)
						if md.atomic() {
							require.Equal(t, "8", r[0])
						} else {
							require.Equal(t, strconv.Itoa(2<<i), r[0])
						}
						require.Equal(t, "200", r[1])
						tMin, tMax, typical, p99, p999 := atof(t, r[2]), atof(t, r[3]), atof(t, r[4]), atof(t, r[7]), atof(t, r[8])
						require.Greater(t, tMin, 0.0)
						require.LessOrEqual(t, tMin, typical)
						require.LessOrEqual(t, typical, p99)
						require.LessOrEqual(t, p99, p999)
						require.LessOrEqual(t, p999, tMax, "perftest's 99.9%% is at most its t_max (both within the samples kept plus one)")
					}
					for i, l := range rowLines(out, cResultFmtLat, nRows) {
						requireRow(t, cReportFmtLat, l, rows[i])
					}
					return
				}
				require.Contains(t, out, fmt.Sprintf(cTXDepth, 64))
				require.Contains(t, out, fmt.Sprintf(cCQMod, 16))
				header := cResultFmt
				if gbits {
					header = cResultFmtG
				}
				rows := perftestTable(t, out, header)
				require.Len(t, rows, nRows)
				for i, l := range rowLines(out, header, nRows) {
					require.Len(t, rows[i], 5)
					require.Equal(t, "200", rows[i][1])
					peak, avg := atof(t, rows[i][2]), atof(t, rows[i][3])
					// Two decimals: a small size on a loaded machine
					// prints 0.00; the message rate has six.
					require.GreaterOrEqual(t, avg, 0.0)
					require.Greater(t, atof(t, rows[i][4]), 0.0)
					require.GreaterOrEqual(t, peak, avg*0.99)
					c := cReportFmt
					if gbits && avg < 0.1 {
						c = cReportFmtExt
					}
					requireRow(t, c, l, rows[i])
				}
			})
		}
	}
}

// TestReportGbitsUnits: --report_gbits divides bytes per second by
// 125,000,000 (perftest's format_factor), MiB/s by 2^20.
func TestReportGbitsUnits(t *testing.T) {
	bw := bandwidth{n: 1000, bytes: 1000 * 65536, seconds: 0.001, peakBytesSec: 2 * 65536e6}
	var mib, gb bytes.Buffer
	require.NoError(t, writeBandwidthRow(&mib, testConfig(t, "write_bw"), 65536, bw))
	require.NoError(t, writeBandwidthRow(&gb, testConfig(t, "write_bw", "--report_gbits"), 65536, bw))
	require.Equal(t, fmt.Sprintf(goFormat(cReportFmt)+cReportExt, 65536, 1000, 2*65536e6/(1<<20), 65536e6/(1<<20), 1.0), mib.String())
	require.Equal(t, fmt.Sprintf(goFormat(cReportFmt)+cReportExt, 65536, 1000, 2*65536e6/125e6, 65536e6/125e6, 1.0), gb.String())
	// Under 0.1 Gb/s perftest switches to six decimals (REPORT_FMT_EXT).
	slow := bandwidth{n: 10, bytes: 20, seconds: 1, peakBytesSec: 40}
	gb.Reset()
	require.NoError(t, writeBandwidthRow(&gb, testConfig(t, "write_bw", "--report_gbits"), 2, slow))
	require.Equal(t, fmt.Sprintf(goFormat(cReportFmtExt)+cReportExt, 2, 10, 40/125e6, 20/125e6, 10/1e6), gb.String())
}

// TestPerftestFlagForms: every perftest flag sets its field in its short
// and long forms, with the value attached, after = or as the next
// argument.
func TestPerftestFlagForms(t *testing.T) {
	t.Setenv("MLX5KIT_KEY", "")
	type check func(t *testing.T, c config)
	for _, tc := range []struct {
		mode  string
		forms [][]string
		check check
	}{
		{"write_bw", [][]string{{"-d", "mlx5_1"}, {"-dmlx5_1"}, {"--ib-dev", "mlx5_1"}, {"--ib-dev=mlx5_1"}, {"-device", "mlx5_1"}},
			func(t *testing.T, c config) { require.Equal(t, "mlx5_1", c.device) }},
		{"write_bw", [][]string{{"-i", "2"}, {"-i2"}, {"--ib-port", "2"}, {"--ib-port=2"}},
			func(t *testing.T, c config) { require.Equal(t, 2, c.port) }},
		{"write_bw", [][]string{{"-x", "3"}, {"--gid-index=3"}, {"-gid-index", "3"}},
			func(t *testing.T, c config) { require.Equal(t, 3, c.gidIndex) }},
		{"write_bw", [][]string{{"-s", "64"}, {"-s64"}, {"--size", "64"}, {"--size=64"}, {"-size", "64"}},
			func(t *testing.T, c config) { require.Equal(t, 64, c.size) }},
		{"write_bw", [][]string{{"-a"}, {"--all"}},
			func(t *testing.T, c config) { require.True(t, c.all) }},
		{"write_bw", [][]string{{"-n", "300"}, {"--iters=300"}, {"-iters", "300"}},
			func(t *testing.T, c config) { require.Equal(t, 300, c.iters) }},
		{"write_bw", [][]string{{"-I", "0"}, {"--inline_size", "0"}, {"-inline", "0"}},
			func(t *testing.T, c config) { require.Equal(t, 0, c.inline) }},
		{"write_bw", [][]string{{"-t", "32"}, {"--tx-depth=32"}, {"-qd", "32"}},
			func(t *testing.T, c config) { require.Equal(t, 32, c.qd) }},
		{"write_bw", [][]string{{"-F"}, {"--CPU-freq"}, {"-aF"}},
			func(t *testing.T, c config) { require.Equal(t, 65536, c.size) }},
		{"write_bw", [][]string{{"-p", "5000", "host"}, {"host", "--port=5000"}, {"-p5000", "host"}},
			func(t *testing.T, c config) { require.Equal(t, "host:5000", c.client) }},
		{"write_bw", [][]string{{"-D", "2"}, {"--duration=2"}, {"--duration", "2"}},
			func(t *testing.T, c config) { require.Equal(t, 2, c.duration); require.True(t, c.timed()) }},
		{"write_bw", [][]string{{"--run_infinitely"}},
			func(t *testing.T, c config) {
				require.True(t, c.infinite)
				require.Equal(t, 5*time.Second, c.interval())
			}},
		{"write_bw", [][]string{{"-q", "1"}, {"--qp=1"}, {"-c", "RC"}, {"--connection=RC"}},
			func(t *testing.T, c config) { require.Equal(t, 16, c.batch()) }},
		{"write_bw", [][]string{{"-l", "8"}, {"--post_list", "8"}},
			func(t *testing.T, c config) { require.Equal(t, 8, c.postList); require.Equal(t, 8, c.batch()) }},
		{"write_bw", [][]string{{"-Q", "4"}, {"--cq-mod=4"}, {"-Q", "4", "-l", "4"}},
			func(t *testing.T, c config) { require.Equal(t, 4, c.batch()) }},
		{"write_bw", [][]string{{"-Q", "100"}},
			func(t *testing.T, c config) { require.Equal(t, 64, c.batch(), "never more than -t") }},
		{"read_bw", [][]string{{"-o", "4"}, {"--outs=4"}},
			func(t *testing.T, c config) {
				require.Equal(t, 4, c.outReads)
				require.Equal(t, 4, c.endConfig().MaxRdAtomic)
			}},
		{"write_bw", [][]string{{"-S", "1"}, {"--sl", "1"}},
			func(t *testing.T, c config) { require.Equal(t, uint8(1), c.endConfig().SL) }},
		{"write_bw", [][]string{{"-u", "20"}, {"--qp-timeout=20"}},
			func(t *testing.T, c config) { require.Equal(t, 20, c.endConfig().QPTimeout) }},
		{"send_lat", [][]string{{"-r", "256"}, {"--rx-depth", "256"}},
			func(t *testing.T, c config) { require.Equal(t, 256, c.endConfig().RecvDepth) }},
		{"write_bw", [][]string{{"--output=bandwidth"}, {"--output", "bandwidth"}},
			func(t *testing.T, c config) { require.Equal(t, outputBandwidth, c.output) }},
		{"write_bw", [][]string{{"--output=message_rate"}},
			func(t *testing.T, c config) { require.Equal(t, outputMessageRate, c.output) }},
		{"write_lat", [][]string{{"--output=latency"}},
			func(t *testing.T, c config) { require.Equal(t, outputLatency, c.output) }},
		{"write_bw", [][]string{{"--out_json"}},
			func(t *testing.T, c config) {
				require.True(t, c.outJSON)
				require.Equal(t, "perftest_out.json", c.jsonFile)
			}},
		{"write_bw", [][]string{{"--out_json_file=r.json"}, {"--out_json", "--out_json_file", "r.json"}},
			func(t *testing.T, c config) { require.True(t, c.outJSON); require.Equal(t, "r.json", c.jsonFile) }},
		{"write_bw", [][]string{{"--report_gbits"}},
			func(t *testing.T, c config) { require.True(t, c.reportGbits) }},
		{"write_lat", [][]string{{"server"}, {"server", "-a"}, {"-a", "server"}, {"-s", "8", "server", "-n", "10"}},
			func(t *testing.T, c config) {
				require.Equal(t, "server", c.host)
				require.Equal(t, "server:18515", c.client)
				require.Empty(t, c.server)
			}},
		{"write_lat", [][]string{{"fe80::1%eth0"}},
			func(t *testing.T, c config) { require.Equal(t, "[fe80::1%eth0]:18515", c.client) }},
	} {
		for _, form := range tc.forms {
			t.Run(tc.mode+" "+strings.Join(form, " "), func(t *testing.T) {
				tc.check(t, testConfig(t, append([]string{tc.mode}, form...)...))
			})
		}
	}
	// Without a flag, nothing changes from the defaults.
	def := testConfig(t, "write_lat")
	require.Equal(t, []int{2, 1000, 64, 220, 1, -1, 18515, 0, 128, 0}, []int{def.size, def.iters, def.qd, def.inline, def.port, def.gidIndex, def.tcpPort, def.duration, def.rxDepth, def.outReads})
	require.Empty(t, def.client+def.server+def.host+def.output)
}

// TestProgramName: a program named like perftest's (a link to
// mlx5kit-perf) runs that mode with perftest's roles: a server with no
// address given, a client of the address given.
func TestProgramName(t *testing.T) {
	t.Setenv("MLX5KIT_KEY", "0123456789abcdef0123456789abcdef")
	for prog, m := range map[string]mode{"ib_write_lat": writeLat, "ib_write_bw": writeBW, "ib_send_lat": sendLat, "ib_read_lat": readLat, "ib_read_bw": readBW,
		"ib_atomic_lat": atomicLat, "ib_atomic_bw": atomicBW, "ib_send_bw": sendBW} {
		all := "-a"
		if m.atomic() {
			all = "-F"
		}
		cfg, code := parseCommandLine(prog, []string{"-d", "mlx5_0", "-F", all, "--report_gbits", "server"}, &bytes.Buffer{}, &bytes.Buffer{})
		require.Equal(t, -1, code, prog)
		require.Equal(t, m, cfg.mode, prog)
		require.Equal(t, "server:18515", cfg.client)
		require.True(t, (cfg.all || m.atomic()) && cfg.reportGbits)
		cfg, code = parseCommandLine(prog, []string{"-p", "7000"}, &bytes.Buffer{}, &bytes.Buffer{})
		require.Equal(t, -1, code, prog)
		require.Equal(t, ":7000", cfg.server)
		require.Empty(t, cfg.client)
	}
	// The subcommand takes perftest's names too; there, no address means
	// both ends in this process.
	cfg := testConfig(t, "ib_read_bw")
	require.Equal(t, readBW, cfg.mode)
	require.Empty(t, cfg.server+cfg.client)
	for prog := range refusedPrograms {
		var out, errOut bytes.Buffer
		require.Equal(t, 2, runAs(prog, nil, &out, &errOut))
		require.Equal(t, "mlx5kit-perf: "+prog+" is not supported: "+refusedPrograms[prog]+"\n", errOut.String())
		require.Empty(t, out.String())
	}
	var out, errOut bytes.Buffer
	require.Equal(t, 2, runAs("ib_write_latency", nil, &out, &errOut))
	require.Contains(t, errOut.String(), `unknown mode "ib_write_latency"`)
}

// TestProgramNameServerClient runs ib_read_lat and ib_write_bw under
// perftest's names, in this process over TCP on the software HCA, the
// client with -p and the server's host as perftest's would be. The server
// listens on 127.0.0.1:0 (--server) and prints the port it got, which the
// client's -p takes: a port found free beforehand for the server's -p
// could be taken by another process before the server listened.
// TestProgramName checks that a server given no address listens on -p.
func TestProgramNameServerClient(t *testing.T) {
	t.Setenv("MLX5KIT_KEY", "0123456789abcdef0123456789abcdef")
	for _, prog := range []string{"ib_read_lat", "ib_write_bw"} {
		t.Run(prog, func(t *testing.T) {
			var serverOut, serverErr toolproc.Buffer
			server := toolproc.Go(func() error {
				return toolproc.ExitStatus(runAs(prog, []string{"--provider=sim", "--server", "127.0.0.1:0"}, &serverOut, &serverErr))
			}, &serverOut, &serverErr)
			_, port, err := net.SplitHostPort(server.ListenAddress(t, listenWait))
			require.NoError(t, err)
			out := server.RetryClient(t, 50, 20*time.Millisecond, toolproc.Refused, func() (string, error) {
				var o, e bytes.Buffer
				if err := toolproc.ExitStatus(runAs(prog, []string{"--provider=sim", "-p", port, "-n", "100", "-s", "64", "-F", "127.0.0.1"}, &o, &e)); err != nil {
					return o.String() + e.String(), err
				}
				return o.String(), nil
			})
			require.NoError(t, server.Wait(), serverErr.String())
			header := cResultFmtLat
			if prog == "ib_write_bw" {
				header = cResultFmt
			}
			rows := perftestTable(t, out, header)
			require.Len(t, rows, 1)
			require.Equal(t, []string{"64", "100"}, rows[0][:2])
			// The server prints perftest's block and the addresses too, the
			// client's QPN as its remote one.
			so := serverOut.String()
			require.Contains(t, so, fmt.Sprintf(cDualPort, "OFF", "sim0"))
			require.Contains(t, so, fmt.Sprintf(cLinkType, "IB"))
			require.NotContains(t, so, "TX depth")
			require.NotContains(t, so, "#bytes")
			local := regexp.MustCompile(`(?m)^ local address: LID 0x01 QPN (0x[0-9a-f]+) `).FindStringSubmatch(out)
			require.NotNil(t, local, out)
			require.Regexp(t, `(?m)^ remote address: LID 0x01 QPN `+local[1]+` `, so)
		})
	}
}

// TestRefusedFlags: each flag mlx5kit-perf does not do is refused with one
// line naming it, and nothing runs.
func TestRefusedFlags(t *testing.T) {
	t.Setenv("MLX5KIT_KEY", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-e", "-D", "1"}, "-e: -D and --run_infinitely do not work with events"},
		{[]string{"-b"}, "-b: bidirectional is only available in the bandwidth modes"},
		{[]string{"--bidirectional"}, "-b: bidirectional is only available in the bandwidth modes"},
		{[]string{"-m", "1000"}, "-m 1000: want 256, 512, 1024, 2048 or 4096"},
		{[]string{"--mtu=8192"}, "-m 8192: want 256, 512, 1024, 2048 or 4096"},
		{[]string{"-T", "256"}, "-T 256: want 0 to 255"},
		{[]string{"--tclass=-1"}, "-T -1: want 0 to 255"},
		{[]string{"-R"}, "-R (rdma_cm) is not supported"},
		{[]string{"-z"}, "-z (rdma_cm exchange) is not supported"},
		{[]string{"-g"}, "-g (multicast) is not supported"},
		{[]string{"-N"}, "-N (no peak) is not supported"},
		{[]string{"-A", "FETCH_AND_ADD"}, "-A: write_lat is not an atomic mode"},
		{[]string{"-V"}, "-V (version) is not supported"},
		{[]string{"--use-srq"}, "--use-srq (SRQ) is not supported"},
		{[]string{"-z"}, "-z (rdma_cm exchange) is not supported"},
		{[]string{"--com_rdma_cm"}, "--com_rdma_cm (rdma_cm exchange) is not supported"},
		{[]string{"-f", "2"}, "-f (margin) is not supported"},
		{[]string{"--odp"}, "--odp (on-demand paging) is not supported"},
		{[]string{"--perform_warm_up"}, "--perform_warm_up is not supported as a flag"},
		{[]string{"-c", "XRC"}, `-c: "XRC" is not supported`},
		{[]string{"-s", "big"}, `-s: "big" is not an integer`},
		{[]string{"--output=bandwidth"}, "--output=bandwidth: write_lat measures latency"},
		{[]string{"--output=fast"}, `--output: "fast": want bandwidth, message_rate or latency`},
		{[]string{"--nosuch"}, "unknown flag --nosuch"},
		{[]string{"-Y"}, "unknown flag -Y"},
		{[]string{"-n", "2"}, "-n 2: a latency test needs at least 3"},
		{[]string{"-s", "0"}, "-s 0: want 1 to 8388608"},
		{[]string{"--size=9000000"}, "-s 9000000: want 1 to 8388608"},
		{[]string{"-t", "0"}, "-t 0: want 1 to 4096"},
		{[]string{"-I", "5000"}, "-I 5000: want 0 to 4096"},
		{[]string{"--warmup", "-1"}, "--warmup -1: want 0 to"},
		{[]string{"--max-size", "1"}, "--max-size 1: want 2 to"},
		{[]string{"-D", "1", "-a"}, "-D and -a exclude each other"},
		{[]string{"-D", "0"}, "-D 0: want 1 to 1048576 seconds"},
		{[]string{"--duration=0", "--run_infinitely"}, "-D 0: want 1 to 1048576 seconds"},
		{[]string{"--run_infinitely", "-a"}, "--run_infinitely and -a exclude each other"},
		{[]string{"-Q", "4", "-l", "8"}, "-Q 4 and -l 8"},
		{[]string{"-p", "0", "host"}, "-p 0: want 1 to 65535"},
		{[]string{"-S", "16"}, "-S 16: want 0 to 15"},
		{[]string{"-u", "32"}, "-u 32: want 1 to 31 (0: the queue pair's default)"},
		{[]string{"-o", "256"}, "-o 256: want 1 to 255 (0: the default, 16)"},
		{[]string{"--timeout=soon"}, `--timeout: "soon" is not a duration`},
		{[]string{"host1", "host2"}, "unexpected arguments"},
		{[]string{"[::1]:18515"}, `the server "[::1]:18515": a host name`},
		{[]string{"localhost:18515"}, `the server "localhost:18515": a host name, the port going with -p (-p 18515 localhost), or --client localhost:18515`},
		{[]string{"host", "--client", "h:1"}, "exclude each other"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			require.Equal(t, 2, run(append([]string{"write_lat"}, tc.args...), &out, &errOut))
			require.Empty(t, out.String())
			line := errOut.String()
			require.Equal(t, 1, strings.Count(line, "\n"), "one line: %q", line)
			require.True(t, strings.HasPrefix(line, "mlx5kit-perf: "), line)
			require.Contains(t, line, tc.want)
		})
	}
	var out, errOut bytes.Buffer
	require.Equal(t, 2, run([]string{"write_bw", "--output=latency"}, &out, &errOut))
	require.Contains(t, errOut.String(), "--output=latency: write_bw measures bandwidth")
	errOut.Reset()
	require.Equal(t, 0, run([]string{"write_bw", "-h"}, &out, &errOut))
	require.Contains(t, out.String(), "usage: mlx5kit-perf") // asked for: stdout, as perftest's
	require.Empty(t, errOut.String())
}

// TestOutputAndJSON: --output prints only the number, one line per size;
// --out_json writes perftest's test_info and results.
func TestOutputAndJSON(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "r.json")
	out := runOK(t, "write_lat", "--provider", "sim", "-n", "100", "--output=latency", "--out_json_file", file, "-a", "--max-size", "8")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	for _, l := range lines {
		require.Regexp(t, `^\d+\.\d{6}$`, l)
	}
	var doc struct {
		TestInfo map[string]any `json:"test_info"`
		Results  map[string]any `json:"results"`
	}
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &doc))
	require.Equal(t, "RDMA_Write_Latency_Test", doc.TestInfo["test"])
	require.Equal(t, "sim0", doc.TestInfo["Device"])
	require.InDelta(t, atof(t, lines[2]), doc.Results["avg_lat"], 1e-6, "the file holds the last size, as perftest's")

	out = runOK(t, "read_bw", "--provider", "sim", "-n", "200", "-s", "4096", "--output=message_rate")
	require.Regexp(t, `^\d+\.\d{6}\n$`, out)
	out = runOK(t, "write_bw", "--provider", "sim", "-n", "200", "-s", "4096", "--out_json_file="+file)
	b, err = os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &doc))
	require.Equal(t, "RDMA_Write_BW_Test", doc.TestInfo["test"])
	require.Equal(t, 4096.0, doc.Results["MsgSize"])
	require.Equal(t, 200.0, doc.Results["n_iterations"])
	row := perftestTable(t, out, cResultFmt)[0]
	require.InDelta(t, atof(t, row[3]), doc.Results["BW_average"], 0.01)
	require.InDelta(t, atof(t, row[4]), doc.Results["MsgRate"], 1e-6)
}

// TestDuration: -D runs for a time: the latency line is perftest's
// duration line with the percentiles added; the bandwidth line counts
// every message of the time.
func TestDuration(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	start := time.Now()
	out := runOK(t, "write_lat", "--provider", "sim", "-D", "1", "-s", "8")
	wall := time.Since(start).Seconds()
	rows := perftestTable(t, out, cResultFmtLatDur+resultFmtLatDurExt)
	require.Len(t, rows, 1)
	r := rows[0]
	require.Len(t, r, 6)
	n, avg, tps := atof(t, r[1]), atof(t, r[2]), atof(t, r[3])
	require.Greater(t, n, 100.0)
	// The n round trips span the time from the first one's start to the
	// last one's end, n/tps seconds: at least the second, no more than the
	// whole run took (on a loaded machine the last round trip can end
	// well after the second), within 1%: the span is counted in cycle
	// counter ticks, converted with a frequency calibrated against the
	// clock, and a run that stalls within the span leaves little of the
	// wall time outside it to absorb the calibration's error. avg is half
	// a round trip of that span, to two decimals (tps too): a report that
	// mixed up one-way and round-trip times would be off by a factor of 2.
	span := n / tps
	require.GreaterOrEqual(t, span, 0.99, out)
	require.LessOrEqual(t, span, wall*1.01, out)
	require.InDelta(t, span*1e6/2/n, avg, 0.0051+avg*1e-4, out)
	require.LessOrEqual(t, atof(t, r[4]), atof(t, r[5]), "99% <= 99.9%")
	line := rowLines(out, cResultFmtLatDur+resultFmtLatDurExt, 1)[0]
	require.True(t, strings.HasPrefix(line, fmt.Sprintf(goFormat(cReportFmtLatDur), 8, int(n), avg, tps)), line)

	start = time.Now()
	out = runOK(t, "write_bw", "--provider", "sim", "-D", "1", "-s", "4096", "-n", "500")
	wall = time.Since(start).Seconds()
	rows = perftestTable(t, out, cResultFmt)
	require.Len(t, rows, 1)
	msgs := atof(t, rows[0][1])
	require.Greater(t, msgs, 500.0)
	require.Zero(t, int(msgs)%500, "whole streams of -n")
	// The average rate is over the streams' span, from the first doorbell
	// of the first stream to the last completion of the last: the count
	// over the rate is that span, at least the second (streams go on
	// until it has passed) and no more than the whole run took (how far
	// the last stream ends past the second depends on the load of the
	// machine), within 1% for the counter's calibration as above.
	span = msgs / (atof(t, rows[0][4]) * 1e6)
	require.GreaterOrEqual(t, span, 0.99, out)
	require.LessOrEqual(t, span, wall*1.01, out)
}

// TestRunInfinitely prints a line per interval, again and again.
func TestRunInfinitely(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	cfg := testConfig(t, "read_lat", "--provider", "sim", "--run_infinitely", "-D", "1", "-s", "16")
	cfg.reports = 2
	var out bytes.Buffer
	require.NoError(t, local(cfg, &out))
	rows := perftestTable(t, out.String(), cResultFmtLatDur+resultFmtLatDurExt)
	require.Len(t, rows, 2)
	for _, r := range rows {
		require.Equal(t, "16", r[0])
	}
}

// TestAtomicModes: FETCH_AND_ADD and CMP_AND_SWAP (-A) on one counter; the
// counter and the last value fetched are checked after each run, and a
// wrong one is reported.
func TestAtomicModes(t *testing.T) {
	for _, form := range [][]string{{"-A", "CMP_AND_SWAP"}, {"-ACMP_AND_SWAP"}, {"--atomic_type=CMP_AND_SWAP"}, {"--atomic_type", "CMP_AND_SWAP"}} {
		require.Equal(t, cmpAndSwap, testConfig(t, append([]string{"atomic_bw"}, form...)...).atomicType)
	}
	require.Equal(t, fetchAndAdd, testConfig(t, "atomic_lat").atomicType)
	require.Equal(t, atomicSize, testConfig(t, "atomic_lat").size)
	requireRejected(t,
		[]string{"atomic_lat", "-s", "16"},
		[]string{"atomic_bw", "-a"},
		[]string{"atomic_bw", "-A", "SWAP"},
	)
	for _, m := range []string{"atomic_lat", "atomic_bw"} {
		for _, typ := range []string{fetchAndAdd, cmpAndSwap} {
			out := runOK(t, m, "--provider", "sim", "-n", "300", "-A", typ)
			require.Contains(t, out, "                    Atomic "+typ+" ")
			require.Contains(t, out, fmt.Sprintf(cOutReads, 16))
		}
	}
	for _, cas := range []bool{false, true} {
		cfg := testConfig(t, "atomic_lat", "-n", "20", "--warmup", "5")
		a, b := newPair(t, cfg)
		a.compareSwap = cas
		_, err := sizeRun(&bytes.Buffer{}, cfg, atomicSize, a, b, cycles.Frequency())
		require.NoError(t, err)
		require.NoError(t, firstErr(verifyActive(cfg, a, atomicSize), verifyPassive(cfg, b, atomicSize)))
		// The counter and the value fetched are uint64s in host byte order.
		require.Equal(t, binary.NativeEndian.AppendUint64(nil, 25), b.recv[:8], "25 atomics, each one more")
		binary.NativeEndian.PutUint64(b.recv, 7)
		require.ErrorContains(t, verifyPassive(cfg, b, atomicSize), "the counter the atomics incremented is 7, want 25")
		binary.NativeEndian.PutUint64(a.recv, 1)
		require.ErrorContains(t, verifyActive(cfg, a, atomicSize), "the last atomic fetched is 1, want 24")
	}
	// A stream of CMP_AND_SWAPs continues the count across streams.
	cfg := testConfig(t, "atomic_bw", "-A", "CMP_AND_SWAP", "-n", "100", "--warmup", "50")
	a, b := newPair(t, cfg)
	a.compareSwap = true
	_, err := sizeRun(&bytes.Buffer{}, cfg, atomicSize, a, b, cycles.Frequency())
	require.NoError(t, err)
	require.NoError(t, verifyPassive(cfg, b, atomicSize))
	require.Equal(t, uint64(150), a.atomics)
}
