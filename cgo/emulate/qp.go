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
	"github.com/mlx5kit/mlx5kit/internal/kerrno"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
)

// Queue pairs. A user QP is created on the model over the rings and
// doorbell record libmlx5 allocated (simadopt.QueuePair): struct
// mlx5_ib_create_qp names one buffer holding the receive ring
// (rq_wqe_count entries of 1 << rq_wqe_shift bytes) followed by the send
// ring (sq_wqe_count WQEBBs), and the doorbell record. The checks are the
// uverbs core's and mlx5_ib's for a user QP (set_rq_size, set_user_buf_size,
// the bfreg choice), then the model's limits, with the kernel's errno.

// qpRequest is what CREATE_QP asks for.
type qpRequest struct {
	pd, sendCQ, recvCQ uint32
	typ                uint8
	isSRQ              bool
	srq                uint32
	caps               ctx.QueuePairCaps
	userHandle         uint64 // what an async event names (libibverbs' QP)
	vendor             []byte // struct mlx5_ib_create_qp
	// sigAll is sq_sig_all: every send work request completes with a
	// CQE (the library sets the WQEs' flag itself); QUERY_QP answers it.
	sigAll bool
}

// qpReply is what the kernel answers: the handle, the QPN, the
// capabilities and the bfreg the QP rings its doorbells through.
type qpReply struct {
	handle, qpn uint32
	caps        ctx.QueuePairCaps
	bfreg       uint32
}

// qpType maps a uverbs QP type to the model's, EOPNOTSUPP for the types
// mlx5_ib has and the model not (raw packet, XRC, driver types), EINVAL
// for the others. UC is the model's RC QP made unreliable
// (simadopt.QPConfig.Unreliable; createQP sets it).
func qpType(t uint8) (ctx.QPType, syscall.Errno) {
	switch t {
	case C.IB_UVERBS_QPT_RC, C.IB_UVERBS_QPT_UC:
		return ctx.QPTypeRC, 0
	case C.IB_UVERBS_QPT_UD:
		return ctx.QPTypeUD, 0
	case C.IB_UVERBS_QPT_RAW_PACKET, C.IB_UVERBS_QPT_XRC_INI,
		C.IB_UVERBS_QPT_XRC_TGT, C.IB_UVERBS_QPT_DRIVER:
		return 0, unix.EOPNOTSUPP
	}
	return 0, unix.EINVAL
}

// createQP checks a CREATE_QP request and creates the QP on the model.
func (k *kernel) createQP(f *ufile, r qpRequest) (qpReply, syscall.Errno) {
	// create_qp: a raw packet QP needs CAP_NET_RAW (rdma_dev_has_raw_cap),
	// EPERM before anything else is looked at.
	if r.typ == C.IB_UVERBS_QPT_RAW_PACKET && !kerrno.HasRawCap() {
		return qpReply{}, unix.EPERM
	}
	typ, en := qpTypeOf(r.typ, r.vendor)
	if en != 0 {
		return qpReply{}, en
	}
	uc := f.uctx
	p, en := uc.object(r.pd, objPD)
	if en != 0 {
		return qpReply{}, en
	}
	scq, en := uc.object(r.sendCQ, objCQ)
	if en != 0 {
		return qpReply{}, en
	}
	rcq, en := uc.object(r.recvCQ, objCQ)
	if en != 0 {
		return qpReply{}, en
	}
	var sref *uobject
	if r.isSRQ {
		if sref, en = uc.object(r.srq, objSRQ); en != 0 {
			return qpReply{}, en
		}
	}
	if en := checkDCAttr(typ, sref, r.caps); en != 0 {
		return qpReply{}, en
	}
	attr := f.dev.Attr
	c := r.caps
	// create_dct uses none of the capabilities. The receive SGEs of a QP
	// without a receive queue (qp_has_rq: on an SRQ, or no receive work
	// requests) size nothing, and libmlx5 does not check them either.
	dct := typ == ctx.QPTypeDCT
	hasRQ := sref == nil && c.RecvDepth > 0
	if !dct && (c.SendDepth > attr.MaxQPWR || c.RecvDepth > attr.MaxQPWR || c.MaxSendSGE > attr.MaxSGE || hasRQ && c.MaxRecvSGE > attr.MaxSGE) {
		return qpReply{}, unix.EINVAL
	}
	if !dct && c.SendDepth > 0 {
		// libmlx5 tells the kernel the inline size it granted, which can
		// be more than a WQE expresses (sqsize.Granted); mlx5_ib takes it.
		if err := sqsize.Check(typ, sqsize.Granted(typ, c, sqsize.DeviceOf(attr)), sqsize.DeviceOf(attr)); err != nil {
			return qpReply{}, unix.EINVAL
		}
	}
	var ucmd C.struct_mlx5_ib_create_qp
	// mlx5_ib needs the request up to the send buffer address; the ECE
	// options and DCI streams after it are optional.
	need := int(unsafe.Offsetof(ucmd.ece_options))
	if len(r.vendor) < need {
		return qpReply{}, unix.EINVAL
	}
	n := copy(bytesOf(&ucmd), r.vendor)
	for _, b := range r.vendor[n:] {
		if b != 0 {
			return qpReply{}, unix.EINVAL
		}
	}
	flags := uint32(ucmd.flags)
	const known = C.MLX5_QP_FLAG_SIGNATURE | C.MLX5_QP_FLAG_SCATTER_CQE | C.MLX5_QP_FLAG_TUNNEL_OFFLOADS |
		C.MLX5_QP_FLAG_BFREG_INDEX | C.MLX5_QP_FLAG_TYPE_DCT | C.MLX5_QP_FLAG_TYPE_DCI |
		C.MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_UC | C.MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_MC |
		C.MLX5_QP_FLAG_ALLOW_SCATTER_CQE | C.MLX5_QP_FLAG_PACKET_BASED_CREDIT_MODE |
		C.MLX5_QP_FLAG_UAR_PAGE_INDEX | C.MLX5_QP_FLAG_DCI_STREAM
	switch {
	case flags&^known != 0:
		return qpReply{}, unix.EINVAL
	case flags&C.MLX5_QP_FLAG_DCI_STREAM != 0:
		// process_vendor_flags: DCI streams on a device without stream
		// channels (the model announces none).
		return qpReply{}, unix.EINVAL
	case flags&^(C.MLX5_QP_FLAG_SCATTER_CQE|C.MLX5_QP_FLAG_ALLOW_SCATTER_CQE|C.MLX5_QP_FLAG_BFREG_INDEX|
		C.MLX5_QP_FLAG_UAR_PAGE_INDEX|C.MLX5_QP_FLAG_TYPE_DCI|C.MLX5_QP_FLAG_TYPE_DCT) != 0:
		// Signatures, tunnel offloads, TIR flags and credit mode the
		// model has not.
		return qpReply{}, unix.EOPNOTSUPP
	case flags&C.MLX5_QP_FLAG_UAR_PAGE_INDEX != 0:
		// The index of a dynamically allocated UAR, which this kernel
		// never hands out.
		return qpReply{}, unix.EINVAL
	}
	if typ == ctx.QPTypeDCT {
		return k.createDCT(f, r, p, scq, rcq, sref, &ucmd)
	}
	bfreg, dynBfreg := uint32(0), false
	if flags&C.MLX5_QP_FLAG_BFREG_INDEX != 0 {
		// A bfreg of a UAR page the library mapped with
		// MLX5_IB_MMAP_ALLOC_WC; one that is not mapped is EINVAL.
		page := int(ucmd.bfreg_index) / bfregsPerUAR
		if page >= uc.dynPages || !uc.dynBusy[page] {
			return qpReply{}, unix.EINVAL
		}
		bfreg, dynBfreg = uint32(ucmd.bfreg_index), true
	}
	// set_rq_size: a receive ring of 1 << rq_wqe_shift byte entries; none
	// for a QP that asked for no receive work requests.
	rqCnt, shift := uint32(ucmd.rq_wqe_count), uint32(ucmd.rq_wqe_shift)
	if !hasRQ {
		// qp_has_rq: a QP with an SRQ, or asking for no receive work
		// requests, has no receive queue; set_rq_size gives it a count
		// and shift of 0, which create_user_qp requires of the request.
		if rqCnt != 0 || shift != 0 {
			return qpReply{}, unix.EINVAL
		}
		c.RecvDepth, c.MaxRecvSGE = 0, 0
	}
	if shift > 32 {
		return qpReply{}, unix.EINVAL
	}
	var stride uint32
	if rqCnt > 0 {
		if shift < 4 || shift > 31 || 1<<shift > attr.MaxSGE*16 || rqCnt&(rqCnt-1) != 0 || rqCnt > attr.MaxQPWR {
			return qpReply{}, unix.EINVAL
		}
		stride = 1 << shift
	}
	// set_user_buf_size: a power of two of WQEBBs within the device's.
	sqCnt := uint32(ucmd.sq_wqe_count)
	if sqCnt&(sqCnt-1) != 0 || sqCnt > attr.MaxQPWR {
		return qpReply{}, unix.EINVAL
	}
	// The union after bfreg_index holds sq_buf_addr.
	sqBufAddr := binary.NativeEndian.Uint64(bytesOf(&ucmd)[unsafe.Offsetof(ucmd.bfreg_index)+4:])
	if sqCnt == 0 || sqBufAddr != 0 {
		// A QP without a send queue, or a send ring apart from the
		// receive ring (raw packet QPs): not in the model.
		return qpReply{}, unix.EOPNOTSUPP
	}
	buf, db := uint64(ucmd.buf_addr), uint64(ucmd.db_addr)
	rqBytes := uint64(rqCnt) * uint64(stride)
	if en := k.checkMapped(buf, rqBytes+uint64(sqCnt)*64); en != 0 {
		return qpReply{}, en
	}
	if en := k.checkMapped(db, 8); en != 0 {
		return qpReply{}, en
	}
	sq := buf + rqBytes
	cfg := simadopt.QPConfig{
		Type: typ, SendCQ: scq.cq, RecvCQ: rcq.cq, Caps: c,
		// The library's memory, not Go's: it reaches the model as
		// pointers without uintptr conversions vet would flag.
		SQ: *(*unsafe.Pointer)(unsafe.Pointer(&sq)), SQCount: sqCnt,
		RQCount: rqCnt, RQStride: stride,
		DBRec:        *(*unsafe.Pointer)(unsafe.Pointer(&db)),
		ScatterToCQE: flags&C.MLX5_QP_FLAG_SCATTER_CQE != 0,
		// A DC type flag decides the type whatever the uverbs one
		// (qpTypeOf): UC is the uverbs type with an RC QP.
		Unreliable: r.typ == C.IB_UVERBS_QPT_UC && typ == ctx.QPTypeRC,
	}
	if rqCnt > 0 {
		cfg.RQ = *(*unsafe.Pointer)(unsafe.Pointer(&buf))
	}
	if sref != nil && typ != ctx.QPTypeDCI {
		// A DCI's SRQ is only held (checkDCAttr).
		cfg.SRQ = sref.srq.srq
	}
	regMap, regOff, regSize := k.bfregRegister(f, bfreg, dynBfreg)
	if regMap != nil {
		// The model watches the register the library rings
		// (strict mode's ViolationDoorbellRecordOnly).
		cfg.Register = unsafe.Add(*(*unsafe.Pointer)(unsafe.Pointer(&regMap.addr)), regOff)
		cfg.RegisterSize = regSize
	}
	q, err := simadopt.QueuePair(p.pd, cfg)
	if err != nil {
		return qpReply{}, errnoOfModel(err)
	}
	p.users++
	scq.users++
	rcq.users++
	if sref != nil {
		sref.users++
	}
	out := c
	if rqCnt > 0 {
		out.RecvDepth, out.MaxRecvSGE = rqCnt, stride/16
	}
	qpn := q.Descriptor().QPN
	src := uc.async.add(asyncKey{asyncQP, qpn}, r.userHandle, nil)
	o := &uobject{kind: objQP, qp: q, qpType: typ, uc: cfg.Unreliable, caps: out, owner: r.pd, sendCQ: r.sendCQ, recvCQ: r.recvCQ, srqRef: sref, async: src, sigAll: r.sigAll}
	if regMap != nil {
		o.regMap, o.regOff, o.regSize = regMap, regOff, regSize
		if regMap.registers == nil {
			regMap.registers = map[*uobject]bool{}
		}
		regMap.registers[o] = true
	}
	h := uc.addObject(o)
	return qpReply{handle: h, qpn: qpn, caps: out, bfreg: bfreg}, 0
}

// bfregRegister finds the doorbell register of bfreg in the UAR pages f
// mapped (k.mu held): the mapping of its page, the register's offset in
// it and the size of each of its two buffers. libmlx5 rings bfreg b of a
// static page (a QP created without MLX5_QP_FLAG_BFREG_INDEX gets bfreg
// 0) at page b/2, offset MLX5_BF_OFFSET + (b%2) * bf_reg_size, where
// mlx5_set_context (providers/mlx5/mlx5.c) puts ctx->bfs[b]; bfreg 0 has
// no BlueFlame buffer (buf_size 0: 8-byte doorbells at that offset only).
// A legacy dynamic bfreg (mlx5_insert_dyn_uuars, MLX5_IB_MMAP_ALLOC_WC
// page b/2) is laid out the same way, with BlueFlame buffers of
// bf_reg_size/2. The mapping is nil when the page is not mapped exactly
// once, or not writable: the register the library rings is then unknown,
// and not watched.
func (k *kernel) bfregRegister(f *ufile, bfreg uint32, dyn bool) (*mapping, uintptr, uint32) {
	index := int(bfreg / bfregsPerUAR)
	if dyn {
		index += f.uctx.staticPages
	}
	var found *mapping
	for _, m := range k.maps {
		if m.file != f || m.index != index || m.cmd == C.MLX5_IB_MMAP_CLOCK_INFO {
			continue
		}
		if found != nil {
			return nil, 0, 0
		}
		found = m
	}
	regSize := 2 * f.dev.Attr.BlueFlameSize // the context's bf_reg_size
	off := uintptr(uarBFOffset + bfreg%bfregsPerUAR*regSize)
	if found == nil || found.prot&unix.PROT_WRITE == 0 || off+uintptr(regSize) > found.length {
		return nil, 0, 0
	}
	if bfreg == 0 && !dyn {
		return found, off, 0
	}
	return found, off, regSize / 2
}

// destroyQP destroys a QP and returns the async events reported for it
// (see asyncEvents.release).
func (k *kernel) destroyQP(f *ufile, h uint64) (uint32, syscall.Errno) {
	o, en := f.uctx.destroyable(h, objQP)
	if en != 0 {
		return 0, en
	}
	o.close()
	if o.regMap != nil {
		delete(o.regMap.registers, o)
		o.regMap = nil
	}
	f.uctx.removeObject(uint32(h))
	for _, parent := range []uint32{o.owner, o.sendCQ, o.recvCQ} {
		if p, ok := f.uctx.objects[parent]; ok {
			p.users--
		}
	}
	if o.srqRef != nil {
		o.srqRef.users--
	}
	return f.uctx.async.release(o.async), 0
}

func (k *kernel) writeCreateQP(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_create_qp
	// ib_uverbs_create_qp ignores the reserved byte (only EX_CREATE_QP
	// checks its own).
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	r, en := k.createQP(f, qpRequest{
		pd: uint32(req.pd_handle), sendCQ: uint32(req.send_cq_handle), recvCQ: uint32(req.recv_cq_handle),
		typ: uint8(req.qp_type), isSRQ: req.is_srq != 0, srq: uint32(req.srq_handle),
		userHandle: uint64(req.user_handle), sigAll: req.sq_sig_all != 0,
		caps: ctx.QueuePairCaps{SendDepth: uint32(req.max_send_wr), RecvDepth: uint32(req.max_recv_wr),
			MaxSendSGE: uint32(req.max_send_sge), MaxRecvSGE: uint32(req.max_recv_sge), MaxInline: uint32(req.max_inline_data)},
		vendor: c.udataIn,
	})
	if en != 0 {
		return en
	}
	resp := C.struct_ib_uverbs_create_qp_resp{
		qp_handle: C.__u32(r.handle), qpn: C.__u32(r.qpn),
		max_send_wr: C.__u32(r.caps.SendDepth), max_recv_wr: C.__u32(r.caps.RecvDepth),
		max_send_sge: C.__u32(r.caps.MaxSendSGE), max_recv_sge: C.__u32(r.caps.MaxRecvSGE),
		max_inline_data: C.__u32(r.caps.MaxInline),
	}
	vendor := C.struct_mlx5_ib_create_qp_resp{bfreg_index: C.__u32(r.bfreg)}
	if en = c.response(bytesOf(&resp)); en == 0 {
		en = copyOut(c.udataOut, bytesOf(&vendor)[:min(c.udataLen, int(unsafe.Sizeof(vendor)))])
	}
	if en != 0 {
		_, _ = k.destroyQP(f, uint64(r.handle))
	}
	return en
}

func (k *kernel) writeDestroyQP(f *ufile, c *writeCall) syscall.Errno {
	// ib_uverbs_destroy_qp ignores the reserved field.
	var req C.struct_ib_uverbs_destroy_qp
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	n, en := k.destroyQP(f, uint64(req.qp_handle))
	if en != 0 {
		return en
	}
	resp := C.struct_ib_uverbs_destroy_qp_resp{events_reported: C.__u32(n)}
	return c.response(bytesOf(&resp))
}

// qpAccess maps IB_ACCESS_* bits of a QP to the model's. Other bits are
// ignored, as the kernel ignores them: neither modify_qp nor _ib_modify_qp
// checks the flags, and mlx5_ib's QP context takes remote read, write and
// atomic only (local write is the model's own bit).
func qpAccess(flags uint32) ctx.Access {
	var a ctx.Access
	if flags&C.IB_UVERBS_ACCESS_LOCAL_WRITE != 0 {
		a |= ctx.AccessLocalWrite
	}
	if flags&C.IB_UVERBS_ACCESS_REMOTE_WRITE != 0 {
		a |= ctx.AccessRemoteWrite
	}
	if flags&C.IB_UVERBS_ACCESS_REMOTE_READ != 0 {
		a |= ctx.AccessRemoteRead
	}
	if flags&C.IB_UVERBS_ACCESS_REMOTE_ATOMIC != 0 {
		a |= ctx.AccessRemoteAtomic
	}
	return a
}

// pathOf converts a struct ib_uverbs_qp_dest.
func pathOf(d *C.struct_ib_uverbs_qp_dest) ctx.AddressAttr {
	p := ctx.AddressAttr{
		Port: uint8(d.port_num), DLID: uint16(d.dlid), SL: uint8(d.sl), SrcPathBits: uint8(d.src_path_bits),
		StaticRate: uint8(d.static_rate), GlobalRoute: d.is_global != 0, SGIDIndex: uint8(d.sgid_index),
		FlowLabel: uint32(d.flow_label), TrafficClass: uint8(d.traffic_class), HopLimit: uint8(d.hop_limit),
	}
	for i := range p.DGID {
		p.DGID[i] = byte(d.dgid[i])
	}
	return p
}

// dciTableMask is the mask the transition table checks: a DCI moving
// from INIT to RTR may carry an address vector, which the kernels since
// modify_dci_qp_is_ok took IB_QP_AV as optional there accept (perftest's
// DC tests send one) and the table, keeping what every kernel accepts,
// refuses. The model's DCI keeps no path: the address vector is taken and
// not applied, as other optional attributes the model does not keep.
func dciTableMask(t ctx.QPType, from, to ctx.QPState, mask qpstate.Mask) qpstate.Mask {
	if t == ctx.QPTypeDCI && from == ctx.QPStateInit && to == ctx.QPStateRTR {
		return mask &^ qpstate.AV
	}
	return mask
}

// checkModifyQP makes the checks of the uverbs core's modify_qp, in its
// order, before the attributes go on to the core and the driver (and so
// before mlx5_ib_modify_qp reads its udata): the QP handle; a port
// (IB_QP_PORT) and the address vector's port (IB_QP_AV) the device has,
// at RTR the address vector's port the QP's (the one of its move to INIT),
// elsewhere equal to IB_QP_PORT's when both are given; an alternate path's
// two ports valid and equal (IB_QP_ALT_PATH); a current and a new state no
// higher than ERR: all EINVAL. Then a controlled Q_Key (bit 31 of
// IB_QP_QKEY) needs CAP_NET_RAW: EPERM (since "RDMA/uverbs: Restrict usage
// of privileged QKEYs", Linux 6.4 and the stable kernels of June 2023; the
// netlink switch that lets anyone use one, off by default, the model does
// not have). Everything else the kernel refuses it refuses after these.
func checkModifyQP(f *ufile, req *C.struct_ib_uverbs_modify_qp) (*uobject, syscall.Errno) {
	o, en := f.uctx.object(uint32(req.qp_handle), objQP)
	if en != 0 {
		return nil, en
	}
	mask := qpstate.Mask(req.attr_mask)
	ports := len(f.dev.Ports)
	valid := func(p C.__u8) bool { return p >= 1 && int(p) <= ports }
	if mask&qpstate.Port != 0 && !valid(req.port_num) {
		return nil, unix.EINVAL
	}
	if mask&qpstate.AV != 0 {
		if !valid(req.dest.port_num) {
			return nil, unix.EINVAL
		}
		if mask&qpstate.State != 0 && ctx.QPState(req.qp_state) == ctx.QPStateRTR {
			// qp->port is the port of the move to INIT (0 before).
			_, a, ok := simadopt.QueuePairAttributes(o.qp)
			if !ok {
				return nil, unix.ENODEV
			}
			if uint8(req.dest.port_num) != a.Port {
				return nil, unix.EINVAL
			}
		} else if mask&qpstate.Port != 0 && req.port_num != req.dest.port_num {
			return nil, unix.EINVAL
		}
	}
	if mask&qpstate.AltPath != 0 && (!valid(req.alt_port_num) || !valid(req.alt_dest.port_num) ||
		req.alt_port_num != req.alt_dest.port_num) {
		return nil, unix.EINVAL
	}
	if mask&qpstate.CurState != 0 && uint32(req.cur_qp_state) > uint32(ctx.QPStateError) ||
		mask&qpstate.State != 0 && uint32(req.qp_state) > uint32(ctx.QPStateError) {
		return nil, unix.EINVAL
	}
	if mask&qpstate.QKey != 0 && uint32(req.qkey)&0x80000000 != 0 && !kerrno.HasRawCap() {
		return nil, unix.EPERM
	}
	return o, 0
}

// modifyQP is the rest of modify_qp, which checkModifyQP has passed, and
// mlx5_ib_modify_qp: the states and the mask are checked against the
// kernel's transition table (package internal/qpstate), a mask without
// IB_QP_STATE moving the QP to the state it is in, and a current state
// given with IB_QP_CUR_STATE must be the QP's; then the model checks the
// values of the attributes the mask names against its device
// (qpstate.CheckAttr) and applies them with the transition. Alternate
// paths and path migration the model has not (EOPNOTSUPP). Optional
// attributes the model does not keep are accepted and not applied.
func (k *kernel) modifyQP(o *uobject, f *ufile, req *C.struct_ib_uverbs_modify_qp) syscall.Errno {
	mask := qpstate.Mask(req.attr_mask)
	if mask&^(qpstate.DestQPN<<1-1) != 0 {
		return unix.EINVAL
	}
	from, err := o.qp.State()
	if err != nil {
		return errnoOfModel(err)
	}
	if mask&qpstate.CurState != 0 && ctx.QPState(req.cur_qp_state) != from {
		// The table allows IB_QP_CUR_STATE only on a move to RTS, and
		// the device refuses that command from a state the QP is not
		// in (bad resource state: EINVAL).
		return unix.EINVAL
	}
	to := from
	if mask&qpstate.State != 0 {
		to = ctx.QPState(req.qp_state)
	}
	if o.uc {
		// ib_modify_qp_is_ok with qp_state_table's UC masks.
		if err := qpstate.CheckUC(from, to, mask); err != nil {
			return unix.EINVAL
		}
	} else if err := qpstate.Check(o.qpType, from, to, dciTableMask(o.qpType, from, to, mask)); err != nil {
		return unix.EINVAL
	}
	if mask&qpstate.AltPath != 0 {
		if en := checkAltPath(f.dev, req); en != 0 {
			return en
		}
	}
	if mask&(qpstate.AltPath|qpstate.PathMigState|qpstate.EnSQDAsyncNotify|qpstate.Cap) != 0 {
		return unix.EOPNOTSUPP
	}
	access := qpAccess(uint32(req.qp_access_flags))
	a := ctx.QPAttr{
		State: to, Port: uint8(req.port_num), PKeyIndex: uint16(req.pkey_index), Access: access,
		// __mlx5_ib_modify_qp writes dest_qp_num with MLX5_SET into the
		// 24-bit remote_qpn, unchecked: the high byte is dropped.
		QKey: uint32(req.qkey), RemoteQPN: uint32(req.dest_qp_num) & 0xffffff, PathMTU: ctx.MTU(req.path_mtu),
		RQPSN: uint32(req.rq_psn), MaxDestRdAtomic: uint8(req.max_dest_rd_atomic), MinRNRTimer: uint8(req.min_rnr_timer),
		SQPSN: uint32(req.sq_psn), Timeout: uint8(req.timeout), RetryCount: uint8(req.retry_cnt),
		RNRRetry: uint8(req.rnr_retry), MaxRdAtomic: uint8(req.max_rd_atomic),
	}
	if mask&qpstate.AV != 0 {
		a.Path = pathOf(&req.dest)
	}
	// The model checks and applies the attributes the mask names, as
	// __mlx5_ib_modify_qp writes only those into the QP context.
	if err := simadopt.ModifyQueuePair(o.qp, a, mask); err != nil {
		return errnoOfModel(err)
	}
	return 0
}

// checkAltPath refuses, with EINVAL, the alternate paths the core refuses
// after modify_qp's port checks (checkModifyQP) and before mlx5_ib takes
// them: _ib_modify_qp (verbs.c) needs the address's SGID index inside the
// port's GID table (rdma_fill_sgid_attr) and then refuses an alternate
// path unless it and the QP's port are InfiniBand ("the core code can only
// handle alternate paths and APM for IB"; the model's ports share one link
// layer). What passes is an alternate path a ConnectX would take, which
// the model has not (EOPNOTSUPP).
func checkAltPath(dev *sysfsDevice, req *C.struct_ib_uverbs_modify_qp) syscall.Errno {
	p := dev.Ports[int(req.alt_port_num)-1]
	if req.alt_dest.is_global != 0 && int(req.alt_dest.sgid_index) >= p.GIDTableLen {
		return unix.EINVAL
	}
	if p.LinkLayer != ctx.LinkLayerInfiniBand {
		return unix.EINVAL
	}
	return 0
}

func (k *kernel) writeModifyQP(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_modify_qp
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	if uint32(req.attr_mask)&^attrStandardBits != 0 {
		return unix.EOPNOTSUPP
	}
	o, en := checkModifyQP(f, &req)
	if en != 0 {
		return en
	}
	if en := checkLegacyModify(f, &req); en != 0 {
		return en
	}
	return k.modifyQP(o, f, &req)
}

// uverbsAccess maps the model's access flags back to IB_ACCESS_* bits.
func uverbsAccess(a ctx.Access) uint32 {
	var f uint32
	if a&ctx.AccessLocalWrite != 0 {
		f |= C.IB_UVERBS_ACCESS_LOCAL_WRITE
	}
	if a&ctx.AccessRemoteWrite != 0 {
		f |= C.IB_UVERBS_ACCESS_REMOTE_WRITE
	}
	if a&ctx.AccessRemoteRead != 0 {
		f |= C.IB_UVERBS_ACCESS_REMOTE_READ
	}
	if a&ctx.AccessRemoteAtomic != 0 {
		f |= C.IB_UVERBS_ACCESS_REMOTE_ATOMIC
	}
	return f
}

// writeQueryQP answers QUERY_QP with the QP's state, the attributes its
// transitions applied and its capabilities, whatever the mask asks (the
// kernel fills the whole response too); an unknown handle is EINVAL. A
// DCT answers as mlx5_ib_dct_query_qp does (queryDCT).
func (k *kernel) writeQueryQP(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_query_qp
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	o, en := f.uctx.object(uint32(req.qp_handle), objQP)
	if en != 0 {
		return en
	}
	if o.qpType == ctx.QPTypeDCT {
		return queryDCT(c, o, qpstate.Mask(req.attr_mask))
	}
	st, a, ok := simadopt.QueuePairAttributes(o.qp)
	if !ok {
		return unix.ENODEV
	}
	var resp C.struct_ib_uverbs_query_qp_resp
	resp.max_send_wr = C.__u32(o.caps.SendDepth)
	resp.max_recv_wr = C.__u32(o.caps.RecvDepth)
	resp.max_send_sge = C.__u32(o.caps.MaxSendSGE)
	resp.max_recv_sge = C.__u32(o.caps.MaxRecvSGE)
	resp.max_inline_data = C.__u32(o.caps.MaxInline)
	resp.qkey = C.__u32(a.QKey)
	resp.rq_psn = C.__u32(a.RQPSN)
	resp.sq_psn = C.__u32(a.SQPSN)
	resp.dest_qp_num = C.__u32(a.RemoteQPN)
	resp.qp_access_flags = C.__u32(uverbsAccess(a.Access))
	resp.pkey_index = C.__u16(a.PKeyIndex)
	resp.qp_state = C.__u8(st)
	resp.cur_qp_state = C.__u8(st)
	resp.path_mtu = C.__u8(a.PathMTU)
	resp.max_rd_atomic = C.__u8(a.MaxRdAtomic)
	resp.max_dest_rd_atomic = C.__u8(a.MaxDestRdAtomic)
	resp.min_rnr_timer = C.__u8(a.MinRNRTimer)
	resp.port_num = C.__u8(a.Port)
	resp.timeout = C.__u8(a.Timeout)
	resp.retry_cnt = C.__u8(a.RetryCount)
	resp.rnr_retry = C.__u8(a.RNRRetry)
	if o.sigAll {
		resp.sq_sig_all = 1
	}
	p := a.Path
	resp.dest.dlid = C.__u16(p.DLID)
	resp.dest.sl = C.__u8(p.SL)
	resp.dest.src_path_bits = C.__u8(p.SrcPathBits)
	resp.dest.static_rate = C.__u8(p.StaticRate)
	resp.dest.sgid_index = C.__u8(p.SGIDIndex)
	resp.dest.hop_limit = C.__u8(p.HopLimit)
	resp.dest.traffic_class = C.__u8(p.TrafficClass)
	resp.dest.flow_label = C.__u32(p.FlowLabel)
	resp.dest.port_num = C.__u8(p.Port)
	if p.GlobalRoute {
		resp.dest.is_global = 1
	}
	for i, b := range p.DGID {
		resp.dest.dgid[i] = C.__u8(b)
	}
	return c.response(bytesOf(&resp))
}

// dctQueryMask is the supported_mask of mlx5_ib_dct_query_qp: the
// attributes a DCT answers QUERY_QP with.
const dctQueryMask = qpstate.State | qpstate.AccessFlags | qpstate.Port | qpstate.MinRNRTimer |
	qpstate.AV | qpstate.PathMTU | qpstate.PKeyIndex

// queryDCT answers QUERY_QP of a DCT as mlx5_ib_dct_query_qp does: a mask
// with a bit outside dctQueryMask, or a DCT not in RTR, is EINVAL; then
// only the attributes the mask asks for are filled, of a response that is
// otherwise zero (mlx5_ib_query_qp zeroes the attributes and the init
// attributes: no capabilities, cur_qp_state 0). The address vector's GRH
// fields it fills go unseen: their ah_attr has no GRH flag, so
// copy_ah_attr_to_uverbs copies none of them. The zeroed sq_sig_type is
// IB_SIGNAL_ALL_WR (0), which ib_uverbs_query_qp answers as sq_sig_all 1.
func queryDCT(c *writeCall, o *uobject, mask qpstate.Mask) syscall.Errno {
	if mask&^dctQueryMask != 0 {
		return unix.EINVAL
	}
	st, a, ok := simadopt.QueuePairAttributes(o.qp)
	if !ok {
		return unix.ENODEV
	}
	if st != ctx.QPStateRTR {
		return unix.EINVAL
	}
	resp := C.struct_ib_uverbs_query_qp_resp{sq_sig_all: 1}
	if mask&qpstate.State != 0 {
		resp.qp_state = C.__u8(st)
	}
	if mask&qpstate.AccessFlags != 0 {
		resp.qp_access_flags = C.__u32(uverbsAccess(a.Access))
	}
	if mask&qpstate.Port != 0 {
		resp.port_num = C.__u8(a.Port)
	}
	if mask&qpstate.MinRNRTimer != 0 {
		resp.min_rnr_timer = C.__u8(a.MinRNRTimer)
	}
	if mask&qpstate.PathMTU != 0 {
		resp.path_mtu = C.__u8(a.PathMTU)
	}
	if mask&qpstate.PKeyIndex != 0 {
		resp.pkey_index = C.__u16(a.PKeyIndex)
	}
	return c.response(bytesOf(&resp))
}
