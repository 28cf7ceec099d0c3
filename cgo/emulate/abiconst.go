//go:build cgo && linux

package emulate

/*
#include <stdint.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include "shim.h"
#include "uverbs_abi.h"

// mk_test_munmap calls munmap as C code of the process does: through the
// interposer.
static int mk_test_munmap(uintptr_t addr, size_t n) { return munmap((void *)addr, n); }

static void mk_write_loop(int fd, long n, int direct)
{
	char c = 0;
	long i;

	for (i = 0; i < n; i++) {
		if (direct)
			syscall(SYS_write, fd, &c, 1);
		else
			(void)!write(fd, &c, 1);
	}
}

static struct mlx5_ib_clock_info *mk_clock_info_at(uintptr_t addr)
{
	return (struct mlx5_ib_clock_info *)addr;
}
*/
import "C"

import (
	"sync/atomic"
	"unsafe"
)

// The ABI numbers and layouts from the installed headers, as Go constants
// for the tests (which cannot use cgo) to build commands with.
const (
	ioctlHdrSize      = C.mk_ioctl_hdr_size
	ioctlOffLength    = C.mk_ioctl_hdr_off_length
	ioctlOffObject    = C.mk_ioctl_hdr_off_object
	ioctlOffMethod    = C.mk_ioctl_hdr_off_method
	ioctlOffNumAttrs  = C.mk_ioctl_hdr_off_num_attrs
	ioctlOffReserved1 = C.mk_ioctl_hdr_off_reserved1
	ioctlOffDriverID  = C.mk_ioctl_hdr_off_driver_id
	ioctlOffReserved2 = C.mk_ioctl_hdr_off_reserved2
	attrSize          = C.mk_attr_size
	attrOffID         = C.mk_attr_off_id
	attrOffLen        = C.mk_attr_off_len
	attrOffFlags      = C.mk_attr_off_flags
	attrOffAttrData   = C.mk_attr_off_attr_data
	attrOffData       = C.mk_attr_off_data
	attrFlagMandatory = C.UVERBS_ATTR_F_MANDATORY
	attrFlagValidOut  = C.UVERBS_ATTR_F_VALID_OUTPUT

	driverMLX5   = C.RDMA_DRIVER_MLX5
	objectDevice = C.UVERBS_OBJECT_DEVICE
	objectPD     = C.UVERBS_OBJECT_PD
	objectAsync  = C.UVERBS_OBJECT_ASYNC_EVENT

	methodInvokeWrite   = C.UVERBS_METHOD_INVOKE_WRITE
	methodQueryPort     = C.UVERBS_METHOD_QUERY_PORT
	methodGetContext    = C.UVERBS_METHOD_GET_CONTEXT
	methodQueryGIDTable = C.UVERBS_METHOD_QUERY_GID_TABLE
	methodQueryGIDEntry = C.UVERBS_METHOD_QUERY_GID_ENTRY
	methodAsyncAlloc    = C.UVERBS_METHOD_ASYNC_EVENT_ALLOC

	attrUHWIn             = C.UVERBS_ATTR_UHW_IN
	attrUHWOut            = C.UVERBS_ATTR_UHW_OUT
	attrNumCompVectors    = C.UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS
	attrCoreSupport       = C.UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT
	attrQueryPortNum      = C.UVERBS_ATTR_QUERY_PORT_PORT_NUM
	attrQueryPortResp     = C.UVERBS_ATTR_QUERY_PORT_RESP
	attrGIDEntryPort      = C.UVERBS_ATTR_QUERY_GID_ENTRY_PORT
	attrGIDEntryIndex     = C.UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX
	attrGIDEntryFlags     = C.UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS
	attrGIDEntryResp      = C.UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY
	attrGIDTableEntrySize = C.UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE
	attrGIDTableFlags     = C.UVERBS_ATTR_QUERY_GID_TABLE_FLAGS
	attrGIDTableEntries   = C.UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES
	attrGIDTableNum       = C.UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES
	attrAsyncFD           = C.UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE

	cmdHdrSize         = C.mk_cmd_hdr_size
	exCmdHdrSize       = C.mk_ex_cmd_hdr_size
	cmdFlagExtended    = C.IB_USER_VERBS_CMD_FLAG_EXTENDED
	cmdGetContext      = C.IB_USER_VERBS_CMD_GET_CONTEXT
	cmdQueryDevice     = C.IB_USER_VERBS_CMD_QUERY_DEVICE
	cmdQueryPort       = C.IB_USER_VERBS_CMD_QUERY_PORT
	cmdAllocPD         = C.IB_USER_VERBS_CMD_ALLOC_PD
	exCmdQueryDevice   = C.IB_USER_VERBS_EX_CMD_QUERY_DEVICE
	getContextRespSize = C.sizeof_struct_ib_uverbs_get_context_resp
	queryDevRespSize   = C.sizeof_struct_ib_uverbs_query_device_resp
	queryDevExRespSize = C.sizeof_struct_ib_uverbs_ex_query_device_resp
	queryPortRespSize  = C.sizeof_struct_ib_uverbs_query_port_resp
	queryPortExSize    = C.mk_query_port_resp_ex_size
	queryPortOffSpeed  = C.mk_query_port_resp_off_active_speed
	gidEntrySize       = C.mk_gid_entry_size
	ucontextReqV2Size  = C.sizeof_struct_mlx5_ib_alloc_ucontext_req_v2
	ucontextRespSize   = C.sizeof_struct_mlx5_ib_alloc_ucontext_resp
	mlx5QueryDevResp   = C.sizeof_struct_mlx5_ib_query_device_resp
	uctxDEVX           = C.MLX5_IB_ALLOC_UCTX_DEVX

	mmapRegular = C.MLX5_IB_MMAP_REGULAR_PAGE
	mmapNC      = C.MLX5_IB_MMAP_NC_PAGE
	mmapAllocWC = C.MLX5_IB_MMAP_ALLOC_WC
	mmapClock   = C.MLX5_IB_MMAP_CORE_CLOCK
	// mmapClockInfoCmd is MLX5_IB_MMAP_CLOCK_INFO.
	mmapClockInfoCmd = C.MLX5_IB_MMAP_CLOCK_INFO
)

// mlx5QueryDevRespLen is the response_length of a whole
// mlx5_ib_query_device_resp: the end of its last field.
var mlx5QueryDevRespLen = int(C.mk_mlx5_query_device_resp_end(C.mk_mlx5_query_device_resp_nends - 1))

// rdmaVerbsIoctl is RDMA_VERBS_IOCTL.
var rdmaVerbsIoctl = uint(C.mk_rdma_verbs_ioctl())

// ucontextRespField returns named fields of a mlx5_ib_alloc_ucontext_resp
// held in b, for the tests.
func ucontextRespField(b []byte) map[string]uint64 {
	var r C.struct_mlx5_ib_alloc_ucontext_resp
	copy(bytesOf(&r), b)
	return map[string]uint64{
		"qp_tab_size": uint64(r.qp_tab_size), "bf_reg_size": uint64(r.bf_reg_size),
		"tot_bfregs": uint64(r.tot_bfregs), "cache_line_size": uint64(r.cache_line_size),
		"max_sq_desc_sz": uint64(r.max_sq_desc_sz), "max_rq_desc_sz": uint64(r.max_rq_desc_sz),
		"max_send_wqebb": uint64(r.max_send_wqebb), "max_recv_wr": uint64(r.max_recv_wr),
		"max_srq_recv_wr": uint64(r.max_srq_recv_wr), "num_ports": uint64(r.num_ports),
		"comp_mask": uint64(r.comp_mask), "response_length": uint64(r.response_length),
		"cqe_version": uint64(r.cqe_version), "cmds_supp_uhw": uint64(r.cmds_supp_uhw),
		"eth_min_inline": uint64(r.eth_min_inline), "log_uar_size": uint64(r.log_uar_size),
		"num_uars_per_page": uint64(r.num_uars_per_page), "num_dyn_bfregs": uint64(r.num_dyn_bfregs),
		"dump_fill_mkey": uint64(r.dump_fill_mkey), "clock_info_versions": uint64(r.clock_info_versions),
	}
}

// clockPageFields returns the fields of the struct mlx5_ib_clock_info at
// addr (a mapping of the clock info page), for the tests; the sign word is
// read atomically before and after the others, as libmlx5 reads it.
func clockPageFields(addr uintptr) (fields map[string]uint64, signBefore, signAfter uint32) {
	ci := C.mk_clock_info_at(C.uintptr_t(addr))
	sign := (*uint32)(unsafe.Pointer(&ci.sign))
	signBefore = atomic.LoadUint32(sign)
	fields = map[string]uint64{
		"nsec": atomic.LoadUint64((*uint64)(unsafe.Pointer(&ci.nsec))), "cycles": atomic.LoadUint64((*uint64)(unsafe.Pointer(&ci.cycles))),
		"frac": atomic.LoadUint64((*uint64)(unsafe.Pointer(&ci.frac))), "mult": uint64(atomic.LoadUint32((*uint32)(unsafe.Pointer(&ci.mult)))),
		"shift": uint64(ci.shift), "mask": uint64(ci.mask), "overflow_period": uint64(ci.overflow_period),
	}
	signAfter = atomic.LoadUint32(sign)
	return fields, signBefore, signAfter
}

// interposerMapped tells the interposer of a mapping made (add) or
// forgotten: the process's kernel's mapped hook (emulate.go), which a
// test kernel can take too.
func interposerMapped(addr uintptr, add bool) {
	if add {
		C.mk_emu_map_add(C.uintptr_t(addr))
	} else {
		C.mk_emu_map_del(C.uintptr_t(addr))
	}
}

// interposedMunmap unmaps [addr, addr+n) through the interposer, as C
// code of the process does; it returns munmap's result.
func interposedMunmap(addr, n uintptr) int {
	return int(C.mk_test_munmap(C.uintptr_t(addr), C.size_t(n)))
}

// writeLoop writes one byte to fd n times through the interposed write
// (direct false) or the system call itself (direct true), for the
// benchmark of what the interposer costs a descriptor it does not own.
func writeLoop(fd, n int, direct bool) {
	d := C.int(0)
	if direct {
		d = 1
	}
	C.mk_write_loop(C.int(fd), C.long(n), d)
}

// The object commands and access flags, for the tests.
const (
	cmdDeallocPD      = C.IB_USER_VERBS_CMD_DEALLOC_PD
	cmdAttachMcast    = C.IB_USER_VERBS_CMD_ATTACH_MCAST
	cmdRegMR          = C.IB_USER_VERBS_CMD_REG_MR
	cmdDeregMR        = C.IB_USER_VERBS_CMD_DEREG_MR
	allocPDRespSize   = C.sizeof_struct_ib_uverbs_alloc_pd_resp
	regMRRespSize     = C.sizeof_struct_ib_uverbs_reg_mr_resp
	accessLocalWrite  = C.IB_UVERBS_ACCESS_LOCAL_WRITE
	accessRemoteWrite = C.IB_UVERBS_ACCESS_REMOTE_WRITE
	accessRemoteRead  = C.IB_UVERBS_ACCESS_REMOTE_READ
	accessAtomic      = C.IB_UVERBS_ACCESS_REMOTE_ATOMIC
	accessOnDemand    = C.IB_UVERBS_ACCESS_ON_DEMAND
	accessMWBind      = C.IB_UVERBS_ACCESS_MW_BIND
	accessRelaxed     = C.IB_UVERBS_ACCESS_RELAXED_ORDERING
)

// REG_DMABUF_MR and its attributes, for the tests.
const (
	methodRegDMABufMR     = C.UVERBS_METHOD_REG_DMABUF_MR
	attrDMABufHandle      = C.UVERBS_ATTR_REG_DMABUF_MR_HANDLE
	attrDMABufPDHandle    = C.UVERBS_ATTR_REG_DMABUF_MR_PD_HANDLE
	attrDMABufOffset      = C.UVERBS_ATTR_REG_DMABUF_MR_OFFSET
	attrDMABufLength      = C.UVERBS_ATTR_REG_DMABUF_MR_LENGTH
	attrDMABufIOVA        = C.UVERBS_ATTR_REG_DMABUF_MR_IOVA
	attrDMABufFD          = C.UVERBS_ATTR_REG_DMABUF_MR_FD
	attrDMABufAccessFlags = C.UVERBS_ATTR_REG_DMABUF_MR_ACCESS_FLAGS
	attrDMABufRespLKey    = C.UVERBS_ATTR_REG_DMABUF_MR_RESP_LKEY
	attrDMABufRespRKey    = C.UVERBS_ATTR_REG_DMABUF_MR_RESP_RKEY
)

// The completion queue commands and structures, for the tests.
const (
	cmdCreateCompChannel = C.IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL
	cmdCreateCQ          = C.IB_USER_VERBS_CMD_CREATE_CQ
	cmdDestroyCQ         = C.IB_USER_VERBS_CMD_DESTROY_CQ
	cmdResizeCQ          = C.IB_USER_VERBS_CMD_RESIZE_CQ
	resizeCQRespSize     = C.sizeof_struct_ib_uverbs_resize_cq_resp
	mlx5ResizeCQSize     = C.sizeof_struct_mlx5_ib_resize_cq
	createCQRespSize     = C.sizeof_struct_ib_uverbs_create_cq_resp
	destroyCQRespSize    = C.sizeof_struct_ib_uverbs_destroy_cq_resp
	mlx5CreateCQSize     = C.sizeof_struct_mlx5_ib_create_cq
	mlx5CQFlagPad        = C.MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD
	mlx5CQFlagUARIndex   = C.MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX
)

// The object ioctl methods and their attributes, for the tests.
const (
	objectMR            = C.UVERBS_OBJECT_MR
	objectCQ            = C.UVERBS_OBJECT_CQ
	methodPDDestroy     = C.UVERBS_METHOD_PD_DESTROY
	methodMRDestroy     = C.UVERBS_METHOD_MR_DESTROY
	methodCQCreate      = C.UVERBS_METHOD_CQ_CREATE
	methodCQDestroy     = C.UVERBS_METHOD_CQ_DESTROY
	attrDestroyPDHandle = C.UVERBS_ATTR_DESTROY_PD_HANDLE
	attrDestroyMRHandle = C.UVERBS_ATTR_DESTROY_MR_HANDLE
	attrCreateCQHandle  = C.UVERBS_ATTR_CREATE_CQ_HANDLE
	attrCreateCQCQE     = C.UVERBS_ATTR_CREATE_CQ_CQE
	attrCreateCQUser    = C.UVERBS_ATTR_CREATE_CQ_USER_HANDLE
	attrCreateCQChannel = C.UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL
	attrCreateCQVector  = C.UVERBS_ATTR_CREATE_CQ_COMP_VECTOR
	attrCreateCQFlags   = C.UVERBS_ATTR_CREATE_CQ_FLAGS
	attrCreateCQRespCQE = C.UVERBS_ATTR_CREATE_CQ_RESP_CQE
	attrCreateCQEventFD = C.UVERBS_ATTR_CREATE_CQ_EVENT_FD
	attrDestroyCQHandle = C.UVERBS_ATTR_DESTROY_CQ_HANDLE
	attrDestroyCQResp   = C.UVERBS_ATTR_DESTROY_CQ_RESP
	cqFlagTimestamp     = C.IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION
	cqFlagIgnoreOverrun = C.IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN
)

// The queue pair commands and structures, for the tests.
const (
	cmdCreateQP        = C.IB_USER_VERBS_CMD_CREATE_QP
	cmdDestroyQP       = C.IB_USER_VERBS_CMD_DESTROY_QP
	cmdModifyQP        = C.IB_USER_VERBS_CMD_MODIFY_QP
	cmdQueryQP         = C.IB_USER_VERBS_CMD_QUERY_QP
	queryQPRespSize    = C.sizeof_struct_ib_uverbs_query_qp_resp
	modifyQPSize       = C.sizeof_struct_ib_uverbs_modify_qp
	qpDestSize         = C.sizeof_struct_ib_uverbs_qp_dest
	createQPRespSize   = C.sizeof_struct_ib_uverbs_create_qp_resp
	destroyQPRespSize  = C.sizeof_struct_ib_uverbs_destroy_qp_resp
	mlx5CreateQPSize   = C.sizeof_struct_mlx5_ib_create_qp
	mlx5CreateQPResp   = C.sizeof_struct_mlx5_ib_create_qp_resp
	mlx5QPFlagScatter  = C.MLX5_QP_FLAG_SCATTER_CQE
	mlx5QPFlagBfreg    = C.MLX5_QP_FLAG_BFREG_INDEX
	mlx5QPFlagUARIndex = C.MLX5_QP_FLAG_UAR_PAGE_INDEX
	mlx5QPFlagSig      = C.MLX5_QP_FLAG_SIGNATURE
	qptRC              = C.IB_UVERBS_QPT_RC
	qptUC              = C.IB_UVERBS_QPT_UC
	qptUD              = C.IB_UVERBS_QPT_UD
	qptRawPacket       = C.IB_UVERBS_QPT_RAW_PACKET
)
