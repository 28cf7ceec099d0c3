package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mlx5kit/mlx5kit/cgo"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/devicetest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/stretchr/testify/require"
)

func TestDescribeSoftwareHCA(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"-sim"}, &out, &errOut), errOut.String())
	s := out.String()
	for _, want := range []string{"hca_id:", "provider:", "sim (software)", "max inline (RC):", "port:", "state:", "GID[  0]:", "GID chosen:"} {
		require.Contains(t, s, want)
	}
}

func TestDescribeSoftwareHCAJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"-sim", "-json", "-v"}, &out, &errOut), errOut.String())
	var descs []Description
	require.NoError(t, json.Unmarshal(out.Bytes(), &descs))
	require.Len(t, descs, 1)
	d := descs[0]
	require.Equal(t, "sim", d.Provider)
	require.Equal(t, "software", d.Kind)
	require.NotEmpty(t, d.Attr.Name)
	require.Len(t, d.Ports, int(d.Attr.PhysPortCount))
	require.NotEmpty(t, d.Ports[0].GIDs)
	require.Nil(t, d.DV, "the software HCA has no mlx5dv attributes")
}

// -sim -l lists the software HCA's devices by the names -d accepts, and
// each name it lists opens.
func TestListingSoftwareHCA(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"-sim", "-l"}, &out, &errOut), errOut.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3, out.String())
	require.Equal(t, []string{"device", "node", "GUID", "provider"}, strings.Fields(lines[0]))
	for i, line := range lines[1:] {
		name := strings.Fields(line)[0]
		require.Equal(t, "sim"+strconv.Itoa(i), name, out.String())
		require.Contains(t, line, "sim (software)")
		var desc bytes.Buffer
		require.Equal(t, 0, run([]string{"-sim", "-d", name}, &desc, &errOut), errOut.String())
		require.Contains(t, desc.String(), "hca_id:                   "+name)
	}
}

func TestListing(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"-l"}, &out, &errOut)
	list, err := cgo.ListDevices()
	switch {
	case err != nil:
		require.Equal(t, 1, code)
		require.Contains(t, errOut.String(), err.Error())
	case len(list) == 0:
		require.Equal(t, 1, code)
		require.Contains(t, errOut.String(), "no RDMA devices found")
		require.Contains(t, errOut.String(), cgo.NoDeviceReason())
	default:
		require.Equal(t, 0, code, errOut.String())
		for _, d := range list {
			require.Contains(t, out.String(), d.Name)
		}
	}
}

func TestFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 2, run([]string{"-nosuchflag"}, &out, &errOut))
	require.Equal(t, 2, run([]string{"extra"}, &out, &errOut))
	require.True(t, strings.Contains(errOut.String(), "unexpected arguments"))
}

func TestGUIDFormat(t *testing.T) {
	require.Equal(t, "0002:c903:00a0:b000", guid(0x0002c90300a0b000))
	require.Equal(t, "0000:0000:0000:0001", guid(1))
}

func TestHardwareDescribe(t *testing.T) {
	name := devicetest.RequireDevice(t)
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"-v", "-d", name}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "hca_id:")
	require.Contains(t, out.String(), name)
	require.Contains(t, out.String(), "mlx5dv version:")

	out.Reset()
	require.Equal(t, 0, run([]string{"-json", "-v", "-d", name}, &out, &errOut), errOut.String())
	var descs []Description
	require.NoError(t, json.Unmarshal(out.Bytes(), &descs))
	require.Len(t, descs, 1)
	require.Equal(t, "mlx5", descs[0].Provider)
	require.NotNil(t, descs[0].DV)
	require.NotNil(t, descs[0].Extended)
	require.Len(t, descs[0].Ports, int(descs[0].Attr.PhysPortCount))

	require.Equal(t, 1, run([]string{"-d", "mlx5kit_no_such_device"}, &out, &errOut))
	require.Contains(t, errOut.String(), "no device named")
}

// TestDescribeRoCEChosenGID: on an Ethernet port the description names the
// GID queue pairs choose (RoCE v2 IPv4-mapped, index 3 of the model's
// table); on InfiniBand the port GID.
func TestDescribeRoCEChosenGID(t *testing.T) {
	for link, want := range map[ctx.LinkLayer]int{ctx.LinkLayerEthernet: 3, ctx.LinkLayerInfiniBand: 0} {
		f := sim.New(sim.Options{LinkLayer: link})
		c, err := f.Open("sim0")
		require.NoError(t, err)
		d, err := describeContext(c, false)
		require.NoError(t, err)
		require.NotNil(t, d.Ports[0].ChosenGID, "%v", link)
		require.Equal(t, want, *d.Ports[0].ChosenGID, "%v", link)
		var out bytes.Buffer
		printDescription(&out, d)
		require.Regexp(t, `GID chosen:\s+`+strconv.Itoa(want)+`\n`, out.String())
		require.NoError(t, c.Close())
		require.NoError(t, f.Close())
	}
}

// TestHelpExitsZero: -h prints the usage and exits 0, as flag's
// ExitOnError does and every tool of the kit does; a bad flag exits 2.
func TestHelpExitsZero(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"-h"}, &out, &errOut))
	require.Contains(t, errOut.String(), "-sim")
	require.Equal(t, 2, run([]string{"-nosuch"}, &out, &errOut))
}

// TestPortWidthAndSpeed: active_width and active_speed print as
// ibv_devinfo prints them, the decoded value and the verbs code: width
// code 2 is 4X (not 2X, which is code 16), speed code 32 is 25.0 Gbps.
func TestPortWidthAndSpeed(t *testing.T) {
	f := sim.New(sim.Options{})
	c, err := f.Open("sim0")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.Close()) })
	d, err := describeContext(c, false)
	require.NoError(t, c.Close())
	require.NoError(t, err)
	for _, tc := range []struct {
		width     uint8
		speed     uint32
		wantWidth string
		wantSpeed string
	}{
		{2, 32, "4X (2)", "25.0 Gbps (32)"},
		{16, 64, "2X (16)", "50.0 Gbps (64)"},
		{1, 1, "1X (1)", "2.5 Gbps (1)"},
		{8, 128, "12X (8)", "100.0 Gbps (128)"},
		{3, 3, "invalid width (3)", "invalid speed (3)"},
	} {
		d.Ports[0].ActiveWidth, d.Ports[0].ActiveSpeed = tc.width, tc.speed
		var out bytes.Buffer
		printDescription(&out, d)
		require.Regexp(t, `\n\s+active_width:\s+`+regexp.QuoteMeta(tc.wantWidth)+`\n`, out.String())
		require.Regexp(t, `\n\s+active_speed:\s+`+regexp.QuoteMeta(tc.wantSpeed)+`\n`, out.String())
	}
}
