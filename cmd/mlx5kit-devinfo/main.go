// Command mlx5kit-devinfo lists RDMA devices and describes mlx5 devices the
// way ibv_devinfo does, with what the kit needs besides: the mlx5dv
// attributes (CQE version, CQE compression, DCI streams), the largest inline
// payload and BlueFlame size rdma-core grants, DC support, and every GID
// with its type.
//
// Usage:
//
//	mlx5kit-devinfo [-l] [-d device] [-v] [-json] [-sim]
//
//	-l      only list the devices (with -sim, the software HCA's)
//	-d      describe this device only (default: every mlx5 device; with -sim, sim0)
//	-v      also print the mlx5dv and extended verbs attributes
//	-json   print JSON instead of text
//	-sim    describe the software HCA instead of hardware
//
// The exit status is 0 when the devices were listed or every device asked
// for was described, 1 when there was none or describing one failed (the
// others are still printed; with -json an array, empty when all failed),
// 2 for bad flags.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/mlx5kit/mlx5kit"
	"github.com/mlx5kit/mlx5kit/cgo"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/devattr"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/mlx5kit/mlx5kit/sim"
)

func main() {
	// -sim on a shared fabric ($MLX5KIT_SIM_FABRIC) joined it: Main
	// leaves, taking this process's ring file with it, also on SIGINT or
	// SIGTERM.
	perftool.Main(func() int { return run(os.Args[1:], os.Stdout, os.Stderr) })
}

// hardwareExtras is what the hardware provider's device handle offers
// beyond provider.Device (the hardware provider's device).
type hardwareExtras interface {
	DVAttr() devattr.DVAttr
	QueryExtended() (devattr.ExtendedAttr, error)
	QueryGIDTable() ([]devattr.GIDTableEntry, error)
}

// Port is one port's description.
type Port struct {
	ctx.PortAttr
	GIDs []GID `json:"gids"`
	// ChosenGID is the index of the GID queue pairs use when none is
	// named (ctx.ChooseGID), nil when there is none to choose (the reason
	// is in NoGID).
	ChosenGID *int   `json:"chosen_gid,omitempty"`
	NoGID     string `json:"no_gid,omitempty"`
}

// GID is one GID table entry.
type GID struct {
	Index         int    `json:"index"`
	GID           string `json:"gid"`
	Type          string `json:"type"`
	NetdevIfindex uint32 `json:"netdev_ifindex,omitempty"`
}

// Description is everything printed about one device.
type Description struct {
	Provider string                `json:"provider"`
	Kind     string                `json:"kind"`
	Attr     ctx.DeviceAttr        `json:"attr"`
	Ports    []Port                `json:"ports"`
	DV       *devattr.DVAttr       `json:"mlx5dv,omitempty"`
	Extended *devattr.ExtendedAttr `json:"extended,omitempty"`
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mlx5kit-devinfo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listOnly := fs.Bool("l", false, "only list the devices")
	device := fs.String("d", "", "describe this device only (default: every mlx5 device; with -sim, sim0)")
	verbose := fs.Bool("v", false, "also print the mlx5dv and extended verbs attributes")
	asJSON := fs.Bool("json", false, "print JSON")
	software := fs.Bool("sim", false, "describe the software HCA instead of hardware")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // the usage asked for, printed
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "mlx5kit-devinfo: unexpected arguments %q\n", fs.Args())
		return 2
	}

	var names []string
	provider := ctx.ProviderHardware
	if *software {
		provider = ctx.ProviderSoftware
		names = []string{*device}
		if *listOnly {
			list, err := simadopt.Provider(sim.Default()).Devices()
			if err != nil {
				fmt.Fprintf(stderr, "mlx5kit-devinfo: %v\n", err)
				return 1
			}
			printSimList(stdout, list)
			return 0
		}
	} else {
		list, err := cgo.ListDevices()
		if err != nil {
			fmt.Fprintf(stderr, "mlx5kit-devinfo: %v\n", err)
			return 1
		}
		if len(list) == 0 {
			fmt.Fprintf(stderr, "mlx5kit-devinfo: no RDMA devices found (%s); -sim describes the software HCA\n", cgo.NoDeviceReason())
			return 1
		}
		if *listOnly {
			printList(stdout, list)
			return 0
		}
		for _, d := range list {
			if (*device == "" && d.MLX5) || d.Name == *device {
				names = append(names, d.Name)
			}
		}
		if len(names) == 0 {
			if *device != "" {
				fmt.Fprintf(stderr, "mlx5kit-devinfo: no device named %q\n", *device)
			} else {
				fmt.Fprintf(stderr, "mlx5kit-devinfo: none of the %d RDMA devices is mlx5\n", len(list))
			}
			return 1
		}
	}

	descs := make([]Description, 0, len(names)) // JSON [] when all fail, not null
	status := 0
	for _, name := range names {
		d, err := describe(provider, name, *verbose)
		if err != nil {
			fmt.Fprintf(stderr, "mlx5kit-devinfo: %v\n", err)
			status = 1
			continue
		}
		descs = append(descs, d)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(descs); err != nil {
			fmt.Fprintf(stderr, "mlx5kit-devinfo: %v\n", err)
			return 1
		}
	} else {
		for _, d := range descs {
			printDescription(stdout, d)
		}
	}
	return status
}

// describe opens one device through ctx and gathers its description.
func describe(provider, name string, verbose bool) (Description, error) {
	c, err := mlx5kit.Open(ctx.Options{Provider: provider, Device: name})
	if err != nil {
		return Description{}, err
	}
	defer c.Close()
	return describeContext(c, verbose)
}

func describeContext(c *ctx.Context, verbose bool) (Description, error) {
	d := Description{Provider: c.Provider(), Kind: c.Kind().String()}
	var err error
	if d.Attr, err = c.Query(); err != nil {
		return d, err
	}
	hw, _ := provider.DeviceOf(c).(hardwareExtras)
	var table []devattr.GIDTableEntry
	if hw != nil {
		if table, err = hw.QueryGIDTable(); err != nil {
			return d, err
		}
		if verbose {
			dv := hw.DVAttr()
			d.DV = &dv
			ext, err := hw.QueryExtended()
			if err != nil {
				return d, err
			}
			d.Extended = &ext
		}
	}
	for p := uint8(1); p <= d.Attr.PhysPortCount; p++ {
		pa, err := c.QueryPort(p)
		if err != nil {
			return d, err
		}
		port := Port{PortAttr: pa}
		if table != nil {
			for _, e := range table {
				if e.Port == p {
					port.GIDs = append(port.GIDs, GID{Index: e.Index, GID: e.GID.String(), Type: e.Type.String(), NetdevIfindex: e.NetdevIfindex})
				}
			}
		} else {
			gids, err := c.QueryGIDs(p)
			if err != nil {
				return d, err
			}
			for _, e := range gids {
				port.GIDs = append(port.GIDs, GID{Index: e.Index, GID: e.GID.String(), Type: e.Type.String()})
			}
		}
		if e, err := c.ChooseGID(p, ctx.GIDSelector{}); err == nil {
			port.ChosenGID = &e.Index
		} else {
			port.NoGID = err.Error()
		}
		d.Ports = append(d.Ports, port)
	}
	return d, nil
}

// guid formats a GUID the way ibv_devinfo does: four groups of four hex
// digits.
func guid(v uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", v>>48, v>>32&0xffff, v>>16&0xffff, v&0xffff)
}

func printList(w io.Writer, list []cgo.DeviceListing) {
	rows := [][]string{{"device", "node GUID", "node type", "mlx5"}}
	for _, d := range list {
		rows = append(rows, []string{d.Name, guid(d.NodeGUID), d.NodeType, fmt.Sprint(d.MLX5)})
	}
	printRows(w, rows)
}

// printSimList lists the software HCA's devices, the names -d and
// Options.Device accept with -sim.
func printSimList(w io.Writer, list []provider.DeviceInfo) {
	rows := [][]string{{"device", "node GUID", "provider"}}
	for _, d := range list {
		rows = append(rows, []string{d.Name, guid(d.NodeGUID), fmt.Sprintf("%s (%s)", ctx.ProviderSoftware, d.Kind)})
	}
	printRows(w, rows)
}

// printRows prints a listing's rows as aligned columns.
func printRows(w io.Writer, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// width decodes an ibv width code as ibv_devinfo does (width_str): code 2
// is 4X, code 16 is 2X.
func width(code uint8) string {
	switch code {
	case 1:
		return "1X"
	case 2:
		return "4X"
	case 4:
		return "8X"
	case 8:
		return "12X"
	case 16:
		return "2X"
	}
	return "invalid width"
}

// speed decodes an ibv speed code as ibv_devinfo does (speed_str): the
// signalling rate of one lane.
func speed(code uint32) string {
	switch code {
	case 1:
		return "2.5 Gbps"
	case 2:
		return "5.0 Gbps"
	case 4, 8:
		return "10.0 Gbps"
	case 16:
		return "14.0 Gbps"
	case 32:
		return "25.0 Gbps"
	case 64:
		return "50.0 Gbps"
	case 128:
		return "100.0 Gbps"
	case 256:
		return "200.0 Gbps"
	}
	return "invalid speed"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func printDescription(w io.Writer, d Description) {
	a := d.Attr
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	row := func(indent int, k string, format string, args ...any) {
		fmt.Fprintf(tw, "%s%s:\t%s\n", strings.Repeat("    ", indent), k, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(tw, "hca_id:\t%s\n", a.Name)
	row(1, "provider", "%s (%s)", d.Provider, d.Kind)
	row(1, "fw_ver", "%s", a.FirmwareVersion)
	row(1, "node_guid", "%s", guid(a.NodeGUID))
	row(1, "vendor_id", "0x%04x", a.VendorID)
	row(1, "vendor_part_id", "%d", a.VendorPartID)
	row(1, "phys_port_cnt", "%d", a.PhysPortCount)
	row(1, "max_qp", "%d", a.MaxQP)
	row(1, "max_qp_wr", "%d", a.MaxQPWR)
	row(1, "max_sge", "%d", a.MaxSGE)
	row(1, "max_cq", "%d", a.MaxCQ)
	row(1, "max_cqe", "%d", a.MaxCQE)
	row(1, "max_mr", "%d", a.MaxMR)
	row(1, "max_mr_size", "0x%x", a.MaxMRSize)
	row(1, "max_pd", "%d", a.MaxPD)
	row(1, "max_qp_rd_atom", "%d", a.MaxQPRdAtomic)
	row(1, "max_qp_init_rd_atom", "%d", a.MaxQPInitRdAtomic)
	row(1, "max_srq", "%d", a.MaxSRQ)
	row(1, "max_srq_wr", "%d", a.MaxSRQWR)
	row(1, "max_srq_sge", "%d", a.MaxSRQSGE)
	row(1, "max_ah", "%d", a.MaxAH)
	row(1, "atomics (HCA)", "%s", yesNo(a.AtomicHCA))
	row(1, "masked atomics", "%s", a.MaskedAtomics)
	row(1, "max inline (RC)", "%d bytes", a.MaxInline)
	row(1, "BlueFlame size", "%d bytes", a.BlueFlameSize)
	row(1, "DC (DCI/DCT)", "%s", yesNo(a.DC))
	row(1, "128-byte CQEs", "%s", yesNo(a.CQE128))
	row(1, "CQE compression", "%s (max session %d)", yesNo(a.CQECompression), a.MaxCQECompression)
	if dv := d.DV; dv != nil {
		row(1, "mlx5dv version", "%d", dv.Version)
		row(1, "mlx5dv flags", "0x%x (CQE v1 %s)", dv.Flags, yesNo(dv.CQEVersion1()))
		row(1, "mlx5dv comp_mask", "0x%x", dv.CompMask)
		row(1, "CQE compression formats", "0x%x", dv.CQECompressionFormats)
		row(1, "DCI streams", "log concurrent %d, log errored %d", dv.DCIStreamsMaxLogConcurrent, dv.DCIStreamsMaxLogErrored)
		row(1, "DC ODP caps", "0x%x", dv.DCODPCaps)
		row(1, "LAG ports", "%d", dv.NumLAGPorts)
		row(1, "max dynamic BF registers", "%d", dv.MaxDynamicBlueFlameRegisters)
	}
	if e := d.Extended; e != nil {
		row(1, "hw_ver", "0x%x", e.HardwareVersion)
		row(1, "sys_image_guid", "%s", guid(e.SysImageGUID))
		row(1, "device_cap_flags", "0x%08x", e.DeviceCapFlags)
		row(1, "device_cap_flags_ex", "0x%x", e.DeviceCapFlagsEx)
		row(1, "page_size_cap", "0x%x", e.PageSizeCap)
		row(1, "atomic_cap", "%d", e.AtomicCap)
		row(1, "hca_core_clock", "%d kHz", e.HCACoreClockKHz)
		row(1, "completion_timestamp_mask", "0x%x", e.CompletionTimestampMask)
		row(1, "odp caps", "general 0x%x rc 0x%x ud 0x%x", e.ODPGeneralCaps, e.ODPRCCaps, e.ODPUDCaps)
		row(1, "pci atomics", "fetch_add 0x%x swap 0x%x cas 0x%x", e.PCIAtomicFetchAdd, e.PCIAtomicSwap, e.PCIAtomicCompareSwap)
		row(1, "max_dm_size", "%d", e.MaxDeviceMemory)
	}
	for _, p := range d.Ports {
		row(2, "port", "%d", p.Port)
		row(3, "state", "%v (%d)", p.State, p.State)
		row(3, "max_mtu", "%v (%d)", p.MaxMTU, p.MaxMTU)
		row(3, "active_mtu", "%v (%d)", p.ActiveMTU, p.ActiveMTU)
		row(3, "sm_lid", "%d", p.SMLID)
		row(3, "port_lid", "%d", p.LID)
		row(3, "port_lmc", "0x%02x", p.LMC)
		row(3, "link_layer", "%v", p.LinkLayer)
		row(3, "active_width", "%s (%d)", width(p.ActiveWidth), p.ActiveWidth)
		row(3, "active_speed", "%s (%d)", speed(p.ActiveSpeed), p.ActiveSpeed)
		for _, g := range p.GIDs {
			ifx := ""
			if g.NetdevIfindex != 0 {
				ifx = fmt.Sprintf(" ifindex %d", g.NetdevIfindex)
			}
			row(3, fmt.Sprintf("GID[%3d]", g.Index), "%s, %s%s", g.GID, g.Type, ifx)
		}
		if p.ChosenGID != nil {
			row(3, "GID chosen", "%d", *p.ChosenGID)
		} else {
			row(3, "GID chosen", "none: %s", p.NoGID)
		}
	}
	tw.Flush()
}
