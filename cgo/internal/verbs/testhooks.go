//go:build cgo && linux

package verbs

/*
#include "mlx5kit_verbs.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
)

// ahSummary is what fillAH wrote, in Go types, so tests (which cannot use
// cgo) can check the conversion.
type ahSummary struct {
	dlid          uint16
	sl, pathBits  uint8
	staticRate    uint8
	isGlobal      bool
	port          uint8
	dgid          [16]byte
	flowLabel     uint32
	sgidIndex     uint8
	hopLimit      uint8
	trafficClass  uint8
	sizeofAHAttr  uintptr
	sizeofGIDData uintptr
}

func summarizeAH(p ctx.AddressAttr, ll ctx.LinkLayer) (ahSummary, error) {
	var a C.struct_ibv_ah_attr
	if err := fillAH(&a, p, ll); err != nil {
		return ahSummary{}, err
	}
	return ahSummary{
		dlid: uint16(a.dlid), sl: uint8(a.sl), pathBits: uint8(a.src_path_bits),
		staticRate: uint8(a.static_rate), isGlobal: a.is_global != 0, port: uint8(a.port_num),
		dgid:      *(*[16]byte)(unsafe.Pointer(&a.grh.dgid)),
		flowLabel: uint32(a.grh.flow_label), sgidIndex: uint8(a.grh.sgid_index),
		hopLimit: uint8(a.grh.hop_limit), trafficClass: uint8(a.grh.traffic_class),
		sizeofAHAttr: unsafe.Sizeof(a), sizeofGIDData: unsafe.Sizeof(a.grh.dgid),
	}, nil
}

// unsafePointer returns the address of b's first byte.
func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// modifyStateUnchecked calls ibv_modify_qp with the attribute mask
// IBV_QP_STATE alone and without consulting the transition table, so that a
// test on a NIC can compare the kernel's verdict with the table's. On
// success it records the new state.
func (qp *QueuePair) modifyStateUnchecked(s ctx.QPState) error {
	const verb = "ibv_modify_qp"
	if err := qp.pd.use(verb); err != nil {
		return err
	}
	defer qp.pd.d.mu.Unlock()
	if qp.closed {
		return errClosed(verb)
	}
	var attr C.struct_ibv_qp_attr
	attr.qp_state = uint32(s)
	if ret, errno := C.ibv_modify_qp(qp.qp, &attr, C.IBV_QP_STATE); ret != 0 {
		return retError(verb, fmt.Sprintf("%v QP %#x %v→%v (unchecked)", qp.typ, qp.desc.QPN, qp.state, s), int(ret), errno)
	}
	qp.state = s
	return nil
}

// createSummary is what fillCreateAttr wrote, in Go types.
type createSummary struct {
	sendOpsFlagged bool // IBV_QP_INIT_ATTR_SEND_OPS_FLAGS in comp_mask
	onlyPD         bool // comp_mask is IBV_QP_INIT_ATTR_PD alone
	sendOps        sqsize.Ops
	driverType     bool // IBV_QPT_DRIVER (DCI, DCT)
	dc             bool // MLX5DV_QP_INIT_ATTR_MASK_DC in the mlx5 comp_mask
	dvSendOps      bool // MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS in the mlx5 comp_mask
	caps           ctx.QueuePairCaps
}

func summarizeCreate(p qpParams) (createSummary, error) {
	var ia C.struct_ibv_qp_init_attr_ex
	var dv C.struct_mlx5dv_qp_init_attr
	if err := fillCreateAttr(nil, p, &ia, &dv); err != nil {
		return createSummary{}, err
	}
	return createSummary{
		sendOpsFlagged: ia.comp_mask&C.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0,
		onlyPD:         ia.comp_mask == C.IBV_QP_INIT_ATTR_PD,
		sendOps:        sqsize.Ops(ia.send_ops_flags),
		driverType:     ia.qp_type == C.IBV_QPT_DRIVER,
		dc:             dv.comp_mask&C.MLX5DV_QP_INIT_ATTR_MASK_DC != 0,
		dvSendOps:      dv.comp_mask&C.MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS != 0,
		caps: ctx.QueuePairCaps{
			SendDepth: uint32(ia.cap.max_send_wr), RecvDepth: uint32(ia.cap.max_recv_wr),
			MaxSendSGE: uint32(ia.cap.max_send_sge), MaxRecvSGE: uint32(ia.cap.max_recv_sge),
			MaxInline: uint32(ia.cap.max_inline_data),
		},
	}, nil
}

// activeSpeedOf is the active speed mk_query_port reports for a port whose
// query answered active_speed legacy and active_speed_ex ex (0 where the
// library did not fill it).
func activeSpeedOf(legacy uint8, ex uint32) uint32 {
	var u C.union_mk_port_attr
	(*C.struct_ibv_port_attr)(unsafe.Pointer(&u)).active_speed = C.uint8_t(legacy)
	*(*uint32)(unsafe.Add(unsafe.Pointer(&u), C.MK_PORT_SPEED_EX_OFFSET)) = ex
	return uint32(C.mk_active_speed(&u))
}
