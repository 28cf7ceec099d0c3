// Package devicetest is the one gate of every test that needs a real mlx5
// device. RequireDevice skips a test with a single line when the machine
// has no mlx5 device, and fails it instead when MLX5KIT_REQUIRE_DEVICE=1 is
// set, so that on a machine that should have a NIC (make hwtest) a skip can
// never hide a regression.
package devicetest

import (
	"fmt"
	"os"
	"testing"

	"github.com/mlx5kit/mlx5kit/cgo"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// EnvRequireDevice is the environment variable that turns the skip into a
// failure when set to 1.
const EnvRequireDevice = "MLX5KIT_REQUIRE_DEVICE"

// EnvDevice names the mlx5 device the hardware tests run on, as it names
// the benchmarks' (package bench); unset, FirstDevice chooses.
const EnvDevice = "MLX5KIT_DEVICE"

// FirstDevice returns the name of the mlx5 device the hardware tests run
// on, or "" and why there is none. MLX5KIT_DEVICE names it; a name that is
// no mlx5 device of the host is "" and says so. Unset, it is the first
// mlx5 device that has an ACTIVE port: a host with several (mlx5_0,
// mlx5_1: one per port of a dual-port card) often has a cable in only one
// of them, and the tests run on the one that is up. When none has an
// ACTIVE port it returns the first mlx5 device, whose tests then fail
// saying that no port is ACTIVE.
func FirstDevice() (name, why string) {
	if why := cgo.NoDeviceReason(); why != "" {
		return "", why
	}
	list, err := cgo.ListDevices()
	if err != nil {
		return "", err.Error()
	}
	if want := os.Getenv(EnvDevice); want != "" {
		var mlx5 []string
		for _, d := range list {
			if d.MLX5 {
				if d.Name == want {
					return want, ""
				}
				mlx5 = append(mlx5, d.Name)
			}
		}
		return "", fmt.Sprintf("%s=%s names no mlx5 device of this host (mlx5 devices: %v)", EnvDevice, want, mlx5)
	}
	first := ""
	for _, d := range list {
		if !d.MLX5 {
			continue
		}
		if first == "" {
			first = d.Name
		}
		if hasActivePort(d.Name) {
			return d.Name, ""
		}
	}
	if first != "" {
		return first, ""
	}
	return "", "the mlx5 device disappeared while listing"
}

// hasActivePort reports whether the mlx5 device name opens and has a port
// in the ACTIVE state.
func hasActivePort(name string) bool {
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware, Device: name})
	if err != nil {
		return false
	}
	defer func() { _ = c.Close() }()
	a, err := c.Query()
	if err != nil {
		return false
	}
	for p := uint8(1); p <= a.PhysPortCount && p != 0; p++ {
		if pa, err := c.QueryPort(p); err == nil && pa.State == ctx.PortStateActive {
			return true
		}
	}
	return false
}

// RequireDevice returns the name of the mlx5 device FirstDevice picks (the
// one MLX5KIT_DEVICE names, else the first with an ACTIVE port, else the
// first). Without one it skips the test with the line "no mlx5 device: <why>", or, when
// MLX5KIT_REQUIRE_DEVICE=1, fails it with the same line.
func RequireDevice(tb testing.TB) string {
	tb.Helper()
	name, why := FirstDevice()
	if name != "" {
		return name
	}
	if os.Getenv(EnvRequireDevice) == "1" {
		tb.Fatalf("no mlx5 device: %s (%s=1 requires one)", why, EnvRequireDevice)
		return ""
	}
	tb.Skipf("no mlx5 device: %s", why)
	return ""
}

// OpenContext opens the mlx5 device RequireDevice names through ctx with
// the hardware provider, or skips / fails as RequireDevice does. The
// context is closed when the test ends.
func OpenContext(tb testing.TB) *ctx.Context {
	tb.Helper()
	name := RequireDevice(tb)
	if name == "" {
		return nil
	}
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware, Device: name})
	if err != nil {
		tb.Fatalf("open %s: %v", name, err)
		return nil
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("close %s: %v", name, err)
		}
	})
	return c
}
