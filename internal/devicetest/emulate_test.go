package devicetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo"
	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestHardwareFirstDeviceHasAnActivePort runs on the emulated device only
// (MLX5KIT_EMULATE=1, as TestHardwareSuitesOnEmulatedDevice runs it; on a
// NIC it skips, as no test may take its ports down): with every port of
// the first device down, as on a host whose cable is in the second port
// of a dual-port card (mlx5_0 DOWN, mlx5_1 ACTIVE), FirstDevice names the
// second device; with every port of every device down, the first.
func TestHardwareFirstDeviceHasAnActivePort(t *testing.T) {
	f := emulate.Fabric()
	if f == nil {
		t.Skip("takes ports down: runs on the emulated device only (MLX5KIT_EMULATE=1)")
	}
	t.Setenv(EnvDevice, "") // the choice by port state, not by name
	names := mlx5Names(t)
	name, why := FirstDevice()
	require.Empty(t, why)
	require.Equal(t, names[0], name, "every port up: the first device")

	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware, Device: names[0]})
	require.NoError(t, err)
	a, err := c.Query()
	require.NoError(t, err)
	require.NoError(t, c.Close())
	// The model's HCAs in the order the devices are listed: "" is the
	// first, and the second is sim1 whatever the emulation names it.
	for i, model := range []string{"", "sim1"} {
		for p := uint8(1); p <= a.PhysPortCount; p++ {
			require.NoError(t, f.SetPortState(model, p, false))
			t.Cleanup(func() { require.NoError(t, f.SetPortState(model, p, true)) })
		}
		name, why = FirstDevice()
		require.Empty(t, why)
		if i == 0 {
			require.Equal(t, names[1], name, "the first device's ports down: the second device")
		} else {
			require.Equal(t, names[0], name, "every port down: the first device, whose tests say so")
		}
	}
}

// TestHardwareDeviceNamedByEnvironment runs on the emulated device only:
// MLX5KIT_DEVICE picks the device the hardware tests run on, and a name
// that is no mlx5 device of the host gives no device and says why.
func TestHardwareDeviceNamedByEnvironment(t *testing.T) {
	if emulate.Fabric() == nil {
		t.Skip("runs on the emulated device only (MLX5KIT_EMULATE=1)")
	}
	names := mlx5Names(t)
	t.Setenv(EnvDevice, names[1])
	name, why := FirstDevice()
	require.Empty(t, why)
	require.Equal(t, names[1], name, "the device the environment names, not the first")
	t.Setenv(EnvDevice, "mlx5_nosuch")
	name, why = FirstDevice()
	require.Empty(t, name)
	require.Contains(t, why, "MLX5KIT_DEVICE=mlx5_nosuch names no mlx5 device")
}

// mlx5Names lists the mlx5 devices in the order cgo.ListDevices gives
// them, at least the emulated fabric's two.
func mlx5Names(t *testing.T) []string {
	t.Helper()
	list, err := cgo.ListDevices()
	require.NoError(t, err)
	var names []string
	for _, d := range list {
		if d.MLX5 {
			names = append(names, d.Name)
		}
	}
	require.GreaterOrEqual(t, len(names), 2, "the emulated fabric has two devices")
	return names
}
