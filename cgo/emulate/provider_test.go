//go:build cgo && linux

package emulate_test

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/mlx5kit/mlx5kit/internal/devattr"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// TestCgoProviderSeesTheModel lists and opens the emulated devices through
// the kit's cgo provider (ibv_get_device_list, ibv_open_device,
// ibv_query_device_ex, ibv_query_port, ibv_query_gid_table,
// mlx5dv_query_device, all of rdma-core unmodified) and checks every value
// against what the software HCA reports through its own door.
func TestCgoProviderSeesTheModel(t *testing.T) {
	f := emulate.Fabric()
	require.NotNil(t, f, "the emulation is on")
	infos, err := simadopt.Provider(f).Devices()
	require.NoError(t, err)
	require.NotEmpty(t, infos)

	list, err := verbs.ListDevices()
	require.NoError(t, err)
	require.Len(t, list, len(infos), "ibv_get_device_list lists every device of the model: %+v", list)
	for i, info := range infos {
		require.Equal(t, info.Name, list[i].Name)
		require.Equal(t, info.NodeGUID, list[i].NodeGUID, "node GUID from sysfs")
		require.True(t, list[i].MLX5, "libmlx5 drives %s", info.Name)
		require.Equal(t, "InfiniBand channel adapter", list[i].NodeType)
	}
	require.Empty(t, verbs.NoDeviceReason())

	for _, info := range infos {
		t.Run(info.Name, func(t *testing.T) {
			want, err := simadopt.Provider(f).OpenDevice(info.Name)
			require.NoError(t, err)
			defer want.Close()
			wa, err := want.Query()
			require.NoError(t, err)

			maps, clockMaps := emulate.MappingCount(), emulate.CallCount("mmap clock info")
			ioctls, writes := emulate.CallCount("ioctl GET_CONTEXT"), emulate.CallCount("write GET_CONTEXT")
			d, err := verbs.Open(info.Name)
			require.NoError(t, err)
			defer func() {
				require.NoError(t, d.Close())
				require.Equal(t, maps, emulate.MappingCount(), "ibv_close_device unmaps the UAR and clock info pages")
			}()
			require.Equal(t, info.NodeGUID, d.NodeGUID())
			// libmlx5 asks for 16 bfregs, two to a UAR page, and maps the
			// pages and the clock info page while it opens the device.
			require.Equal(t, maps+8+1, emulate.MappingCount(), "UAR and clock info pages mapped by ibv_open_device")
			require.Equal(t, clockMaps+1, emulate.CallCount("mmap clock info"))
			if os.Getenv(emulate.EnvABI) == emulate.ABIWrite {
				require.Equal(t, writes+1, emulate.CallCount("write GET_CONTEXT"))
				require.Equal(t, ioctls, emulate.CallCount("ioctl GET_CONTEXT"))
			} else {
				require.Equal(t, ioctls+1, emulate.CallCount("ioctl GET_CONTEXT"))
				require.Equal(t, writes, emulate.CallCount("write GET_CONTEXT"))
			}

			got, err := d.Query()
			require.NoError(t, err)
			require.Equal(t, wa.Name, got.Name)
			require.Equal(t, "0.0.0000", got.FirmwareVersion, "the model has no firmware version of mlx5's form")
			require.Equal(t, wa.NodeGUID, got.NodeGUID)
			require.Equal(t, wa.VendorID, got.VendorID)
			require.Equal(t, wa.VendorPartID, got.VendorPartID)
			require.Equal(t, wa.PhysPortCount, got.PhysPortCount)
			require.Equal(t, wa.MaxQP, got.MaxQP)
			require.Equal(t, wa.MaxQPWR, got.MaxQPWR)
			require.Equal(t, wa.MaxSGE, got.MaxSGE)
			require.Equal(t, wa.MaxCQ, got.MaxCQ)
			require.Equal(t, wa.MaxCQE, got.MaxCQE)
			require.Equal(t, wa.MaxMR, got.MaxMR)
			require.Equal(t, wa.MaxMRSize, got.MaxMRSize)
			require.Equal(t, wa.MaxPD, got.MaxPD)
			require.Equal(t, wa.MaxQPRdAtomic, got.MaxQPRdAtomic)
			require.Equal(t, wa.MaxQPInitRdAtomic, got.MaxQPInitRdAtomic)
			require.Equal(t, wa.MaxSRQ, got.MaxSRQ)
			require.Equal(t, wa.MaxSRQWR, got.MaxSRQWR)
			require.Equal(t, wa.MaxSRQSGE, got.MaxSRQSGE)
			require.Equal(t, wa.MaxAH, got.MaxAH)
			require.Equal(t, wa.AtomicHCA, got.AtomicHCA)
			require.Equal(t, wa.CompVectors, got.CompVectors)
			require.Equal(t, wa.CQEPadding, got.CQEPadding, "128-byte CQE padding, from the mlx5 vendor response")
			require.Equal(t, wa.CQECompression, got.CQECompression)
			require.Equal(t, wa.MaxCQECompression, got.MaxCQECompression)

			ext, err := d.QueryExtended()
			require.NoError(t, err)
			require.Equal(t, wa.NodeGUID, ext.SysImageGUID)
			require.Equal(t, uint64(0xfffffffffffff000), ext.PageSizeCap)
			require.Equal(t, uint32(1), ext.AtomicCap, "IBV_ATOMIC_HCA")
			require.Equal(t, uint32(wa.PhysPortCount), ext.PhysPortCountEx)

			dv := d.DVAttr()
			require.False(t, dv.CQEVersion1(), "the model writes version 0 CQEs")
			require.Equal(t, wa.CQEPadding, dv.Flags&devattr.DVFlagCQE128Padding != 0)
			require.Zero(t, dv.CQECompressionMaxNum)

			for p := uint8(1); p <= wa.PhysPortCount; p++ {
				wp, err := want.QueryPort(p)
				require.NoError(t, err)
				gp, err := d.QueryPort(p)
				require.NoError(t, err)
				require.Equal(t, wp, gp, "port %d", p)

				wg, err := want.QueryGIDs(p)
				require.NoError(t, err)
				if wp.LinkLayer == ctx.LinkLayerEthernet {
					// The emulated kernel puts RoCE GIDs on the
					// loopback device, as a ConnectX's are on its
					// network device.
					lo, err := net.InterfaceByName(emulate.RoCENetdev)
					require.NoError(t, err)
					for i := range wg {
						wg[i].NetdevIfindex = uint32(lo.Index)
					}
				}
				gg, err := d.QueryGIDs(p)
				require.NoError(t, err)
				require.Equal(t, wg, gg, "GID table of port %d", p)
				for _, e := range wg {
					one, err := d.QueryGID(p, e.Index)
					require.NoError(t, err)
					require.Equal(t, e, one.GIDEntry)
				}
				_, err = d.QueryGID(p, wp.GIDTableLen)
				require.ErrorIs(t, err, ctx.ErrInvalidArgument, "an index past the table")
			}
			_, err = d.QueryPort(wa.PhysPortCount + 1)
			require.ErrorIs(t, err, ctx.ErrInvalidArgument, "a port the device does not have")
		})
	}
}

// libibverbsVersion returns the rdma-core version of the libibverbs the
// process has mapped (libibverbs.so.1.<ABI>.<version>.<patch>), 0 when
// its file name does not tell.
func libibverbsVersion(t *testing.T) int {
	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	for _, line := range strings.Split(string(maps), "\n") {
		i := strings.Index(line, "libibverbs.so.1.")
		if i < 0 {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(line[i:], "libibverbs.so.1."), ".")
		if len(parts) >= 2 {
			if v, err := strconv.Atoi(parts[1]); err == nil {
				return v
			}
		}
	}
	return 0
}

// TestCgoProviderActiveSpeedPastNDR runs ibv_query_port on a port of XDR
// speed (256), which the 8-bit active_speed cannot hold: the kernel answers
// NDR (128) there and 256 in active_speed_ex of the QUERY_PORT method, which
// libibverbs 49 and later read. The kit's provider reports 256 where the
// library has it, and NDR from an older library or the write command, as on
// a NIC.
func TestCgoProviderActiveSpeedPastNDR(t *testing.T) {
	restore := emulate.SetPortSpeed(256)
	defer restore()
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	pa, err := d.QueryPort(1)
	require.NoError(t, err)
	v := libibverbsVersion(t)
	want := uint32(256)
	if v < 49 || os.Getenv(emulate.EnvABI) == emulate.ABIWrite {
		want = 128
	}
	require.Equal(t, want, pa.ActiveSpeed, "libibverbs %d, ABI %q", v, os.Getenv(emulate.EnvABI))
}

// envChild marks the runs of the test binary that TestEnvironmentSwitch
// starts.
const envChild = "MLX5KIT_EMULATE_TEST_CHILD"

// TestEnvironmentSwitch runs the provider test again in fresh processes
// switched on by MLX5KIT_EMULATE=1 alone, as a Go program is: with
// Ethernet ports (RoCE GID types), and with a kernel that answers every
// ioctl with ENOTTY, so that libibverbs takes the write commands and sysfs.
func TestEnvironmentSwitch(t *testing.T) {
	if os.Getenv(envChild) != "" {
		t.Skip("already a child run")
	}
	for _, c := range []struct{ name, link, abi string }{
		{"ethernet", "ethernet", ""},
		{"write-abi", "infiniband", emulate.ABIWrite},
		{"write-abi-ethernet", "ethernet", emulate.ABIWrite},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^TestCgoProviderSeesTheModel$|^TestChildIsEmulated$|^TestCgoProviderObjects$|^TestCgoProviderCompletionQueues$|^TestContextObjects$|^TestCgoProviderQueuePairs$|^TestCgoProviderActiveSpeedPastNDR$", "-test.count", "1", "-test.v")
			cmd.Env = append(os.Environ(), envChild+"=1", emulate.EnvEmulate+"=1",
				emulate.EnvLink+"="+c.link, emulate.EnvABI+"="+c.abi)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "--- PASS: TestCgoProviderSeesTheModel")
			require.Contains(t, string(out), "--- PASS: TestChildIsEmulated")
			require.Contains(t, string(out), "--- PASS: TestCgoProviderObjects")
			require.Contains(t, string(out), "--- PASS: TestCgoProviderCompletionQueues")
			require.Contains(t, string(out), "--- PASS: TestContextObjects")
			require.Contains(t, string(out), "--- PASS: TestCgoProviderQueuePairs")
			require.Contains(t, string(out), "--- PASS: TestCgoProviderActiveSpeedPastNDR")
			require.NotContains(t, string(out), "--- SKIP: TestChildIsEmulated")
		})
	}
}

// TestChildIsEmulated checks, in a child run, that MLX5KIT_EMULATE=1 had
// switched the emulation on before TestMain, with the link layer asked
// for.
func TestChildIsEmulated(t *testing.T) {
	if os.Getenv(envChild) == "" {
		t.Skip("runs in the children of TestEnvironmentSwitch")
	}
	require.True(t, emulate.Enabled())
	require.Equal(t, emulate.SysfsPath(), os.Getenv("SYSFS_PATH"))
	ll := ctx.LinkLayerInfiniBand
	if strings.HasPrefix(os.Getenv(emulate.EnvLink), "eth") {
		ll = ctx.LinkLayerEthernet
	}
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	pa, err := d.QueryPort(1)
	require.NoError(t, err)
	require.Equal(t, ll, pa.LinkLayer)
}
