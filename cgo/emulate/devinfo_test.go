//go:build cgo && linux

package emulate_test

import (
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// preloadLibrary builds the preload form of the emulation
// (./cgo/emulate/preload, -buildmode=c-shared) into dir.
func preloadLibrary(t *testing.T, dir string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(build.Default.GOROOT, "bin", "go")
	}
	lib := filepath.Join(dir, "libmlx5kit-emulate.so")
	out, err := exec.Command(goTool, "build", "-buildmode=c-shared", "-o", lib, "github.com/mlx5kit/mlx5kit/cgo/emulate/preload").CombinedOutput()
	require.NoError(t, err, "go build -buildmode=c-shared: %s", out)
	return lib
}

// TestIbvDevinfoUnderPreload runs Debian's ibv_devinfo -v (libibverbs and
// libmlx5 as packaged, unmodified) with the emulation preloaded and checks
// that it names the devices, their ports, state, LIDs and link layer, the
// GID table, the device capability flags and the completion timestamp
// clock, for both link layers and for the write-command ABI.
func TestIbvDevinfoUnderPreload(t *testing.T) {
	devinfo, err := exec.LookPath("ibv_devinfo")
	if err != nil {
		t.Skip("ibv_devinfo is not installed (Debian package ibverbs-utils; scripts/deps.sh installs it)")
	}
	lib := preloadLibrary(t, t.TempDir())
	f := emulate.Fabric()
	infos, err := simadopt.Provider(f).Devices()
	require.NoError(t, err)

	for _, c := range []struct{ name, link, abi, layer string }{
		{"infiniband", "infiniband", "", "InfiniBand"},
		{"ethernet", "ethernet", "", "Ethernet"},
		{"write-abi", "infiniband", emulate.ABIWrite, "InfiniBand"},
		{"write-abi-ethernet", "ethernet", emulate.ABIWrite, "Ethernet"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(devinfo, "-v")
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, emulate.EnvEmulate+"=1",
				emulate.EnvLink+"="+c.link, emulate.EnvABI+"="+c.abi)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			s := string(out)
			for _, info := range infos {
				require.Contains(t, s, "hca_id:\t"+info.Name+"\n")
				g := info.NodeGUID
				require.Contains(t, s, "node_guid:\t\t\t"+strings.Join([]string{hex4(g >> 48), hex4(g >> 32), hex4(g >> 16), hex4(g)}, ":"))
			}
			require.Equal(t, len(infos), strings.Count(s, "\t\tport:\t1\n"), "one port per device")
			require.Equal(t, len(infos), strings.Count(s, "state:\t\t\tPORT_ACTIVE (4)"))
			require.Equal(t, len(infos), strings.Count(s, "link_layer:\t\t"+c.layer+"\n"))
			require.Contains(t, s, "vendor_id:\t\t\t0x02c9")
			require.Contains(t, s, "vendor_part_id:\t\t\t4119")
			require.Contains(t, s, "GID[  0]:\t\tfe80:0000:0000:0000:0002:c903:00a0:b000")
			if c.layer == "Ethernet" {
				require.Contains(t, s, "GID[  3]:\t\t::ffff:10.77.0.1, RoCE v2")
				require.Contains(t, s, "GID[  0]:\t\tfe80:0000:0000:0000:0002:c903:00a0:b000, RoCE v1")
				// A RoCE port has no LIDs, its subnet manager's
				// included (mlx5_query_port_roce leaves both 0).
				require.Equal(t, len(infos), strings.Count(s, "sm_lid:\t\t\t0\n"))
				require.Equal(t, len(infos), strings.Count(s, "port_lid:\t\t0\n"))
			} else {
				require.Equal(t, len(infos), strings.Count(s, "sm_lid:\t\t\t1\n"))
			}
			// What mlx5_ib announces on every device and the model
			// does: RNR NAKs, the system image GUID, PORT_ACTIVE events.
			require.Equal(t, len(infos), strings.Count(s, "device_cap_flags:\t\t0x00001c00\n"))
			require.Equal(t, len(infos), strings.Count(s, "\t\t\t\t\tPORT_ACTIVE_EVENT\n"))
			// The model stamps CQEs (IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION),
			// so the extended query reports its clock, as mlx5_ib
			// reports a ConnectX's; ibv_rc_pingpong -t needs the mask.
			require.Equal(t, len(infos), strings.Count(s, "completion timestamp_mask:\t\t\t0x0000ffffffffffff\n"))
			require.Equal(t, len(infos), strings.Count(s, "hca_core_clock:\t\t\t250000kHZ\n"))
			require.NotContains(t, s, "completion_timestamp_mask not supported")
			require.NotContains(t, s, "Failed")
		})
	}

	t.Run("off without MLX5KIT_EMULATE", func(t *testing.T) {
		cmd := exec.Command(devinfo)
		cmd.Env = append(filterEnv(os.Environ(), emulate.EnvEmulate, "SYSFS_PATH"), "LD_PRELOAD="+lib)
		out, _ := cmd.CombinedOutput()
		require.NotContains(t, string(out), "hca_id:\tsim0", "the preloaded library passes everything through: %s", out)
	})
}

func hex4(v uint64) string {
	const digits = "0123456789abcdef"
	v &= 0xffff
	return string([]byte{digits[v>>12], digits[v>>8&0xf], digits[v>>4&0xf], digits[v&0xf]})
}

func filterEnv(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		keep := true
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}
