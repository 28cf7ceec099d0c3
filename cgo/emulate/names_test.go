package emulate

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestNameDevicesMLX5 checks that envNames=mlx5 names the devices of the
// sysfs tree mlx5_<uverbs index> while the model keeps its own names, that
// the model's names stay the default, and that another value is refused
// and names nothing.
func TestNameDevicesMLX5(t *testing.T) {
	f := sim.New(sim.Options{})
	defer f.Close()
	devs, err := describeFabric(f)
	require.NoError(t, err)
	require.Len(t, devs, 2)

	require.NoError(t, nameDevices(devs, ""))
	require.NoError(t, nameDevices(devs, namesModel))
	for _, d := range devs {
		require.Equal(t, d.Name(), d.IBName())
	}
	err = nameDevices(devs, "cx7")
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Contains(t, err.Error(), envNames)
	for _, d := range devs {
		require.Empty(t, d.Alias)
	}

	require.NoError(t, nameDevices(devs, namesMLX5))
	dir := t.TempDir()
	require.NoError(t, writeSysfs(dir, devs, devNumber{Major: 1, Minor: 3}))
	files := readTree(t, dir)
	for i, d := range devs {
		want := []string{"mlx5_0", "mlx5_1"}[i]
		require.Equal(t, want, d.IBName())
		require.Equal(t, "sim"+string(rune('0'+i)), d.Name(), "the model keeps its name")
		uv := "class/infiniband_verbs/" + d.UverbsName() + "/"
		require.Equal(t, want+"\n", files[uv+"ibdev"])
		require.Contains(t, files, "class/infiniband/"+want+"/node_guid")
		require.NotContains(t, files, "class/infiniband/"+d.Name()+"/node_guid")
	}
}
