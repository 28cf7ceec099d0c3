package emulate

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/sim"
)

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	}))
	return files
}

func TestWriteSysfsDescribesTheModel(t *testing.T) {
	for _, ll := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		t.Run(ll.String(), func(t *testing.T) {
			f := sim.New(sim.Options{LinkLayer: ll})
			defer f.Close()
			devs, err := describeFabric(f)
			require.NoError(t, err)
			require.Len(t, devs, 2)
			dir := t.TempDir()
			require.NoError(t, writeSysfs(dir, devs, devNumber{Major: 1, Minor: 3}))
			files := readTree(t, dir)

			require.Equal(t, "6\n", files["class/infiniband_verbs/abi_version"])
			for i, d := range devs {
				require.Equal(t, i, d.Index)
				uv := "class/infiniband_verbs/uverbs" + string(rune('0'+i)) + "/"
				require.Equal(t, d.Name()+"\n", files[uv+"ibdev"])
				require.Equal(t, "1\n", files[uv+"abi_version"], "the mlx5 provider's ABI")
				require.Equal(t, "1:3\n", files[uv+"dev"])
				ib := "class/infiniband/" + d.Name() + "/"
				require.Equal(t, "1: CA\n", files[ib+"node_type"])
				g := d.Attr.NodeGUID
				require.Equal(t, guidString(g)+"\n", files[ib+"node_guid"])
				require.Len(t, strings.Split(strings.TrimSpace(files[ib+"node_guid"]), ":"), 4)
				require.Equal(t, "pci:v000015B3d00001017sv000015B3sd00000000bc02sc07i00\n", files[ib+"device/modalias"],
					"libmlx5 matches ConnectX-5 (15b3:1017)")
				port := ib + "ports/1/"
				require.Equal(t, "4: ACTIVE\n", files[port+"state"])
				require.Equal(t, "5: LinkUp\n", files[port+"phys_state"])
				require.Equal(t, ll.String()+"\n", files[port+"link_layer"])
				require.Equal(t, "100 Gb/sec (4X EDR)\n", files[port+"rate"])
				require.Equal(t, "0xffff\n", files[port+"pkeys/0"])
				pa := d.Ports[0]
				require.Equal(t, len(d.GIDs[0]), pa.GIDTableLen)
				for _, e := range d.GIDs[0] {
					gid := strings.TrimSpace(files[port+"gids/"+itoaDec(e.Index)])
					require.Len(t, gid, 39, "eight groups of four hex digits")
					require.Equal(t, gidString(e.GID), gid)
					typ, ok := files[port+"gid_attrs/types/"+itoaDec(e.Index)]
					ndev, hasNdev := files[port+"gid_attrs/ndevs/"+itoaDec(e.Index)]
					if ll == ctx.LinkLayerInfiniBand {
						require.False(t, ok, "InfiniBand has no GID types to tell")
						require.False(t, hasNdev, "nor network devices")
						require.Zero(t, e.NetdevIfindex)
						continue
					}
					// A RoCE GID is on a network device: the loopback
					// device, which every machine has.
					lo, err := net.InterfaceByName(netdevRoCE)
					require.NoError(t, err)
					require.Equal(t, netdevRoCE+"\n", ndev, "gid_attrs/ndevs names the GID's network device")
					require.Equal(t, uint32(lo.Index), e.NetdevIfindex, "QUERY_GID_TABLE answers its interface index")
					want := "IB/RoCE v1\n"
					if e.Type == ctx.GIDTypeRoCEv2 {
						want = "RoCE v2\n"
					}
					require.Equal(t, want, typ)
				}
			}
			require.Error(t, writeSysfs(dir, devs, devNumber{Major: 1, Minor: 3}), "a directory that is not empty")
		})
	}
}

func itoaDec(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoaDec(n/10) + string(rune('0'+n%10))
}

func TestGUIDAndGIDStrings(t *testing.T) {
	require.Equal(t, "0002:c903:00a0:b001", guidString(0x0002c90300a0b001))
	var g ctx.GID
	g[0], g[1], g[15] = 0xfe, 0x80, 1
	require.Equal(t, "fe80:0000:0000:0000:0000:0000:0000:0001", gidString(g))
	require.Equal(t, "16.35.1010", fwVerString("16.35.1010"))
	require.Equal(t, "0.0.0000", fwVerString("sim"))
	require.Equal(t, "56 Gb/sec (4X FDR)", rateString(16, 2))
	require.Equal(t, "25 Gb/sec (1X EDR)", rateString(32, 1))
	require.Equal(t, "0 GB/sec", rateString(3, 2))
}

func TestSharedSysfsIsWrittenOnce(t *testing.T) {
	f := sim.New(sim.Options{})
	defer f.Close()
	devs, err := describeFabric(f)
	require.NoError(t, err)
	base := t.TempDir()
	cdev := devNumber{Major: 1, Minor: 3}
	dir, err := sharedSysfs(base, devs, cdev)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(base, "sysfs-"+treeDigest(devs, cdev)), dir)
	again, err := sharedSysfs(base, devs, cdev)
	require.NoError(t, err)
	require.Equal(t, dir, again)
	entries, err := os.ReadDir(base)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no half-written trees left beside it")

	other, err := sharedSysfs(base, devs, devNumber{Major: 1, Minor: 5})
	require.NoError(t, err)
	require.NotEqual(t, dir, other, "another device number is another tree")
}
