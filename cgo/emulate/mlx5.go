//go:build cgo && linux

package emulate

/*
#include "uverbs_abi.h"
*/
import "C"

import (
	"encoding/binary"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/mlx5kit/mlx5kit/sim"
)

// What mlx5_ib and the uverbs core answer, from the model's attributes.
// Values the model's provider door does not carry are those of a
// ConnectX-5 with the features the model lacks turned off.
const (
	// maxBfregs is MLX5_MAX_BFREGS: 512 UARs of two bfregs each.
	maxBfregs = 1024
	// bfregsPerUAR is MLX5_NON_FP_BFREGS_PER_UAR.
	bfregsPerUAR = 2
	// uarBFOffset is where the first bfreg's register lies in a UAR page
	// (libmlx5's MLX5_BF_OFFSET; the device's layout).
	uarBFOffset = 0x800
	// maxDynBfregs is MLX5_MAX_DYN_BFREGS, the bfregs mlx5_ib lets a
	// context map one page at a time beyond those it asked for.
	maxDynBfregs = 1024
	// cqeVersion is the newest CQE version the device writes: the model
	// writes version 0 CQEs (the SRQ number where version 1 has the user
	// index), so a context never gets 1.
	cqeVersion = 0
	// cacheLineSize is what the kernel reports of the CPU.
	cacheLineSize = 64
	// localCAAckDelay, maxMessageSize and subnetTimeout are mlx5's.
	localCAAckDelay = 16
	maxMessageSize  = 1 << 30
	subnetTimeout   = 18
	// pageSizeCap is every power of two from 4 KiB.
	pageSizeCap = ^uint64(4096 - 1)
	// maxVLNum is 4 (VL0-VL7) on InfiniBand, as on a ConnectX.
	maxVLNumIB = 4
)

// deviceCapFlags are the IB_DEVICE_* capabilities the model honours, of
// those mlx5_ib_query_device announces on every device: RNR NAKs from the
// responder, the system image GUID and the PORT_ACTIVE event (the model
// raises it when a port comes up, sim.Fabric.SetPortState). The fourth,
// CHANGE_PHY_PORT (a QP's port changed in SQD, a state no QP reaches
// through mlx5_ib or in the model), and those that follow a HCA
// capability (memory windows, XRC, MEM_MGT_EXTENSIONS, the P_Key and
// Q_Key violation counters, automatic path migration, checksum offloads,
// flow steering, end padding) are features the model has not.
const deviceCapFlags = C.IB_UVERBS_DEVICE_RC_RNR_NAK_GEN | C.IB_UVERBS_DEVICE_SYS_IMAGE_GUID |
	C.IB_UVERBS_DEVICE_PORT_ACTIVE_EVENT

// allocUcontext is mlx5_ib_alloc_ucontext: it checks the library's request
// (struct mlx5_ib_alloc_ucontext_req or _req_v2 in the driver data),
// opens the device on the model and returns the context with the
// response. The response declares no dynamic UAR allocation (the ucontext
// gets the static UAR pages it asked for, which libmlx5 maps at once), no
// DEVX, no core clock page and no dump-and-fill key; it offers the clock
// info page (clock_info_versions, see clockPage).
func (k *kernel) allocUcontext(f *ufile, in []byte) (*ucontext, C.struct_mlx5_ib_alloc_ucontext_resp, syscall.Errno) {
	var resp C.struct_mlx5_ib_alloc_ucontext_resp
	if f.uctx != nil {
		return nil, resp, unix.EINVAL
	}
	var req C.struct_mlx5_ib_alloc_ucontext_req_v2
	switch {
	case len(in) == C.mk_alloc_ucontext_req_v0_size:
	case len(in) >= C.mk_alloc_ucontext_req_v2_min:
	default:
		return nil, resp, unix.EINVAL
	}
	copy(bytesOf(&req), in)
	if req.flags&^C.MLX5_IB_ALLOC_UCTX_DEVX != 0 {
		return nil, resp, unix.EOPNOTSUPP
	}
	if req.comp_mask != 0 || req.reserved0 != 0 || req.reserved1 != 0 || req.reserved2 != 0 {
		return nil, resp, unix.EOPNOTSUPP
	}
	total := (uint32(req.total_num_bfregs) + bfregsPerUAR - 1) / bfregsPerUAR * bfregsPerUAR
	if total == 0 || uint32(req.num_low_latency_bfregs) > total-1 {
		return nil, resp, unix.EINVAL
	}
	if req.flags&C.MLX5_IB_ALLOC_UCTX_DEVX != 0 {
		// A device without DEVX user contexts (log_max_uctx 0): the
		// library asks again without it.
		return nil, resp, unix.EINVAL
	}
	if total > maxBfregs {
		return nil, resp, unix.ENOMEM
	}
	dev, err := simadopt.Provider(k.fabric).OpenDevice(f.dev.Name())
	if err != nil {
		return nil, resp, unix.ENODEV
	}
	uc := &ucontext{
		dev:         dev,
		cqeVersion:  min(uint8(req.max_cqe_version), cqeVersion),
		staticPages: int(total) / bfregsPerUAR,
		dynPages:    maxDynBfregs / bfregsPerUAR,
		dynBusy:     map[int]bool{},
	}
	simadopt.SubscribeAsyncEvents(dev, uc.async.post)
	a := &f.dev.Attr
	resp.qp_tab_size = C.__u32(a.MaxQP)
	resp.bf_reg_size = C.__u32(2 * a.BlueFlameSize)
	resp.tot_bfregs = C.__u32(total)
	resp.cache_line_size = cacheLineSize
	resp.max_sq_desc_sz = C.__u16(a.MaxSendWQESize)
	resp.max_rq_desc_sz = C.__u16(a.MaxSGE * 16)
	resp.max_send_wqebb = C.__u32(a.MaxQPWR)
	resp.max_recv_wr = C.__u32(a.MaxQPWR)
	resp.max_srq_recv_wr = C.__u32(a.MaxSRQWR + 1)
	resp.num_ports = C.__u16(a.PhysPortCount)
	resp.cqe_version = C.__u8(uc.cqeVersion)
	resp.cmds_supp_uhw = C.MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE | C.MLX5_USER_CMDS_SUPP_UHW_CREATE_AH
	if len(f.dev.Ports) > 0 && f.dev.Ports[0].LinkLayer == ctx.LinkLayerEthernet {
		// No minimum inline headers on Ethernet (ConnectX-5), off by one
		// as mlx5_ib reports it.
		resp.eth_min_inline = C.MLX5_USER_INLINE_MODE_NONE
	}
	resp.log_uar_size = C.__u32(log2(uint64(k.pageSize)))
	resp.num_uars_per_page = 1
	resp.num_dyn_bfregs = maxDynBfregs
	resp.clock_info_versions = clockInfoVersions
	return uc, resp, 0
}

// writeUcontextResp writes the vendor part of the GET_CONTEXT response,
// as much as the library's buffer holds, with response_length saying how
// much that is.
func writeUcontextResp(resp C.struct_mlx5_ib_alloc_ucontext_resp, addr uintptr, n int) syscall.Errno {
	b := bytesOf(&resp)
	resp.response_length = C.__u32(min(n, len(b)))
	return copyOut(addr, b[:min(n, len(b))])
}

// queryDeviceResp is the core answer to QUERY_DEVICE.
func queryDeviceResp(d *sysfsDevice) C.struct_ib_uverbs_query_device_resp {
	a := &d.Attr
	var r C.struct_ib_uverbs_query_device_resp
	major, minor, sub := firmwareVersion(a.FirmwareVersion)
	r.fw_ver = C.__u64(uint64(major)<<32 | uint64(minor)<<16 | uint64(sub))
	r.node_guid = C.__be64(bigEndian64(a.NodeGUID))
	r.sys_image_guid = r.node_guid
	r.max_mr_size = C.__u64(a.MaxMRSize)
	r.page_size_cap = C.__u64(pageSizeCap)
	r.vendor_id = C.__u32(a.VendorID)
	r.vendor_part_id = C.__u32(a.VendorPartID)
	r.max_qp = C.__u32(a.MaxQP)
	r.max_qp_wr = C.__u32(a.MaxQPWR)
	r.device_cap_flags = deviceCapFlags
	r.max_sge = C.__u32(a.MaxSGE)
	r.max_sge_rd = C.__u32(a.MaxSGE)
	r.max_cq = C.__u32(a.MaxCQ)
	r.max_cqe = C.__u32(a.MaxCQE)
	r.max_mr = C.__u32(a.MaxMR)
	r.max_pd = C.__u32(a.MaxPD)
	r.max_qp_rd_atom = C.__u32(a.MaxQPRdAtomic)
	r.max_qp_init_rd_atom = C.__u32(a.MaxQPInitRdAtomic)
	r.max_res_rd_atom = C.__u32(uint64(a.MaxQPRdAtomic) * uint64(a.MaxQP) & 0xffffffff)
	if a.AtomicHCA {
		r.atomic_cap = C.IBV_ATOMIC_HCA
	}
	r.max_ah = C.__u32(a.MaxAH)
	r.max_srq = C.__u32(a.MaxSRQ)
	r.max_srq_wr = C.__u32(a.MaxSRQWR)
	r.max_srq_sge = C.__u32(a.MaxSRQSGE)
	if len(d.Ports) > 0 {
		r.max_pkeys = C.__u16(d.Ports[0].PKeyTableLen)
	}
	r.local_ca_ack_delay = localCAAckDelay
	r.phys_port_cnt = C.__u8(a.PhysPortCount)
	return r
}

// queryDeviceExResp is the core answer to the extended QUERY_DEVICE:
// completion timestamps (the model stamps the CQEs of a CQ created with
// IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION from its clock, so the device
// reports that clock as mlx5_ib reports a ConnectX's: hca_core_clock its
// frequency in kHz, timestamp_mask the counter's width, here the model's
// 48 bits where mlx5_ib says 63); no on-demand paging, RSS, tag matching,
// CQ moderation or device memory.
func queryDeviceExResp(d *sysfsDevice) C.struct_ib_uverbs_ex_query_device_resp {
	var r C.struct_ib_uverbs_ex_query_device_resp
	r.base = queryDeviceResp(d)
	r.device_cap_flags_ex = C.__u64(deviceCapFlags)
	r.timestamp_mask = C.__u64(sim.ClockMask)
	r.hca_core_clock = C.__u64(sim.ClockKHz)
	return r
}

// mlx5QueryDeviceResp is mlx5_ib's vendor answer to the extended
// QUERY_DEVICE: whole CQEs (no compression), 128-byte CQE padding as the
// model reports it, and scatter-to-CQE on DCTs, which mlx5_ib announces on
// every device (MLX5_IB_QUERY_DEV_RESP_FLAGS_SCAT2CQE_DCT: without it
// libmlx5 drops MLX5_QP_FLAG_SCATTER_CQE from every DCT it creates, and
// the model's DCTs take it, createDCT); nothing else: no multi-packet
// send WQEs, software parsing, striding RQ, tunnel offloads, packet pacing
// or DCI streams, which need QP types or WQEs the model has not.
func mlx5QueryDeviceResp(d *sysfsDevice) C.struct_mlx5_ib_query_device_resp {
	var r C.struct_mlx5_ib_query_device_resp
	if d.Attr.CQEPadding {
		r.flags |= C.MLX5_IB_QUERY_DEV_RESP_FLAGS_CQE_128B_PAD
	}
	r.flags |= C.MLX5_IB_QUERY_DEV_RESP_FLAGS_SCAT2CQE_DCT
	return r
}

// writeMLX5QueryDeviceResp writes the vendor answer into a buffer of n
// bytes at addr: every field that fits, response_length saying how many
// bytes that is (a buffer too short for the header is EINVAL).
func writeMLX5QueryDeviceResp(d *sysfsDevice, addr uintptr, n int) syscall.Errno {
	if n == 0 {
		return 0
	}
	if n < int(C.mk_mlx5_query_device_resp_end(0)) {
		return unix.EINVAL
	}
	r := mlx5QueryDeviceResp(d)
	length := 0
	for i := 0; i < C.mk_mlx5_query_device_resp_nends; i++ {
		if end := int(C.mk_mlx5_query_device_resp_end(C.int(i))); end <= n {
			length = end
		}
	}
	r.response_length = C.__u32(length)
	return copyOut(addr, bytesOf(&r)[:length])
}

// speedNDR is IB_SPEED_NDR, the fastest speed the 8-bit active_speed of
// struct ib_uverbs_query_port_resp holds; XDR is 256.
const speedNDR = 128

// legacySpeed is the active_speed the kernel answers for a port of speed s
// (copy_port_attr_to_resp): NDR for a faster one. The QUERY_PORT method
// answers s itself in active_speed_ex.
func legacySpeed(s uint32) uint32 { return min(s, speedNDR) }

// queryPortResp is the answer to QUERY_PORT for a port of the device.
func queryPortResp(d *sysfsDevice, port uint8) (C.struct_ib_uverbs_query_port_resp, syscall.Errno) {
	var r C.struct_ib_uverbs_query_port_resp
	if port < 1 || int(port) > len(d.Ports) {
		return r, unix.EINVAL
	}
	p := &d.Ports[port-1]
	r.port_cap_flags = C.__u32(portCapFlags(p.LinkLayer))
	r.max_msg_sz = maxMessageSize
	r.gid_tbl_len = C.__u32(p.GIDTableLen)
	r.pkey_tbl_len = C.__u16(p.PKeyTableLen)
	r.lid = C.__u16(p.LID)
	r.sm_lid = C.__u16(p.SMLID)
	r.state = C.__u8(p.State)
	r.max_mtu = C.__u8(p.MaxMTU)
	r.active_mtu = C.__u8(p.ActiveMTU)
	r.lmc = C.__u8(p.LMC)
	r.active_width = C.__u8(p.ActiveWidth)
	r.active_speed = C.__u8(legacySpeed(p.ActiveSpeed))
	r.phys_state = C.__u8(physState(p.State))
	switch p.LinkLayer {
	case ctx.LinkLayerEthernet:
		r.link_layer = C.IBV_LINK_LAYER_ETHERNET
	default:
		r.link_layer = C.IBV_LINK_LAYER_INFINIBAND
		r.max_vl_num = maxVLNumIB
		r.subnet_timeout = subnetTimeout
	}
	return r, 0
}

// gidEntry is a GID table entry as QUERY_GID_ENTRY and QUERY_GID_TABLE
// answer it.
func gidEntry(e ctx.GIDEntry) C.struct_ib_uverbs_gid_entry {
	var r C.struct_ib_uverbs_gid_entry
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&r.gid[0])), 16), e.GID[:])
	r.gid_index = C.__u32(e.Index)
	r.port_num = C.__u32(e.Port)
	switch e.Type {
	case ctx.GIDTypeRoCEv1:
		r.gid_type = C.IB_UVERBS_GID_TYPE_ROCE_V1
	case ctx.GIDTypeRoCEv2:
		r.gid_type = C.IB_UVERBS_GID_TYPE_ROCE_V2
	default:
		r.gid_type = C.IB_UVERBS_GID_TYPE_IB
	}
	r.netdev_ifindex = C.__u32(e.NetdevIfindex)
	return r
}

// bigEndian64 returns v with its bytes in network order, as a __be64
// holds it.
func bigEndian64(v uint64) uint64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return binary.NativeEndian.Uint64(b[:])
}

func log2(v uint64) int {
	n := 0
	for v > 1 {
		v >>= 1
		n++
	}
	return n
}

// liveQueryPortResp is queryPortResp with the port's state read from the
// model now (a port the model took down, sim.Fabric.SetPortState), as the
// kernel reads it from the device on each QUERY_PORT.
func liveQueryPortResp(f *ufile, port uint8) (C.struct_ib_uverbs_query_port_resp, syscall.Errno) {
	r, en := queryPortResp(f.dev, port)
	if en != 0 || f.uctx == nil || f.uctx.dev == nil {
		return r, en
	}
	if pa, err := f.uctx.dev.QueryPort(port); err == nil {
		r.state = C.__u8(pa.State)
		r.phys_state = C.__u8(physState(pa.State))
	}
	return r, 0
}
