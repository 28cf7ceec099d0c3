package emulate

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/mlx5kit/mlx5kit/sim"
)

// What the generated tree says of every device: the PCI identity of a
// ConnectX (Mellanox's PCI vendor, 0x15b3, which libmlx5's device table
// matches through device/modalias) and the uverbs ABI versions (the
// class-wide 6 of IB_USER_VERBS_ABI_VERSION, the per-device 1 of
// MLX5_IB_UVERBS_ABI_VERSION, which libmlx5 requires).
const (
	pciVendorMellanox = 0x15b3
	uverbsABIVersion  = 6
	mlx5ABIVersion    = 1
	// boardID names the model where a ConnectX names its board.
	boardID = "MLX5KIT_SIM"
)

// devNumber is a character device number, major:minor.
type devNumber struct{ Major, Minor uint32 }

// String returns "major:minor", as sysfs writes a dev attribute.
func (n devNumber) String() string { return fmt.Sprintf("%d:%d", n.Major, n.Minor) }

// Device is what the emulated kernel knows of one device of the software
// HCA: its place among the uverbs devices and what the model reports
// through its provider door (package sim), read once so that both doors
// give the same values.
type sysfsDevice struct {
	// Index is N of the uverbs device node /dev/infiniband/uverbsN.
	Index int
	// Attr, Ports (index 0 is port 1) and GIDs (per port) are the model's
	// answers to Query, QueryPort and QueryGIDs, except that the GIDs of
	// an Ethernet port carry the interface index of Netdev.
	Attr  ctx.DeviceAttr
	Ports []ctx.PortAttr
	GIDs  [][]ctx.GIDEntry
	// Netdev is the network device the GIDs of the Ethernet ports are
	// on, "" when there is none (see netdevRoCE).
	Netdev string
	// Alias, when set, is the name libibverbs sees instead of the model's
	// (class/infiniband/<Alias>, the uverbs node's ibdev).
	Alias string
}

// netdevRoCE is the network device the emulated kernel puts the GIDs of
// an Ethernet port on. A ConnectX's RoCE GIDs are each on a network device
// (the kernel's GID cache takes none without one; libibverbs reads its
// name from gid_attrs/ndevs and its index from QUERY_GID_TABLE). The
// model's ports have no device of their own, so the emulated kernel names
// the loopback device, which every network namespace has, and answers its
// interface index.
const netdevRoCE = "lo"

// roceNetdev returns netdevRoCE's interface index, 0 if the machine has
// no such device (the GIDs are then on none).
func roceNetdev() (string, uint32) {
	ifc, err := net.InterfaceByName(netdevRoCE)
	if err != nil || ifc.Index <= 0 {
		return "", 0
	}
	return netdevRoCE, uint32(ifc.Index)
}

// Name is the device's name in the model ("sim0").
func (d *sysfsDevice) Name() string { return d.Attr.Name }

// IBName is the device's name in the sysfs tree and so in libibverbs: the
// Alias when set, else the model's name.
func (d *sysfsDevice) IBName() string {
	if d.Alias != "" {
		return d.Alias
	}
	return d.Attr.Name
}

// UverbsName is the name of the device's uverbs node ("uverbs0").
func (d *sysfsDevice) UverbsName() string { return "uverbs" + strconv.Itoa(d.Index) }

// nameDevices sets the names libibverbs sees, as envNames (the value v)
// chooses.
func nameDevices(devs []sysfsDevice, v string) error {
	switch v {
	case "", namesModel:
		return nil
	case namesMLX5:
		for i := range devs {
			devs[i].Alias = "mlx5_" + strconv.Itoa(devs[i].Index)
		}
		return nil
	}
	return fmt.Errorf("emulate: %s=%q: want %s or %s: %w", envNames, v, namesModel, namesMLX5, ctx.ErrInvalidArgument)
}

// describeFabric queries every device of f through its provider door and
// returns them in order, the first as uverbs0.
func describeFabric(f *sim.Fabric) ([]sysfsDevice, error) {
	infos, err := simadopt.Provider(f).Devices()
	if err != nil {
		return nil, fmt.Errorf("emulate: list the software HCA's devices: %w", err)
	}
	out := make([]sysfsDevice, 0, len(infos))
	for i, info := range infos {
		d, err := describe(f, info.Name)
		if err != nil {
			return nil, err
		}
		d.Index = i
		out = append(out, d)
	}
	return out, nil
}

func describe(f *sim.Fabric, name string) (d sysfsDevice, err error) {
	pd, err := simadopt.Provider(f).OpenDevice(name)
	if err != nil {
		return d, fmt.Errorf("emulate: open %q: %w", name, err)
	}
	defer func() { err = errors.Join(err, pd.Close()) }()
	if d.Attr, err = pd.Query(); err != nil {
		return d, fmt.Errorf("emulate: query %q: %w", name, err)
	}
	for p := uint8(1); p <= d.Attr.PhysPortCount; p++ {
		pa, err := pd.QueryPort(p)
		if err != nil {
			return d, fmt.Errorf("emulate: query %q port %d: %w", name, p, err)
		}
		gids, err := pd.QueryGIDs(p)
		if err != nil {
			return d, fmt.Errorf("emulate: query the GIDs of %q port %d: %w", name, p, err)
		}
		if pa.LinkLayer == ctx.LinkLayerEthernet {
			var ifindex uint32
			if d.Netdev, ifindex = roceNetdev(); ifindex != 0 {
				for i := range gids {
					if gids[i].GID != ([16]byte{}) {
						gids[i].NetdevIfindex = ifindex
					}
				}
			}
		}
		d.Ports = append(d.Ports, pa)
		d.GIDs = append(d.GIDs, gids)
	}
	return d, nil
}

// gidAt returns the entry at index i of a port's table, ok false for an
// empty slot.
func (d *sysfsDevice) gidAt(port uint8, i int) (ctx.GIDEntry, bool) {
	if port < 1 || int(port) > len(d.GIDs) {
		return ctx.GIDEntry{}, false
	}
	for _, e := range d.GIDs[port-1] {
		if e.Index == i {
			return e, true
		}
	}
	return ctx.GIDEntry{}, false
}

// firmwareVersion returns the device's firmware version as the three
// numbers mlx5 packs into fw_ver (major.minor.subminor), all zero when the
// model's version is not of that form.
func firmwareVersion(s string) (major, minor, sub uint16) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return 0, 0, 0
	}
	var n [3]uint16
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return 0, 0, 0
		}
		n[i] = uint16(v)
	}
	return n[0], n[1], n[2]
}

// fwVerString is the version as libmlx5 prints fw_ver and mlx5 writes it
// to sysfs.
func fwVerString(s string) string {
	a, b, c := firmwareVersion(s)
	return fmt.Sprintf("%d.%d.%04d", a, b, c)
}

// guidString is a GUID as sysfs writes node_guid: four groups of four hex
// digits.
func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, (g>>32)&0xffff, (g>>16)&0xffff, g&0xffff)
}

// gidString is a GID as sysfs writes ports/N/gids/I: eight groups of four
// hex digits.
func gidString(g ctx.GID) string {
	var b strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%04x", binary.BigEndian.Uint16(g[i:]))
	}
	return b.String()
}

var portStateNames = map[ctx.PortState]string{
	ctx.PortStateNop: "NOP", ctx.PortStateDown: "DOWN", ctx.PortStateInit: "INIT",
	ctx.PortStateArmed: "ARMED", ctx.PortStateActive: "ACTIVE", ctx.PortStateActiveDefer: "ACTIVE_DEFER",
}

// Physical port states (enum ib_port_phys_state).
const (
	physStateDisabled = 3
	physStateLinkUp   = 5
)

func physState(s ctx.PortState) uint8 {
	if s == ctx.PortStateActive || s == ctx.PortStateActiveDefer {
		return physStateLinkUp
	}
	return physStateDisabled
}

var physStateNames = map[uint8]string{physStateDisabled: "Disabled", physStateLinkUp: "LinkUp"}

// Port capability bits (ib_uverbs_query_port_cap_flags) the model's ports
// report: the connection manager, and on Ethernet GIDs made from IP
// addresses.
const (
	portCapCM          = 1 << 16
	portCapIPBasedGIDs = 1 << 26
)

func portCapFlags(ll ctx.LinkLayer) uint32 {
	if ll == ctx.LinkLayerEthernet {
		return portCapCM | portCapIPBasedGIDs
	}
	return portCapCM
}

// rateString is the port's rate as sysfs writes ports/N/rate.
func rateString(speed uint32, width uint8) string {
	lanes := map[uint8]int{1: 1, 2: 4, 4: 8, 8: 12, 16: 2}[width]
	speeds := map[uint32]struct {
		tenthGbps int
		name      string
	}{
		1: {25, "SDR"}, 2: {50, "DDR"}, 4: {100, "QDR"}, 8: {100, "FDR10"},
		16: {140, "FDR"}, 32: {250, "EDR"}, 64: {500, "HDR"}, 128: {1000, "NDR"}, 256: {2000, "XDR"},
	}
	s, ok := speeds[speed]
	if !ok || lanes == 0 {
		return "0 GB/sec"
	}
	total := s.tenthGbps * lanes
	num := strconv.Itoa(total / 10)
	if total%10 != 0 {
		num += "." + strconv.Itoa(total%10)
	}
	return fmt.Sprintf("%s Gb/sec (%dX %s)", num, lanes, s.name)
}

// sysfsFiles returns every file of the tree, by path relative to its root.
func sysfsFiles(devs []sysfsDevice, cdev devNumber) map[string]string {
	files := map[string]string{}
	put := func(path, value string) { files[path] = value + "\n" }
	put("class/infiniband_verbs/abi_version", strconv.Itoa(uverbsABIVersion))
	for i := range devs {
		d := &devs[i]
		uv := "class/infiniband_verbs/" + d.UverbsName() + "/"
		put(uv+"ibdev", d.IBName())
		put(uv+"abi_version", strconv.Itoa(mlx5ABIVersion))
		put(uv+"dev", cdev.String())

		ib := "class/infiniband/" + d.IBName() + "/"
		put(ib+"node_type", "1: CA")
		put(ib+"node_guid", guidString(d.Attr.NodeGUID))
		put(ib+"sys_image_guid", guidString(d.Attr.NodeGUID))
		put(ib+"fw_ver", fwVerString(d.Attr.FirmwareVersion))
		put(ib+"hca_type", fmt.Sprintf("MT%d", d.Attr.VendorPartID))
		put(ib+"hw_rev", "0x0")
		put(ib+"board_id", boardID)
		put(ib+"node_desc", "mlx5kit software HCA "+d.Name())
		put(ib+"device/vendor", fmt.Sprintf("0x%04x", pciVendorMellanox))
		put(ib+"device/device", fmt.Sprintf("0x%04x", d.Attr.VendorPartID))
		put(ib+"device/numa_node", "-1")
		put(ib+"device/modalias", fmt.Sprintf("pci:v%08Xd%08Xsv%08Xsd%08Xbc02sc07i00",
			pciVendorMellanox, d.Attr.VendorPartID, pciVendorMellanox, 0))
		for p, pa := range d.Ports {
			port := ib + "ports/" + strconv.Itoa(p+1) + "/"
			put(port+"state", fmt.Sprintf("%d: %s", pa.State, portStateNames[pa.State]))
			ps := physState(pa.State)
			put(port+"phys_state", fmt.Sprintf("%d: %s", ps, physStateNames[ps]))
			put(port+"lid", fmt.Sprintf("0x%x", pa.LID))
			put(port+"sm_lid", fmt.Sprintf("0x%x", pa.SMLID))
			put(port+"lid_mask_count", strconv.Itoa(int(pa.LMC)))
			put(port+"sm_sl", "0")
			put(port+"cap_mask", fmt.Sprintf("0x%08x", portCapFlags(pa.LinkLayer)))
			put(port+"rate", rateString(pa.ActiveSpeed, pa.ActiveWidth))
			put(port+"link_layer", pa.LinkLayer.String())
			for k := 0; k < pa.PKeyTableLen; k++ {
				pkey := "0x0000"
				if k == 0 {
					pkey = "0xffff"
				}
				put(port+"pkeys/"+strconv.Itoa(k), pkey)
			}
			for k := 0; k < pa.GIDTableLen; k++ {
				e, _ := d.gidAt(uint8(p+1), k)
				put(port+"gids/"+strconv.Itoa(k), gidString(e.GID))
				// InfiniBand ports have no GID types to tell: without
				// gid_attrs libibverbs takes every GID as type IB.
				if pa.LinkLayer == ctx.LinkLayerEthernet {
					typ := "IB/RoCE v1"
					if e.Type == ctx.GIDTypeRoCEv2 {
						typ = "RoCE v2"
					}
					put(port+"gid_attrs/types/"+strconv.Itoa(k), typ)
					if e.NetdevIfindex != 0 {
						put(port+"gid_attrs/ndevs/"+strconv.Itoa(k), d.Netdev)
					}
				}
			}
		}
	}
	return files
}

// writeSysfs writes the sysfs tree libibverbs reads a ConnectX's devices
// from (with SYSFS_PATH naming dir) for devs into dir, which must be empty
// or absent: class/infiniband_verbs with one uverbsN entry per device
// (ibdev, abi_version and dev, the character device number cdev that the
// device node's descriptors report), and class/infiniband/<name> with the
// node attributes, the PCI identity (device/modalias) and every port's
// state, LID, link layer, P_Keys, GIDs and, on Ethernet, GID types and
// network devices.
func writeSysfs(dir string, devs []sysfsDevice, cdev devNumber) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("emulate: write the sysfs tree into %s: the directory is not empty: %w", dir, fs.ErrExist)
	}
	files := sysfsFiles(devs, cdev)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("emulate: write the sysfs tree: %w", err)
		}
		if err := os.WriteFile(full, []byte(files[p]), 0o444); err != nil {
			return fmt.Errorf("emulate: write the sysfs tree: %w", err)
		}
	}
	return nil
}

// treeDigest names a tree by its content, so that processes describing the
// same devices share one.
func treeDigest(devs []sysfsDevice, cdev devNumber) string {
	files := sysfsFiles(devs, cdev)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		fmt.Fprintf(h, "%s\x00%s\x00", p, files[p])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// sharedSysfs returns a directory holding the tree for devs under base,
// writing it the first time: base/sysfs-<digest of the content>. The tree
// is written beside it and renamed into place, so that processes starting
// together never see half of it.
func sharedSysfs(base string, devs []sysfsDevice, cdev devNumber) (string, error) {
	dir := filepath.Join(base, "sysfs-"+treeDigest(devs, cdev))
	if _, err := os.Stat(filepath.Join(dir, "class", "infiniband_verbs", "abi_version")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", fmt.Errorf("emulate: create %s: %w", base, err)
	}
	tmp, err := os.MkdirTemp(base, ".sysfs-")
	if err != nil {
		return "", fmt.Errorf("emulate: %w", err)
	}
	if err := writeSysfs(tmp, devs, cdev); err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("emulate: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.RemoveAll(tmp)
		// Another process renamed the same tree into place first.
		if _, serr := os.Stat(filepath.Join(dir, "class", "infiniband_verbs", "abi_version")); serr == nil {
			return dir, nil
		}
		return "", fmt.Errorf("emulate: %w", err)
	}
	return dir, nil
}
