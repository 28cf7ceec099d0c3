package main

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestPerftestMismatchNamesTheLikelyCause: perftest's exchange carries no
// test parameters, so ends given different sizes find out only in the
// loop; the error that ends the run says to compare them.
func TestPerftestMismatchNamesTheLikelyCause(t *testing.T) {
	t.Setenv(perftool.EnvKey, "")
	peer := []string{"send_lat", "-provider", "sim", "--perftest-peer", "--accept-unauthenticated", "--timeout", "2s", "-n", "20"}
	scfg := testConfig(t, append(slices.Clone(peer), "-s", "128", "--server", "127.0.0.1:0")...)
	ccfg := testConfig(t, append(slices.Clone(peer), "-s", "64", "127.0.0.1")...)
	server, client, errs := runPerftestPair(t, scfg, ccfg, 60*time.Second)
	hinted := 0
	for _, err := range errs {
		if err != nil && strings.Contains(err.Error(), "are the program (ib_write_lat or ib_send_lat), -s, -a and -n the same at both ends?") {
			hinted++
		}
	}
	require.Positive(t, hinted, "no end's error names the likely cause\nserver:\n%s\nclient:\n%s", server, client)
}

// TestHelpGoesToStdout: help that was asked for goes to stdout, as
// perftest's does, and says what --perftest-peer needs.
func TestHelpGoesToStdout(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"write_lat", "--help"}} {
		var out, errOut bytes.Buffer
		_, code := parseCommandLine("mlx5kit-perf", args, &out, &errOut)
		require.Zero(t, code, "%v", args)
		require.Contains(t, out.String(), "usage: mlx5kit-perf", "%v", args)
		require.Contains(t, out.String(), "give both ends the same -s, -a, -n", "%v", args)
		require.Empty(t, errOut.String(), "%v", args)
	}
}

// TestDefaultInlineAsPerftest: without -I the inline size is perftest's
// for the mode: 236 for send_lat over RC, 220 for write_lat, 188 for UD
// sends, 150 for DC; -I wins.
func TestDefaultInlineAsPerftest(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"send_lat", "localhost"}, 236},
		{[]string{"write_lat", "localhost"}, 220},
		{[]string{"send_lat", "-c", "UD", "localhost"}, 188},
		{[]string{"send_lat", "-I", "64", "localhost"}, 64},
	} {
		cfg, code := parseFlags(c.args, &bytes.Buffer{})
		require.Equal(t, -1, code, "%v", c.args)
		require.Equal(t, c.want, cfg.inline, "%v", c.args)
	}
}

// TestPerftestHintNotOnLocalRefusals: a post this end refused is a local
// error, not a mismatch with perftest: its error carries no hint.
func TestPerftestHintNotOnLocalRefusals(t *testing.T) {
	require.Empty(t, perftestHint(&wqebuilder.PostError{Op: "post RDMA_WRITE", Err: wqebuilder.ErrQueueFull}))
	require.Equal(t, perftestMismatchHint, perftestHint(errors.New("no completion for message 1 within 10s")))
}

// TestNegativeGIDIndexRefused: -x below 0 is refused, as perftest refuses
// it ("Gid index should be between 0 and 64"); before, -x -3 passed the
// check that says "want 0 to 255" and the end ran with the default GID
// (and, with --perftest-peer, perftest's record without GIDs).
func TestNegativeGIDIndexRefused(t *testing.T) {
	t.Setenv("MLX5KIT_KEY", "")
	for _, x := range []string{"-1", "-3"} {
		var out, errOut bytes.Buffer
		_, code := parseCommandLine("mlx5kit-perf", []string{"write_lat", "-x", x, "localhost"}, &out, &errOut)
		require.Equal(t, 2, code, "-x %s accepted", x)
		require.Contains(t, errOut.String(), "-x: "+x+": want 0 to 255")
	}
}
