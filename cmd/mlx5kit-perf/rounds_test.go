package main

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/stretchr/testify/require"
)

// serveAndDialConfig runs a server with serverArgs and the client cfg
// against it (cfg.client is set here) and returns their outputs.
func serveAndDialConfig(t *testing.T, serverArgs []string, cfg config) (server, client string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var serverOut bytes.Buffer
	serverErr := make(chan error, 1)
	go func() { serverErr <- serve(testConfig(t, serverArgs...), ln, &serverOut, &bytes.Buffer{}) }()
	var clientOut bytes.Buffer
	cfg.client = ln.Addr().String()
	require.NoError(t, dial(cfg, &clientOut), clientOut.String())
	require.NoError(t, <-serverErr, serverOut.String())
	return serverOut.String(), clientOut.String()
}

// TestPingPongDurationServerClient: -D with write_lat and send_lat between
// a server and a client: the client runs rounds of -n ping-pongs, marking
// each on the TCP connection, until the time is up; the server answers
// whole rounds and checks the last message of the last one. Each round's
// first ping-pong, which meets the server coming from the round mark, is
// not measured: -n 100 measures 99 a round.
func TestPingPongDurationServerClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	const n = 100
	for _, m := range []string{"write_lat", "send_lat"} {
		t.Run(m, func(t *testing.T) {
			cfg := testConfig(t, m, "-provider", "sim", "-D", "1", "-s", "8", "-n", fmt.Sprint(n), "--warmup", "10")
			start := time.Now()
			so, co := serveAndDialConfig(t, []string{"write_lat", "-provider", "sim"}, cfg)
			wall := time.Since(start).Seconds()
			rows := perftestTable(t, co, cResultFmtLatDur+resultFmtLatDurExt)
			require.Len(t, rows, 1, co)
			r := rows[0]
			require.Equal(t, "8", r[0])
			iters, avg, tps := atof(t, r[1]), atof(t, r[2]), atof(t, r[3])
			require.GreaterOrEqual(t, iters, float64(n-1), co)
			require.Zero(t, int(iters)%(n-1), "whole rounds of -n, less their first: %s", co)
			// The measured rounds span iters/tps seconds: no more than
			// the whole run took, within 1% for the calibration of the
			// cycle counter that times the span (TestDuration), and
			// less than the second the rounds ran for, by the round
			// marks and first ping-pongs left out. avg is half a round
			// trip of that span, to two decimals (tps too).
			span := iters / tps
			require.Greater(t, span, 0.0, co)
			require.LessOrEqual(t, span, wall*1.01, co)
			t.Logf("measured %.3f s of %.3f s", span, wall)
			require.InDelta(t, span*1e6/2/iters, avg, 0.0051+avg*1e-4, co)
			require.Contains(t, so, "done")
		})
	}
}

// TestRunInfinitelyServerClient: --run_infinitely between a server and a
// client prints a line per -D interval until the client stops (here after
// two lines), for a ping-pong, a one-sided, a streaming and a duplex mode.
func TestRunInfinitelyServerClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	for _, tc := range []struct {
		args   []string
		format string
	}{
		{[]string{"write_lat", "-s", "16"}, cResultFmtLatDur + resultFmtLatDurExt},
		{[]string{"send_lat", "-s", "16"}, cResultFmtLatDur + resultFmtLatDurExt},
		{[]string{"read_lat", "-s", "16"}, cResultFmtLatDur + resultFmtLatDurExt},
		{[]string{"write_bw", "-s", "16", "-n", "500"}, cResultFmt},
		{[]string{"send_bw", "-s", "16", "-n", "500"}, cResultFmt},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cfg := testConfig(t, append(tc.args, "-provider", "sim", "--run_infinitely", "-D", "1")...)
			cfg.reports = 2
			so, co := serveAndDialConfig(t, []string{"write_lat", "-provider", "sim"}, cfg)
			rows := perftestTable(t, co, tc.format)
			require.Len(t, rows, 2, co)
			for _, r := range rows {
				require.Equal(t, "16", r[0])
				require.Greater(t, atof(t, r[1]), 0.0, co)
			}
			require.Contains(t, so, "done")
		})
	}
}

// TestAnswerRoundsPeerFailed: a byte that is no round mark (a failed
// client's sync status) ends the server's answering with ErrPeerFailed.
func TestAnswerRoundsPeerFailed(t *testing.T) {
	cfg := testConfig(t, "write_lat", "-D", "1", "--warmup", "0")
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	go func() { _, _ = c.Write([]byte{'x'}) }()
	rounds, err := answerRounds(cfg, s, nil, 8)
	require.ErrorIs(t, err, perftool.ErrPeerFailed)
	require.Zero(t, rounds)
}
