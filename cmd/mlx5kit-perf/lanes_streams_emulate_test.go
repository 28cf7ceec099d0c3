package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLaneStreamsEmulatedDevice runs send_bw over UD, and -b over two
// queue pairs, through the hardware provider (libibverbs and libmlx5 on
// the emulated uverbs kernel), mlx5kit-perf's both ends in one process,
// with -b, -e, -m and -T over DC too; then, where Debian's perftest is
// installed, its ib_send_bw -c UD and ib_write_bw -b -q 2 (a server and a
// client each) on the emulated device, and requires mlx5kit-perf's title,
// Number of qps, Connection type, Mtu and Link type lines, its address
// lines' count and its #bytes and #iterations to be perftest's for the
// same command line.
func TestLaneStreamsEmulatedDevice(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mlx5kit-emulate and its preload library and runs processes under it")
	}
	launcher, env := emulateLauncher(t)
	cx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fabric := func() string { return fmt.Sprintf("perf-lanestreams-emu-%d-%d", os.Getpid(), time.Now().UnixNano()) }
	removeFabrics(t, "perf-lanestreams-emu-")
	kit := func(args ...string) string {
		t.Helper()
		c := exec.CommandContext(cx, launcher, "-fabric", fabric(), "--", os.Args[0], "-test.run=^TestToolChild$", "-test.count=1")
		c.Env = append(env, envToolArgs+"="+strings.Join(append(args, "--provider", "mlx5", "-d", "mlx5_0", "-F"), "\n"))
		c.WaitDelay = time.Second
		out, err := c.CombinedOutput()
		require.NoError(t, err, "%q:\n%s", args, out)
		o := string(out)
		require.Contains(t, o, "(hardware, provider mlx5)")
		return o
	}
	cases := []struct {
		args        []string
		size, iters int
	}{
		{[]string{"ib_send_bw", "-c", "UD", "-n", "200"}, 4096, 200},
		{[]string{"ib_write_bw", "-b", "-q", "2", "-n", "100"}, 65536, 200},
	}
	ours := map[string]string{}
	for _, c := range cases {
		out := kit(c.args...)
		ours[c.args[0]] = out
		rows := perftestTable(t, out, cResultFmt)
		require.Len(t, rows, 1, out)
		require.Equal(t, []string{strconv.Itoa(c.size), strconv.Itoa(c.iters)}, rows[0][:2], out)
	}
	out := kit("send_bw", "-c", "DC", "-q", "2", "-b", "-e", "-m", "1024", "-T", "96", "-n", "100", "-s", "4096")
	require.Contains(t, out, " Mtu             : 1024[B]\n")
	require.Contains(t, out, " Test with events. Using mlx5_0_comp0\n")
	require.Equal(t, 200, requireBandwidthTable(t, out, 1)[0].iters)

	for _, p := range []string{"ib_send_bw", "ib_write_bw"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (Debian package perftest; scripts/deps.sh installs it)", p)
		}
	}
	block := regexp.MustCompile(`(?m)^ (Number of qps|Connection type|Mtu|Link type) .*$|^ +\S.* BW Test$`)
	for _, c := range cases {
		theirs := emulatedPerftest(cx, t, launcher, env, fabric, c.args...)
		want := block.FindAllString(theirs, -1)
		require.Len(t, want, 5, theirs)
		got := block.FindAllString(ours[c.args[0]], -1)
		for _, l := range want {
			require.Contains(t, got, l, "perftest:\n%s\nmlx5kit-perf:\n%s", theirs, ours[c.args[0]])
		}
		for _, side := range []string{"local", "remote"} {
			require.Len(t, addressLines(t, ours[c.args[0]], side), len(addressLines(t, theirs, side)), theirs)
		}
		row := perftestRowsLoose(t, theirs)[0]
		require.Equal(t, []string{strconv.Itoa(c.size), strconv.Itoa(c.iters)}, row[:2], "perftest:\n%s", theirs)
		if c.size == 4096 {
			require.Contains(t, theirs, "Max msg size in UD is MTU 4096", "perftest lowers the size too")
		}
	}
}
