package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// infoBlock is writeInfo's output for args on the server (server set) or
// the client.
func infoBlock(t *testing.T, server bool, args ...string) string {
	t.Helper()
	cfg, code := parseCommandLine("mlx5kit-perf", args, io.Discard, io.Discard)
	require.Equal(t, -1, code)
	var b bytes.Buffer
	require.NoError(t, writeInfo(&b, cfg, info{gidIndex: -1, server: server}))
	return b.String()
}

// TestInfoDepthsByRole: as perftest's ctx_print_test_info, the TX depth is
// printed on the client (or both ways with -b), the RX depth of a SEND
// test on the server (or both ways with -b); a --perftest-peer server
// prints the latency table as perftest's server does.
func TestInfoDepthsByRole(t *testing.T) {
	rx := fmt.Sprintf(" RX depth        : %d\n", recvDepth)
	for _, tc := range []struct {
		server   bool
		args     []string
		tx, recv bool
	}{
		{false, []string{"send_lat"}, true, false},
		{true, []string{"send_lat"}, false, true},
		{false, []string{"send_lat", "--perftest-peer", "--accept-unauthenticated", "--client", "127.0.0.1:1"}, true, false},
		{true, []string{"send_lat", "--perftest-peer", "--accept-unauthenticated", "--server", "127.0.0.1:1"}, false, true},
		{false, []string{"write_lat"}, true, false},
		{true, []string{"write_lat"}, false, false},
	} {
		out := infoBlock(t, tc.server, tc.args...)
		name := fmt.Sprintf("%v server=%v", tc.args, tc.server)
		require.Equal(t, tc.tx, strings.Contains(out, " TX depth        : "), "%s:\n%s", name, out)
		require.Equal(t, tc.recv, strings.Contains(out, rx), "%s:\n%s", name, out)
	}
	out := infoBlock(t, true, "send_lat", "--perftest-peer", "--accept-unauthenticated", "--server", "127.0.0.1:1")
	require.Contains(t, out, cResultFmtLat+"\n", "perftest's server reports its latency too")
	out = infoBlock(t, true, "write_lat")
	require.NotContains(t, out, "#bytes", "the passive end of mlx5kit-perf's own loop reports nothing")
}

// TestBandwidthJSONDecimals: --out_json's BW has perftest's two decimals
// (six with --report_gbits under 0.1 Gb/s), MsgRate six, as
// REPORT_FMT_JSON and REPORT_FMT_EXT_JSON print them.
func TestBandwidthJSONDecimals(t *testing.T) {
	file := filepath.Join(t.TempDir(), "r.json")
	bw := bandwidth{n: 3, bytes: 3 * 1000, seconds: 1.2345678e-3, peakBytesSec: 2.7182818e6}
	for _, tc := range []struct {
		args            []string
		peak, avg, rate float64
	}{
		{nil, 2.59, 2.32, 0.00243},
		{[]string{"--report_gbits"}, 0.021746, 0.01944, 0.00243},
	} {
		cfg, code := parseCommandLine("mlx5kit-perf", append([]string{"write_bw", "--out_json_file=" + file}, tc.args...), io.Discard, io.Discard)
		require.Equal(t, -1, code)
		require.NoError(t, writeBandwidthRow(io.Discard, cfg, 1000, bw))
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		var doc struct {
			Results map[string]float64 `json:"results"`
		}
		require.NoError(t, json.Unmarshal(b, &doc))
		require.Equal(t, tc.peak, doc.Results["BW_peak"], "%v", tc.args)
		require.Equal(t, tc.avg, doc.Results["BW_average"], "%v", tc.args)
		require.Equal(t, tc.rate, doc.Results["MsgRate"], "%v", tc.args)
	}
}
