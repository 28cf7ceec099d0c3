//go:build cgo && linux

package verbs

/*
#cgo LDFLAGS: -libverbs -lmlx5
#include <stdlib.h>
#include "mlx5kit_verbs.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/devattr"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
	"golang.org/x/sys/unix"
)

// Device is an open mlx5 device: a struct ibv_context together with the
// mlx5dv attributes read when it was opened. Its methods are control-plane
// calls and safe for concurrent use. Close destroys every object still
// created from it (QPs, SRQs, address handles, CQs, MRs, PDs, in that
// order) before closing the device.
type Device struct {
	mu     sync.Mutex
	c      *C.struct_ibv_context
	name   string
	guid   uint64
	dv     DVAttr
	closed bool

	// What send queues are sized against, read at Open (see
	// sendQueueDevice): atomic_cap is not IBV_ATOMIC_NONE, max_qp_wr,
	// max_sge.
	atomics bool
	maxQPWR uint32
	maxSGE  uint32
	// shutUpBF: MLX5_SHUT_UP_BF is set (and not "0"), as rdma-core reads
	// it: no QP uses BlueFlame.
	shutUpBF bool

	// Live objects, for Close and for resolving async events.
	pds  map[*ProtectionDomain]struct{}
	cqs  map[unsafe.Pointer]*CompletionQueue // by struct ibv_cq *
	srqs map[unsafe.Pointer]*SharedReceiveQueue
	qps  map[*QueuePair]struct{}
	mrs  map[*MemoryRegion]struct{}
	ahs  map[*AddressHandle]struct{}

	watchers map[*AsyncWatcher]struct{}

	// probeMu serializes the probe; probed is kept once it succeeded
	// (probeDone), and a failed probe runs again on the next call.
	probeMu   sync.Mutex
	probeDone bool
	probed    probeResult
	// dcInitRdAtomic is probeResult.dcInitRdAtomic once the probe has
	// run, read under mu by the checks of a modify (modifyLimits).
	dcInitRdAtomic uint32

	// mem defers the release of what the data plane writes (extalloc.go).
	mem deviceMemory
}

// ListDevices returns every RDMA device ibv_get_device_list reports, with
// MLX5 set on those the mlx5 provider drives. A machine without the RDMA
// subsystem (no /sys/class/infiniband_verbs, ENOSYS) has no devices: the
// result is empty and the error nil.
func ListDevices() ([]DeviceListing, error) {
	list, _, err := listDevices()
	return list, err
}

// NoDeviceReason returns "" when an mlx5 device is present, and otherwise
// one line saying why there is none (no RDMA subsystem, no RDMA device,
// devices that are not mlx5, or the error of ibv_get_device_list).
func NoDeviceReason() string {
	list, why, err := listDevices()
	if err != nil {
		return err.Error()
	}
	var others []string
	for _, d := range list {
		if d.MLX5 {
			return ""
		}
		others = append(others, d.Name)
	}
	if len(others) > 0 {
		return "RDMA devices present but none is mlx5 (" + strings.Join(others, ", ") + ")"
	}
	return why
}

// listDevices also returns why the list is empty when it can tell.
func listDevices() ([]DeviceListing, string, error) {
	var n C.int
	list, errno := C.mk_get_device_list(&n)
	if list == nil {
		if errors.Is(errno, syscall.ENOSYS) {
			return nil, "ibv_get_device_list: ENOSYS (no RDMA subsystem: /sys/class/infiniband_verbs is missing or its ABI is unsupported)", nil
		}
		return nil, "", ptrError("ibv_get_device_list", "", errno)
	}
	defer C.ibv_free_device_list(list)
	out := make([]DeviceListing, 0, int(n))
	for i := 0; i < int(n); i++ {
		d := C.mk_device_at(list, C.int(i))
		out = append(out, DeviceListing{
			Name:     C.GoString(C.ibv_get_device_name(d)),
			NodeGUID: be64(uint64(C.ibv_get_device_guid(d))),
			NodeType: C.GoString(C.ibv_node_type_str(d.node_type)),
			MLX5:     bool(C.mlx5dv_is_supported(d)),
		})
	}
	why := ""
	if len(out) == 0 {
		why = "ibv_get_device_list: no RDMA devices"
	}
	return out, why, nil
}

// be64 converts a big-endian 64-bit value as it sits in memory (a __be64
// read into a Go integer) to host order.
func be64(v uint64) uint64 {
	var b [8]byte
	*(*uint64)(unsafe.Pointer(&b)) = v
	return binary.BigEndian.Uint64(b[:])
}

// be32 is be64 for a __be32.
func be32(v uint32) uint32 {
	var b [4]byte
	*(*uint32)(unsafe.Pointer(&b)) = v
	return binary.BigEndian.Uint32(b[:])
}

// Open opens the named device, or the first mlx5 device when name is "".
// A device that exists but is not mlx5 is refused with an error wrapping
// ErrNotMLX5; a name that does not exist with one wrapping ctx.ErrNotFound;
// no mlx5 device at all with one wrapping ctx.ErrNoDevice. A big-endian
// host is refused with one wrapping ctx.ErrNotSupported.
func Open(name string) (*Device, error) {
	if err := checkHostByteOrder(binary.NativeEndian.Uint16([]byte{1, 0}) == 1); err != nil {
		return nil, err
	}
	var n C.int
	list, errno := C.mk_get_device_list(&n)
	if list == nil {
		if errors.Is(errno, syscall.ENOSYS) {
			return nil, noDevice(name, "no RDMA subsystem (ENOSYS)")
		}
		return nil, ptrError("ibv_get_device_list", "", errno)
	}
	defer C.ibv_free_device_list(list)

	var dev *C.struct_ibv_device
	var names []string
	for i := 0; i < int(n); i++ {
		d := C.mk_device_at(list, C.int(i))
		dn := C.GoString(C.ibv_get_device_name(d))
		names = append(names, dn)
		if name == "" && dev == nil && bool(C.mlx5dv_is_supported(d)) {
			dev = d
		}
		if name != "" && dn == name {
			dev = d
		}
	}
	if dev == nil {
		seen := "no RDMA devices"
		if len(names) > 0 {
			seen = "devices: " + strings.Join(names, ", ")
		}
		return nil, noDevice(name, seen)
	}
	devName := C.GoString(C.ibv_get_device_name(dev))
	if !bool(C.mlx5dv_is_supported(dev)) {
		return nil, &VerbError{Verb: "mlx5dv_is_supported", Detail: fmt.Sprintf("%q", devName), Sentinel: ErrNotMLX5}
	}
	c, errno := C.ibv_open_device(dev)
	if c == nil {
		return nil, ptrError("ibv_open_device", fmt.Sprintf("%q", devName), errno)
	}
	d := &Device{
		c:        c,
		name:     devName,
		guid:     be64(uint64(C.ibv_get_device_guid(dev))),
		pds:      map[*ProtectionDomain]struct{}{},
		cqs:      map[unsafe.Pointer]*CompletionQueue{},
		srqs:     map[unsafe.Pointer]*SharedReceiveQueue{},
		qps:      map[*QueuePair]struct{}{},
		mrs:      map[*MemoryRegion]struct{}{},
		ahs:      map[*AddressHandle]struct{}{},
		watchers: map[*AsyncWatcher]struct{}{},
	}
	dv, err := d.queryDV()
	if err == nil {
		err = setNonblock("async event fd of "+devName, int(c.async_fd))
	}
	var ax C.struct_ibv_device_attr_ex
	if err == nil {
		ax, err = d.queryDeviceEx()
	}
	if err != nil {
		C.ibv_close_device(c)
		return nil, err
	}
	d.dv = dv
	d.atomics = ax.orig_attr.atomic_cap != C.IBV_ATOMIC_NONE
	d.maxQPWR, d.maxSGE = uint32(ax.orig_attr.max_qp_wr), uint32(ax.orig_attr.max_sge)
	d.shutUpBF = shutUpBlueFlame(os.LookupEnv(envShutUpBF))
	d.deferClose(c)
	return d, nil
}

// checkHostByteOrder refuses a big-endian host. The data plane (prm,
// wqebuilder, monocq, transport) writes WQEs, doorbell records and
// register words, and reads CQEs, with unconditional byte swaps to and
// from the device's big-endian formats: right on a little-endian host
// only. On a big-endian one every field would reach the device
// byte-reversed (and the software HCA, which shares those helpers, would
// not notice).
func checkHostByteOrder(littleEndian bool) error {
	if littleEndian {
		return nil
	}
	return &VerbError{Verb: "ibv_open_device", Detail: "big-endian host: the data plane's device formats assume a little-endian one", Sentinel: ctx.ErrNotSupported}
}

// envShutUpBF is rdma-core's switch for BlueFlame copies.
const envShutUpBF = "MLX5_SHUT_UP_BF"

// shutUpBlueFlame reads MLX5_SHUT_UP_BF as rdma-core does: set and not
// "0" turns BlueFlame off.
func shutUpBlueFlame(v string, set bool) bool { return set && v != "0" }

// rdma-core's switches for WQE signatures: set to any value, even "0",
// mlx5_create_qp creates RC, UD and DCI QPs with MLX5_QP_FLAG_SIGNATURE
// and mlx5_create_srq creates SRQs with MLX5_SRQ_FLAG_SIGNATURE. The
// device then checks the signature byte of every send WQE's control
// segment and expects a struct mlx5_rwqe_sig in front of the data
// segments of every receive WQE; the data plane writes neither (signature
// 0, data segments from the start of the slot), so every WQE would fail.
const (
	envQPSignature  = "MLX5_QP_SIGNATURE"
	envSRQSignature = "MLX5_SRQ_SIGNATURE"
)

// wqSignatureRefusal returns the error of a create that rdma-core would
// make with WQE signatures because env is set, or nil.
func wqSignatureRefusal(verb, what, env string) error {
	if _, set := os.LookupEnv(env); !set {
		return nil
	}
	return &VerbError{Verb: verb, Detail: fmt.Sprintf("%s: %s is set: rdma-core would create it with WQE signatures, which the data plane does not write", what, env),
		Sentinel: ctx.ErrNotSupported}
}

// sendQueueDevice returns what the device's send queues are sized against
// (probing the largest send WQE the first time); its MaxSQDescSize is 0
// when the probe failed.
func (d *Device) sendQueueDevice() sqsize.Device {
	return sqsize.Device{MaxSQDescSize: d.probe().maxSendWQESize, MaxSendWQEBB: d.maxQPWR, MaxSGE: d.maxSGE, Atomics: d.atomics}
}

func noDevice(name, seen string) error {
	if name == "" {
		return &VerbError{Verb: "ibv_get_device_list", Detail: "no mlx5 device (" + seen + ")", Errno: syscall.ENODEV, Sentinel: ctx.ErrNoDevice}
	}
	return &VerbError{Verb: "ibv_get_device_list", Detail: fmt.Sprintf("no device named %q (%s)", name, seen), Errno: syscall.ENODEV, Sentinel: ctx.ErrNotFound}
}

func setNonblock(what string, fd int) error {
	if err := unix.SetNonblock(fd, true); err != nil {
		var en syscall.Errno
		errors.As(err, &en)
		return errnoError("fcntl(O_NONBLOCK)", what, en)
	}
	return nil
}

// Name returns the device name, e.g. "mlx5_0".
func (d *Device) Name() string { return d.name }

// NodeGUID returns the node GUID in host byte order.
func (d *Device) NodeGUID() uint64 { return d.guid }

// Kind reports ctx.KindHardware.
func (d *Device) Kind() ctx.Kind { return ctx.KindHardware }

// emulatedIdle is the round of the model behind the emulated kernel
// (SetIdle), nil while there is none.
var emulatedIdle atomic.Pointer[func()]

// SetIdle makes fn what ctx.Context.Idle runs on a device opened after the
// call: cgo/emulate sets the round of its model when the emulation goes on
// (every device libibverbs lists is then one of the model's); nil clears it.
func SetIdle(fn func()) {
	if fn == nil {
		emulatedIdle.Store(nil)
		return
	}
	emulatedIdle.Store(&fn)
}

// IdleFunc returns what ctx.Context.Idle runs (provider.IdleDevice): the
// emulated kernel's model's round, or nil on a NIC.
func (d *Device) IdleFunc() func() {
	if fn := emulatedIdle.Load(); fn != nil {
		return *fn
	}
	return nil
}

// DVAttr returns the mlx5dv_query_device attributes read at Open.
func (d *Device) DVAttr() DVAttr { return d.dv }

// errClosed is the error of a call on a closed device or object.
func errClosed(what string) error {
	return &VerbError{Verb: what, Sentinel: ctx.ErrClosed}
}

// use locks the device and checks that it is open.
func (d *Device) use(verb string) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return errClosed(verb)
	}
	return nil
}

func (d *Device) queryDV() (DVAttr, error) {
	var a C.struct_mlx5dv_context
	var dcReq, dcResp C.uint64_t
	if ret, errno := C.mk_query_dv(d.c, C.uint64_t(dvMaskAll), &a, &dcReq, &dcResp); ret != 0 {
		return DVAttr{}, retError("mlx5dv_query_device", fmt.Sprintf("%q", d.name), int(ret), errno)
	}
	dv := DVAttr{
		Version:                      uint8(a.version),
		Flags:                        uint64(a.flags),
		CompMask:                     uint64(a.comp_mask),
		CQECompressionMaxNum:         uint32(a.cqe_comp_caps.max_num),
		CQECompressionFormats:        uint32(a.cqe_comp_caps.supported_format),
		SoftwareParsingOffloads:      uint32(a.sw_parsing_caps.sw_parsing_offloads),
		SoftwareParsingQPTypes:       uint32(a.sw_parsing_caps.supported_qpts),
		StridingRQMinStrideLogBytes:  uint32(a.striding_rq_caps.min_single_stride_log_num_of_bytes),
		StridingRQMaxStrideLogBytes:  uint32(a.striding_rq_caps.max_single_stride_log_num_of_bytes),
		StridingRQMinWQELogStrides:   uint32(a.striding_rq_caps.min_single_wqe_log_num_of_strides),
		StridingRQMaxWQELogStrides:   uint32(a.striding_rq_caps.max_single_wqe_log_num_of_strides),
		StridingRQSupportedQPTypes:   uint32(a.striding_rq_caps.supported_qpts),
		TunnelOffloads:               uint32(a.tunnel_offloads_caps),
		MaxDynamicBlueFlameRegisters: uint32(a.max_dynamic_bfregs),
		MaxClockInfoUpdateNanos:      uint64(a.max_clock_info_update_nsec),
		FlowActionFlags:              uint32(a.flow_action_flags),
		DCODPCaps:                    uint32(a.dc_odp_caps),
		NumLAGPorts:                  uint8(a.num_lag_ports),
		DCIStreamsMaxLogConcurrent:   uint8(a.dci_streams_caps.max_log_num_concurent),
		DCIStreamsMaxLogErrored:      uint8(a.dci_streams_caps.max_log_num_errored),
		MaxWRMemcpyLength:            uint64(a.max_wr_memcpy_length),
		SignatureBlockSizes:          uint64(a.sig_caps.block_size),
		SignatureBlockProt:           uint32(a.sig_caps.block_prot),
		SignatureT10DIFBG:            uint16(a.sig_caps.t10dif_bg),
		SignatureCRCTypes:            uint16(a.sig_caps.crc_type),
		CryptoFailedSelftests:        uint16(a.crypto_caps.failed_selftests),
		CryptoEngines:                uint8(a.crypto_caps.crypto_engines),
		CryptoWrappedImportMethod:    uint8(a.crypto_caps.wrapped_import_method),
		CryptoLogMaxNumDEKs:          uint8(a.crypto_caps.log_max_num_deks),
		CryptoFlags:                  uint32(a.crypto_caps.flags),
	}
	if dv.Has(devattr.DVMaskMaxDCRdAtomic) {
		dv.MaxDCRequesterRdAtomic, dv.MaxDCResponderRdAtomic = uint64(dcReq), uint64(dcResp)
	}
	return dv, nil
}

// QueryDV queries mlx5dv_query_device again.
func (d *Device) QueryDV() (DVAttr, error) {
	if err := d.use("mlx5dv_query_device"); err != nil {
		return DVAttr{}, err
	}
	defer d.mu.Unlock()
	return d.queryDV()
}

func (d *Device) queryDeviceEx() (C.struct_ibv_device_attr_ex, error) {
	var a C.struct_ibv_device_attr_ex
	if ret, errno := C.mk_query_device_ex(d.c, &a); ret != 0 {
		return a, retError("ibv_query_device_ex", fmt.Sprintf("%q", d.name), int(ret), errno)
	}
	return a, nil
}

// Query returns the device attributes: ibv_query_device_ex, the mlx5dv
// attributes (DC's own read/atomic depths among them, with rdma-core 47
// and later; before it, DC's initiator depth is probed with a throw-away
// DCI), and what only creating objects can tell (DC support, the
// largest send WQE and with it the send-queue limits of each QP type, the
// BlueFlame size, 128-byte CQEs), probed once with throw-away objects the
// first time Query or CreateQueuePair needs them.
func (d *Device) Query() (ctx.DeviceAttr, error) {
	if err := d.use("ibv_query_device_ex"); err != nil {
		return ctx.DeviceAttr{}, err
	}
	a, err := d.queryDeviceEx()
	d.mu.Unlock()
	if err != nil {
		return ctx.DeviceAttr{}, err
	}
	p := d.probe()
	if p.err != nil {
		return ctx.DeviceAttr{}, p.err
	}
	o := &a.orig_attr
	sq := d.sendQueueDevice()
	attr := ctx.DeviceAttr{
		Name:              d.name,
		FirmwareVersion:   C.GoString(&o.fw_ver[0]),
		NodeGUID:          be64(uint64(o.node_guid)),
		VendorID:          uint32(o.vendor_id),
		VendorPartID:      uint32(o.vendor_part_id),
		PhysPortCount:     uint8(o.phys_port_cnt),
		MaxQP:             uint32(o.max_qp),
		MaxQPWR:           uint32(o.max_qp_wr),
		MaxSGE:            uint32(o.max_sge),
		MaxCQ:             uint32(o.max_cq),
		MaxCQE:            uint32(o.max_cqe),
		MaxMR:             uint32(o.max_mr),
		MaxMRSize:         uint64(o.max_mr_size),
		MaxPD:             uint32(o.max_pd),
		MaxQPRdAtomic:     uint32(o.max_qp_rd_atom),
		MaxQPInitRdAtomic: uint32(o.max_qp_init_rd_atom),
		MaxSRQ:            uint32(o.max_srq),
		MaxSRQWR:          uint32(o.max_srq_wr),
		MaxSRQSGE:         uint32(o.max_srq_sge),
		MaxAH:             uint32(o.max_ah),
		MaxInline:         p.maxInline,
		AtomicHCA:         o.atomic_cap == C.IBV_ATOMIC_HCA || o.atomic_cap == C.IBV_ATOMIC_GLOB,
		// Masked atomics are a PRM capability (the atomic HCA caps) that
		// neither ibv_query_device_ex nor mlx5dv_query_device reports.
		MaskedAtomics:  ctx.SupportUnknown,
		DC:             p.dc,
		CQE128:         p.cqe128,
		CQECompression: d.dv.CQECompression(),
		// The checksum format, like the hash one, needs sessions at all.
		CQECompressionChecksum: d.dv.CQECompressionMaxNum > 0 && d.dv.CQECompressionFormats&devattr.CQECompressionFormatChecksum != 0,
		MaxCQECompression:      d.dv.CQECompressionMaxNum,
		CQEPadding:             d.dv.Flags&devattr.DVFlagCQE128Padding != 0,
		CompVectors:            uint32(d.c.num_comp_vectors),
		BlueFlameSize:          p.blueFlameSize,
		MaxSendWQESize:         p.maxSendWQESize,
		MaxRecvSGE:             p.maxRecvSGE,
		SendLimitsRC:           sqsize.LimitsOf(ctx.QPTypeRC, sq),
		SendLimitsUD:           sqsize.LimitsOf(ctx.QPTypeUD, sq),
		SendLimitsDCI:          sqsize.LimitsOf(ctx.QPTypeDCI, sq),
	}
	if !p.dc {
		attr.SendLimitsDCI = ctx.SendQueueLimits{}
	}
	attr.MaxDCInitRdAtomic, attr.MaxDCRdAtomic = dcRdAtomic(d.dv)
	if attr.MaxDCInitRdAtomic == 0 {
		attr.MaxDCInitRdAtomic = p.dcInitRdAtomic
	}
	return attr, nil
}

// dcRdAtomic returns DC's read/atomic depths as ctx.DeviceAttr carries
// them (0 where mlx5dv_query_device does not report them): the initiator's
// is the one the kernel bounds a DCI's max_rd_atomic by. validate_rd_atomic
// in mlx5_ib compares it with 1 << log_max_ra_res_dc, which rdma-core
// reports as max_dc_init_rd_atom (DVAttr.MaxDCResponderRdAtomic), as it
// compares an RC QP's with 1 << log_max_ra_res_qp, reported as
// max_qp_init_rd_atom; 1 << log_max_ra_req_dc (max_dc_rd_atom) is the
// other depth, as max_qp_rd_atom is for RC.
func dcRdAtomic(dv DVAttr) (initiator, responder uint32) {
	if !dv.Has(devattr.DVMaskMaxDCRdAtomic) {
		return 0, 0
	}
	return uint32(min(dv.MaxDCResponderRdAtomic, math.MaxUint32)), uint32(min(dv.MaxDCRequesterRdAtomic, math.MaxUint32))
}

// QueryExtended returns the ibv_query_device_ex attributes that
// ctx.DeviceAttr does not carry.
func (d *Device) QueryExtended() (ExtendedAttr, error) {
	if err := d.use("ibv_query_device_ex"); err != nil {
		return ExtendedAttr{}, err
	}
	a, err := d.queryDeviceEx()
	d.mu.Unlock()
	if err != nil {
		return ExtendedAttr{}, err
	}
	o := &a.orig_attr
	return ExtendedAttr{
		HardwareVersion:         uint32(o.hw_ver),
		SysImageGUID:            be64(uint64(o.sys_image_guid)),
		PageSizeCap:             uint64(o.page_size_cap),
		DeviceCapFlags:          uint32(o.device_cap_flags),
		DeviceCapFlagsEx:        uint64(a.device_cap_flags_ex),
		MaxSGERead:              uint32(o.max_sge_rd),
		MaxResRdAtomic:          uint32(o.max_res_rd_atom),
		MaxMemoryWindows:        uint32(o.max_mw),
		MaxMcastGroups:          uint32(o.max_mcast_grp),
		MaxPKeys:                uint16(o.max_pkeys),
		LocalCAAckDelay:         uint8(o.local_ca_ack_delay),
		AtomicCap:               uint32(o.atomic_cap),
		CompletionTimestampMask: uint64(a.completion_timestamp_mask),
		HCACoreClockKHz:         uint64(a.hca_core_clock),
		ODPGeneralCaps:          uint64(a.odp_caps.general_caps),
		ODPRCCaps:               uint32(a.odp_caps.per_transport_caps.rc_odp_caps),
		ODPUCCaps:               uint32(a.odp_caps.per_transport_caps.uc_odp_caps),
		ODPUDCaps:               uint32(a.odp_caps.per_transport_caps.ud_odp_caps),
		ODPXRCCaps:              uint32(a.xrc_odp_caps),
		PCIAtomicFetchAdd:       uint16(a.pci_atomic_caps.fetch_add),
		PCIAtomicSwap:           uint16(a.pci_atomic_caps.swap),
		PCIAtomicCompareSwap:    uint16(a.pci_atomic_caps.compare_swap),
		MaxDeviceMemory:         uint64(a.max_dm_size),
		PhysPortCountEx:         uint32(a.phys_port_cnt_ex),
		MaxCQModerationCount:    uint16(a.cq_mod_caps.max_cq_count),
		MaxCQModerationUsec:     uint16(a.cq_mod_caps.max_cq_period),
	}, nil
}

// queryPort is ibv_query_port of a port (1-based).
func (d *Device) queryPort(port uint8) (C.struct_ibv_port_attr, error) {
	a, _, err := d.queryPortSpeed(port)
	return a, err
}

// queryPortSpeed is queryPort with the port's active speed: the 32-bit
// active_speed_ex where libibverbs (49 and later) answers it, the 8-bit
// active_speed otherwise (mk_query_port).
func (d *Device) queryPortSpeed(port uint8) (C.struct_ibv_port_attr, uint32, error) {
	var a C.struct_ibv_port_attr
	var speed C.uint32_t
	if ret, errno := C.mk_query_port(d.c, C.uint8_t(port), &a, &speed); ret != 0 {
		return a, 0, retError("ibv_query_port", fmt.Sprintf("%q port %d", d.name, port), int(ret), errno)
	}
	return a, uint32(speed), nil
}

// linkLayer maps the ibv link layer; "unspecified" is InfiniBand, as in
// libibverbs.
func linkLayer(v C.uint8_t) ctx.LinkLayer {
	if v == C.IBV_LINK_LAYER_ETHERNET {
		return ctx.LinkLayerEthernet
	}
	return ctx.LinkLayerInfiniBand
}

// QueryPort returns the attributes of a port (1-based).
func (d *Device) QueryPort(port uint8) (ctx.PortAttr, error) {
	if err := d.use("ibv_query_port"); err != nil {
		return ctx.PortAttr{}, err
	}
	a, speed, err := d.queryPortSpeed(port)
	d.mu.Unlock()
	if err != nil {
		return ctx.PortAttr{}, err
	}
	return ctx.PortAttr{
		Port:         port,
		State:        ctx.PortState(a.state),
		MaxMTU:       ctx.MTU(a.max_mtu),
		ActiveMTU:    ctx.MTU(a.active_mtu),
		LID:          uint16(a.lid),
		SMLID:        uint16(a.sm_lid),
		LMC:          uint8(a.lmc),
		GIDTableLen:  int(a.gid_tbl_len),
		PKeyTableLen: int(a.pkey_tbl_len),
		LinkLayer:    linkLayer(a.link_layer),
		ActiveSpeed:  speed,
		ActiveWidth:  uint8(a.active_width),
	}, nil
}

// gidType maps enum ibv_gid_type to ctx.GIDType.
func gidType(t C.uint32_t) ctx.GIDType {
	switch t {
	case C.IBV_GID_TYPE_IB:
		return ctx.GIDTypeIB
	case C.IBV_GID_TYPE_ROCE_V1:
		return ctx.GIDTypeRoCEv1
	case C.IBV_GID_TYPE_ROCE_V2:
		return ctx.GIDTypeRoCEv2
	}
	return ctx.GIDType(0)
}

func gidEntry(e *C.struct_ibv_gid_entry) GIDTableEntry {
	var g ctx.GID
	copy(g[:], (*[16]byte)(unsafe.Pointer(&e.gid))[:])
	return GIDTableEntry{GIDEntry: ctx.GIDEntry{
		Index:         int(e.gid_index),
		GID:           g,
		Type:          gidType(e.gid_type),
		Port:          uint8(e.port_num),
		NetdevIfindex: uint32(e.ndev_ifindex),
	}}
}

// QueryGIDTable returns every valid GID table entry of every port
// (ibv_query_gid_table), sorted by port and index. On a kernel without the
// GID table command it falls back to ibv_query_gid_ex per index.
func (d *Device) QueryGIDTable() ([]GIDTableEntry, error) {
	if err := d.use("ibv_query_gid_table"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	a, err := d.queryDeviceEx()
	if err != nil {
		return nil, err
	}
	ports := int(a.orig_attr.phys_port_cnt)
	total := 0
	for p := 1; p <= ports; p++ {
		pa, err := d.queryPort(uint8(p))
		if err != nil {
			return nil, err
		}
		total += int(pa.gid_tbl_len)
	}
	if total == 0 {
		return nil, nil
	}
	entries := make([]C.struct_ibv_gid_entry, total)
	n := C.mk_query_gid_table(d.c, &entries[0], C.size_t(total))
	if n == -C.ssize_t(syscall.EOPNOTSUPP) {
		return d.queryGIDsOneByOne(ports)
	}
	if n < 0 {
		return nil, errnoError("ibv_query_gid_table", fmt.Sprintf("%q", d.name), syscall.Errno(-n))
	}
	out := make([]GIDTableEntry, 0, int(n))
	for i := 0; i < int(n); i++ {
		out = append(out, gidEntry(&entries[i]))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Port != out[j].Port {
			return out[i].Port < out[j].Port
		}
		return out[i].Index < out[j].Index
	})
	return out, nil
}

func (d *Device) queryGIDsOneByOne(ports int) ([]GIDTableEntry, error) {
	var out []GIDTableEntry
	for p := 1; p <= ports; p++ {
		pa, err := d.queryPort(uint8(p))
		if err != nil {
			return nil, err
		}
		for i := 0; i < int(pa.gid_tbl_len); i++ {
			var e C.struct_ibv_gid_entry
			ret := C.mk_query_gid_ex(d.c, C.uint32_t(p), C.uint32_t(i), &e)
			if ret == C.ENODATA {
				continue // empty slot
			}
			if ret != 0 {
				return nil, retError("ibv_query_gid_ex", fmt.Sprintf("%q port %d index %d", d.name, p, i), int(ret), nil)
			}
			out = append(out, gidEntry(&e))
		}
	}
	return out, nil
}

// QueryGIDs returns the valid GID table entries of a port, with their
// types (InfiniBand, RoCE v1, RoCE v2), port and network device index.
// A port the device does not have is refused with the EINVAL of
// ibv_query_port (the kernel's rdma_is_port_valid, which refuses it in a
// query of one GID too), not answered with an empty table.
func (d *Device) QueryGIDs(port uint8) ([]ctx.GIDEntry, error) {
	if _, err := d.QueryPort(port); err != nil {
		return nil, err
	}
	all, err := d.QueryGIDTable()
	if err != nil {
		return nil, err
	}
	var out []ctx.GIDEntry
	for _, e := range all {
		if e.Port == port {
			out = append(out, e.GIDEntry)
		}
	}
	return out, nil
}

// QueryGID returns one GID table entry (ibv_query_gid_ex). An empty slot
// is an error wrapping ctx.ErrNotFound (ENODATA).
func (d *Device) QueryGID(port uint8, index int) (GIDTableEntry, error) {
	if err := d.use("ibv_query_gid_ex"); err != nil {
		return GIDTableEntry{}, err
	}
	defer d.mu.Unlock()
	var e C.struct_ibv_gid_entry
	if ret := C.mk_query_gid_ex(d.c, C.uint32_t(port), C.uint32_t(index), &e); ret != 0 {
		return GIDTableEntry{}, retError("ibv_query_gid_ex", fmt.Sprintf("%q port %d index %d", d.name, port, index), int(ret), nil)
	}
	return gidEntry(&e), nil
}

// AsyncEventFD is the device's async event descriptor (non-blocking); it
// becomes readable when ReadAsyncEvent has an event.
func (d *Device) AsyncEventFD() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return -1
	}
	return int(d.c.async_fd)
}

// Close stops the async watchers, destroys every object still open (QPs,
// SRQs, address handles, CQs, MRs, PDs) and closes the device. It is
// idempotent; the first error of a destroy is returned, joined with the
// others.
func (d *Device) Close() error {
	// Stop the watchers first, without the lock (their goroutines take it),
	// until none is left.
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil
		}
		if len(d.watchers) == 0 {
			break // d.mu stays locked
		}
		ws := make([]*AsyncWatcher, 0, len(d.watchers))
		for w := range d.watchers {
			ws = append(ws, w)
		}
		d.mu.Unlock()
		for _, w := range ws {
			w.Stop()
		}
	}
	defer d.mu.Unlock()
	var errs []error
	for qp := range d.qps {
		errs = append(errs, qp.closeLocked())
	}
	for _, s := range d.srqs {
		errs = append(errs, s.closeLocked())
	}
	for ah := range d.ahs {
		errs = append(errs, ah.closeLocked())
	}
	for _, cq := range d.cqs {
		errs = append(errs, cq.closeLocked())
	}
	for mr := range d.mrs {
		errs = append(errs, mr.closeLocked())
	}
	for pd := range d.pds {
		errs = append(errs, pd.closeLocked())
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// ibv_close_device waits until no queue's memory is reachable: it
	// unmaps the UAR pages their registers and doorbells lie in.
	if err := d.closeMemory(); err != nil {
		return err
	}
	d.closed = true
	d.c = nil
	return nil
}
