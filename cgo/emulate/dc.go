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
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// Dynamically connected QPs. libmlx5 creates a DCI or a DCT (mlx5dv_create_qp
// with MLX5DV_QP_INIT_ATTR_MASK_DC) as a QP of type IB_UVERBS_QPT_DRIVER
// through the CREATE_QP write command, the type in the vendor flags
// (MLX5_QP_FLAG_TYPE_DCI, _DCT). A DCI is a user QP with a send ring only,
// adopted like an RC QP. A DCT has no rings: its request carries the DC
// access key (in the union with sq_buf_addr), and it receives through its
// SRQ. mlx5_ib creates the DCT in the device only at RTR, so CREATE_QP
// answers QPN 0 and the DCT number comes back in the vendor response of
// the modify to RTR (struct mlx5_ib_modify_qp_resp, dctn), which libmlx5
// sends as the extended command EX_MODIFY_QP. The checks mirror mlx5_ib's
// (check_qp_type, process_vendor_flags, check_qp_attr, create_dct,
// mlx5_ib_modify_qp, mlx5_ib_modify_dct) and the uverbs core's
// (ib_uverbs_ex_modify_qp); the transitions are internal/qpstate's DCI and
// DCT rules.

// qpTypeOf is check_qp_type and the type part of process_vendor_flags: the
// vendor flags' DC type decides (on any uverbs type, as mlx5_ib sets it), a
// driver QP without exactly one DC type flag is EINVAL, every other type
// is qpType's (both DC type flags on it are consumed and change nothing).
func qpTypeOf(t uint8, vendor []byte) (ctx.QPType, syscall.Errno) {
	var ucmd C.struct_mlx5_ib_create_qp
	off := int(unsafe.Offsetof(ucmd.flags))
	var flags uint32
	if len(vendor) >= off+4 {
		flags = binary.NativeEndian.Uint32(vendor[off:])
	}
	switch flags & (C.MLX5_QP_FLAG_TYPE_DCI | C.MLX5_QP_FLAG_TYPE_DCT) {
	case C.MLX5_QP_FLAG_TYPE_DCI:
		return ctx.QPTypeDCI, 0
	case C.MLX5_QP_FLAG_TYPE_DCT:
		return ctx.QPTypeDCT, 0
	}
	if t == C.IB_UVERBS_QPT_DRIVER {
		return 0, unix.EINVAL
	}
	return qpType(t)
}

// checkDCAttr is check_qp_attr: a DCT needs an SRQ (its receive CQ was
// looked up already), a DCI takes no receive work requests, EINVAL
// otherwise. A DCI may name an SRQ: create_dci writes it into the QP
// context and the core holds it while the QP lives, but a DCI never
// receives, so createQP keeps the reference and gives the model's DCI
// none (perftest's DC latency tests create their DCIs so).
func checkDCAttr(t ctx.QPType, srq *uobject, c ctx.QueuePairCaps) syscall.Errno {
	switch t {
	case ctx.QPTypeDCT:
		if srq == nil {
			return unix.EINVAL
		}
	case ctx.QPTypeDCI:
		if c.RecvDepth != 0 || c.MaxRecvSGE != 0 {
			return unix.EINVAL
		}
	}
	return 0
}

// createDCT is create_dct: the PD, the receive CQ, the SRQ and the access
// key make the DCT; the capabilities and rings of the request are not
// used. CREATE_QP answers QPN 0 (the DCT number is known at RTR) and a
// vendor response of zeros.
func (k *kernel) createDCT(f *ufile, r qpRequest, p, scq, rcq, srq *uobject, ucmd *C.struct_mlx5_ib_create_qp) (qpReply, syscall.Errno) {
	key := binary.NativeEndian.Uint64(bytesOf(ucmd)[unsafe.Offsetof(ucmd.bfreg_index)+4:])
	// The model grants scatter-to-CQE to a DCT only over 128-byte CQEs,
	// as create_dct does (sim's scatterToCQE).
	q, err := simadopt.QueuePair(p.pd, simadopt.QPConfig{
		Type: ctx.QPTypeDCT, SendCQ: scq.cq, RecvCQ: rcq.cq, SRQ: srq.srq.srq, DCKey: key,
		ScatterToCQE: uint32(ucmd.flags)&C.MLX5_QP_FLAG_SCATTER_CQE != 0,
	})
	if err != nil {
		return qpReply{}, errnoOfModel(err)
	}
	p.users++
	scq.users++
	rcq.users++
	srq.users++
	src := f.uctx.async.add(asyncKey{asyncQP, q.Descriptor().QPN}, r.userHandle, nil)
	h := f.uctx.addObject(&uobject{kind: objQP, qp: q, qpType: ctx.QPTypeDCT, owner: r.pd,
		sendCQ: r.sendCQ, recvCQ: r.recvCQ, srqRef: srq, async: src})
	return qpReply{handle: h}, 0
}

// dctToRTR reports whether a modify moves a DCT from INIT to RTR, the
// transition at which mlx5_ib_modify_dct creates it and answers its
// number.
func dctToRTR(f *ufile, req *C.struct_ib_uverbs_modify_qp) (*uobject, bool) {
	o, en := f.uctx.object(uint32(req.qp_handle), objQP)
	if en != 0 || o.qpType != ctx.QPTypeDCT || qpstate.Mask(req.attr_mask)&qpstate.State == 0 ||
		ctx.QPState(req.qp_state) != ctx.QPStateRTR {
		return nil, false
	}
	st, err := o.qp.State()
	if err != nil || st != ctx.QPStateInit {
		return nil, false
	}
	return o, true
}

// dctResponseLen is the vendor response mlx5_ib_modify_dct writes at RTR:
// up to the DCT number, or the whole structure when the buffer holds it;
// EINVAL when it does not hold the DCT number (the legacy MODIFY_QP has
// no response at all).
func dctResponseLen(outLen int) (int, syscall.Errno) {
	var resp C.struct_mlx5_ib_modify_qp_resp
	least := int(unsafe.Offsetof(resp.dctn) + unsafe.Sizeof(resp.dctn))
	if outLen < least {
		return 0, unix.EINVAL
	}
	if outLen < int(unsafe.Sizeof(resp)) {
		return least, 0
	}
	return int(unsafe.Sizeof(resp)), 0
}

// checkModifyUdata is mlx5_ib_modify_qp's reading of struct
// mlx5_ib_modify_qp: none at all is accepted; less than up to ece_options
// is EINVAL; bytes beyond the structure must be zero and comp_mask and the
// burst information's reserved field must be zero (EOPNOTSUPP). ECE
// options are ignored, as on a device without ECE.
func checkModifyUdata(in []byte) syscall.Errno {
	if len(in) == 0 {
		return 0
	}
	var ucmd C.struct_mlx5_ib_modify_qp
	if len(in) < int(unsafe.Offsetof(ucmd.ece_options)+unsafe.Sizeof(ucmd.ece_options)) {
		return unix.EINVAL
	}
	n := copy(bytesOf(&ucmd), in)
	for _, b := range in[n:] {
		if b != 0 {
			return unix.EOPNOTSUPP
		}
	}
	if ucmd.comp_mask != 0 || ucmd.burst_info.reserved != 0 {
		return unix.EOPNOTSUPP
	}
	return 0
}

// attrStandardBits are IB_QP_ATTR_STANDARD_BITS: IB_QP_STATE through
// IB_QP_DEST_QPN and the bits up to 20 the kernel defines.
const attrStandardBits = 1<<21 - 1

// writeExModifyQP is ib_uverbs_ex_modify_qp: mask bits beyond the standard
// ones and IB_QP_RATE_LIMIT are EOPNOTSUPP; then modify_qp's own checks
// (checkModifyQP), mlx5_ib_modify_qp's driver data, and the modify as
// MODIFY_QP does it, whose transition checks refuse
// a rate limit with EINVAL (an attribute of raw packet QPs only in
// ib_modify_qp_is_ok's table, in neither modify_dci_qp_is_ok's masks nor
// mlx5_ib_modify_dct's). A DCT moving to RTR answers its number in the vendor
// response (mlx5_ib_modify_dct), which must have room for it (EINVAL,
// before anything changes).
func (k *kernel) writeExModifyQP(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_ex_modify_qp
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	mask := uint32(req.base.attr_mask)
	if mask&^uint32(attrStandardBits|C.IBV_QP_RATE_LIMIT) != 0 {
		return unix.EOPNOTSUPP
	}
	o, en := checkModifyQP(f, &req.base)
	if en != 0 {
		return en
	}
	if en := checkModifyUdata(c.udataIn); en != 0 {
		return en
	}
	dct, rtr := dctToRTR(f, &req.base)
	var vendorLen int
	if rtr {
		var en syscall.Errno
		if vendorLen, en = dctResponseLen(c.udataLen); en != 0 {
			return en
		}
	}
	if rtr {
		// The DCT's number is the model's QPN from its creation: answered
		// before the modify, so that a response that cannot be written
		// (EFAULT) leaves the DCT in INIT, as mlx5_ib destroys the DCT it
		// created when the copy fails.
		vendor := C.struct_mlx5_ib_modify_qp_resp{response_length: C.__u32(vendorLen), dctn: C.__u32(dct.qp.Descriptor().QPN)}
		if en := copyOut(c.udataOut, bytesOf(&vendor)[:vendorLen]); en != 0 {
			return en
		}
	}
	if en := k.modifyQP(o, f, &req.base); en != 0 {
		return en
	}
	resp := C.struct_ib_uverbs_ex_modify_qp_resp{response_length: C.__u32(min(c.respLen, int(C.sizeof_struct_ib_uverbs_ex_modify_qp_resp)))}
	return c.response(bytesOf(&resp))
}

// checkLegacyModify refuses what MODIFY_QP, which has no response, cannot
// do: move a DCT to RTR (mlx5_ib_modify_dct needs room for the DCT
// number, EINVAL).
func checkLegacyModify(f *ufile, req *C.struct_ib_uverbs_modify_qp) syscall.Errno {
	if _, rtr := dctToRTR(f, req); rtr {
		return unix.EINVAL
	}
	return 0
}

func init() {
	writeExCmds[C.IB_USER_VERBS_EX_CMD_MODIFY_QP] = &writeCmd{
		// req_size is offsetofend(struct ib_uverbs_ex_modify_qp, base).
		name: "EX_MODIFY_QP", reqSize: C.sizeof_struct_ib_uverbs_modify_qp,
		respSize: C.sizeof_struct_ib_uverbs_ex_modify_qp_resp, context: true,
		run: (*kernel).writeExModifyQP,
	}
}
