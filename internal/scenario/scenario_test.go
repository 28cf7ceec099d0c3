package scenario_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/devicetest"
	"github.com/mlx5kit/mlx5kit/internal/scenario"
	"github.com/mlx5kit/mlx5kit/sim"
)

// runAll runs every scenario on c as a subtest.
func runAll(t *testing.T, c *ctx.Context, o scenario.Options) {
	t.Helper()
	for _, s := range scenario.All() {
		t.Run(s.Name, func(t *testing.T) {
			err := s.Run(c, o)
			if errors.Is(err, scenario.ErrSkip) {
				t.Skip(err)
			}
			require.NoError(t, err)
		})
	}
}

// openSim opens a private strict software HCA; the test fails if the model
// recorded a format violation.
func openSim(t *testing.T, opts sim.Options) (*sim.Fabric, *ctx.Context) {
	t.Helper()
	opts.Strict = true
	f := sim.New(opts)
	c, err := f.Open("sim0")
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, c.Close())
		require.NoError(t, f.Close())
		require.NoError(t, f.CheckViolations())
	})
	return f, c
}

// TestScenariosSimEngine runs every scenario on the software HCA driven by
// its engine goroutine, as a device runs on its own.
func TestScenariosSimEngine(t *testing.T) {
	_, c := openSim(t, sim.Options{Mode: sim.Engine})
	runAll(t, c, scenario.Options{})
}

// TestScenariosSimManual runs every scenario on the software HCA stepped by
// the scenarios' waits: deterministic.
func TestScenariosSimManual(t *testing.T) {
	f, c := openSim(t, sim.Options{})
	runAll(t, c, scenario.Options{Progress: f.RunUntilIdle})
}

// TestScenariosSimRoCE runs every scenario on a software HCA with an
// Ethernet port, where the queue pairs address each other by GID.
func TestScenariosSimRoCE(t *testing.T) {
	f, c := openSim(t, sim.Options{LinkLayer: ctx.LinkLayerEthernet})
	pa, err := c.QueryPort(1)
	require.NoError(t, err)
	require.Equal(t, ctx.LinkLayerEthernet, pa.LinkLayer)
	runAll(t, c, scenario.Options{Progress: f.RunUntilIdle})
}

// TestScenariosDefaultSoftwareHCA runs every scenario through ctx.Open with
// the software HCA asked for by name: the path a program takes.
func TestScenariosDefaultSoftwareHCA(t *testing.T) {
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	o, err := scenario.FromEnv()
	require.NoError(t, err)
	runAll(t, c, o)
}

// TestHardwareScenarios runs every scenario on the first mlx5 device, two
// queue pairs in loopback on one port; the GID index on RoCE comes from
// MLX5KIT_GID_INDEX or is picked.
func TestHardwareScenarios(t *testing.T) {
	c := devicetest.OpenContext(t)
	o, err := scenario.FromEnv()
	require.NoError(t, err)
	runAll(t, c, o)
}

// TestFromEnv: MLX5KIT_GID_INDEX names the GID; unset or empty leaves it
// to the choice; anything but 0..255 is refused.
func TestFromEnv(t *testing.T) {
	t.Setenv(scenario.EnvGIDIndex, "")
	o, err := scenario.FromEnv()
	require.NoError(t, err)
	require.True(t, o.GID.Auto())
	for _, n := range []uint8{0, 3} {
		t.Setenv(scenario.EnvGIDIndex, strconv.Itoa(int(n)))
		o, err = scenario.FromEnv()
		require.NoError(t, err)
		require.Equal(t, ctx.GIDIndex(n), o.GID)
	}
	for _, bad := range []string{"-1", "256", "x"} {
		t.Setenv(scenario.EnvGIDIndex, bad)
		_, err = scenario.FromEnv()
		require.ErrorContains(t, err, scenario.EnvGIDIndex, bad)
	}
}

// TestScenariosFirstActivePort: on a device whose port 1 is down and port 2
// up (a dual-port card cabled on its second port), the scenarios run on
// port 2, the first ACTIVE one; a port named in Options must be ACTIVE.
func TestScenariosFirstActivePort(t *testing.T) {
	f, c := openSim(t, sim.Options{Ports: 2})
	require.NoError(t, f.SetPortState("sim0", 1, false))
	pa, err := c.QueryPort(1)
	require.NoError(t, err)
	require.NotEqual(t, ctx.PortStateActive, pa.State)
	runAll(t, c, scenario.Options{Progress: f.RunUntilIdle})

	err = scenario.RCWrite(c, scenario.Options{Port: 1, Progress: f.RunUntilIdle})
	require.ErrorContains(t, err, "port 1 of sim0")
	require.ErrorContains(t, err, "not ACTIVE")

	require.NoError(t, f.SetPortState("sim0", 2, false))
	err = scenario.RCWrite(c, scenario.Options{Progress: f.RunUntilIdle})
	require.ErrorContains(t, err, "no port of sim0 is ACTIVE")
}
