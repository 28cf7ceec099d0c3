package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestStreamsOnEmulatedDevice runs send_bw with -b, -e, -m and -T, and
// write_lat with -e, through the hardware provider: rdma-core's libmlx5
// on the emulated uverbs kernel (mlx5kit-emulate), RoCE ports, both ends
// in one process. The traffic class then goes in the GRH, -m into the
// path MTU the provider's QPs connect with.
func TestStreamsOnEmulatedDevice(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mlx5kit-emulate and its preload library")
	}
	t.Setenv(perftool.EnvKey, "")
	removeFabrics(t, "perf-streams-")
	dir := t.TempDir()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	launcher := filepath.Join(dir, "mlx5kit-emulate")
	out, err := exec.Command(goTool, "build", "-o", launcher, "../mlx5kit-emulate").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	// The preload library next to the launcher, where it looks first
	// (with $MLX5KIT_EMULATE_LIB empty), built with the usual Go cache.
	out, err = exec.Command(goTool, "build", "-buildmode=c-shared", "-o", filepath.Join(dir, "libmlx5kit-emulate.so"), "../../cgo/emulate/preload").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	env := append(os.Environ(), "MLX5KIT_EMULATE_LIB=", sim.EnvFabric+"=perf-streams-"+strconv.Itoa(os.Getpid())+"-emulated")
	for _, tc := range []struct {
		args  []string
		table string
	}{
		{[]string{"send_bw", "-b", "-e", "-m", "1024", "-T", "96", "-n", "300", "-s", "4096"}, cResultFmt},
		{[]string{"write_lat", "-e", "-n", "200", "-s", "64"}, cResultFmtLat},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			c := exec.CommandContext(cx, launcher, "-link", "ethernet", "--", os.Args[0], "-test.run=^TestToolChild$", "-test.count=1")
			c.Env = append(env, envToolArgs+"="+strings.Join(append(tc.args, "--provider", "mlx5", "-d", "mlx5_0"), "\n"))
			c.WaitDelay = time.Second
			b, err := c.CombinedOutput()
			out := string(b)
			require.NoError(t, err, out)
			require.Contains(t, out, "(hardware, provider mlx5)")
			require.Contains(t, out, "an emulated device")
			require.Contains(t, out, " Test with events. Using mlx5_0_comp0\n")
			require.Contains(t, out, " Link type       : Ethernet\n")
			require.NotContains(t, out, "no GRH", "RoCE carries the traffic class")
			rows := perftestTable(t, out, tc.table)
			require.Len(t, rows, 1, out)
			if tc.table == cResultFmt {
				require.Contains(t, out, "Send Bidirectional BW Test\n")
				require.Contains(t, out, " Mtu             : 1024[B]\n")
				requireBandwidthTable(t, out, 1)
			} else {
				latencyRows(t, out)
			}
		})
	}
}
