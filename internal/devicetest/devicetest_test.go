package devicetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder stands in for a *testing.T to see what RequireDevice does
// without ending the real test. Skipf and Fatalf only record: RequireDevice
// must return right after calling them.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) { r.skipped = fmt.Sprintf(format, args...) }

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestRequireDeviceSkipsOrFails(t *testing.T) {
	name, why := FirstDevice()
	if name != "" {
		t.Setenv(EnvRequireDevice, "1")
		r := &recorder{TB: t}
		require.Equal(t, name, RequireDevice(r))
		require.Empty(t, r.skipped)
		require.Empty(t, r.failed)
		return
	}
	require.NotEmpty(t, why, "FirstDevice must say why there is no device")

	t.Setenv(EnvRequireDevice, "")
	r := &recorder{TB: t}
	require.Equal(t, "", RequireDevice(r))
	require.Empty(t, r.failed)
	require.Equal(t, "no mlx5 device: "+why, r.skipped)
	require.NotContains(t, r.skipped, "\n", "the skip is one line")

	t.Setenv(EnvRequireDevice, "1")
	r = &recorder{TB: t}
	require.Equal(t, "", RequireDevice(r))
	require.Empty(t, r.skipped, "MLX5KIT_REQUIRE_DEVICE=1 must fail, not skip")
	require.True(t, strings.HasPrefix(r.failed, "no mlx5 device: "+why), r.failed)
	require.Contains(t, r.failed, EnvRequireDevice)
}

func TestOpenContextGate(t *testing.T) {
	if name, _ := FirstDevice(); name != "" {
		c := OpenContext(t)
		require.NotNil(t, c)
		require.Equal(t, name, c.DeviceName())
		return
	}
	t.Setenv(EnvRequireDevice, "")
	r := &recorder{TB: t}
	require.Nil(t, OpenContext(r))
	require.True(t, strings.HasPrefix(r.skipped, "no mlx5 device: "), r.skipped)
}
