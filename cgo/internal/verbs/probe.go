//go:build cgo && linux

package verbs

/*
#include "mlx5kit_verbs.h"
*/
import "C"

import (
	"errors"
	"syscall"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
)

// probeResult is what only creating objects can tell about a device.
type probeResult struct {
	dc            bool   // a DCI can be created
	cqe128        bool   // a CQ with 128-byte CQEs can be created
	maxInline     uint32 // the largest max_inline_data rdma-core grants an RC QP
	blueFlameSize uint32 // bf.size of an RC QP (0: doorbell only)
	// maxSendWQESize is rdma-core's max_sq_desc_sz in whole basic blocks
	// (at most sqsize.MaxWQESize), from the largest RC WQE it granted: the
	// size every QP type's limits follow from.
	maxSendWQESize uint32
	// maxRecvSGE is the most scatter entries rdma-core grants a receive
	// WQE (max_rq_desc_sz / 16, which no query reports); 0 where the
	// probe could not tell.
	maxRecvSGE uint32
	// dcInitRdAtomic is the deepest max_rd_atomic the kernel accepts for
	// a DCI at RTS, probed where mlx5dv_query_device does not report
	// max_dc_init_rd_atom (rdma-core before 47, or a libmlx5 whose DEVX
	// query failed: dcDepthUnreported); 0 where it does, where there is no
	// DC, or where the probe could not tell.
	dcInitRdAtomic uint32
	err            error // why the probe could not run, if it could not
}

// probeInlineLimit bounds the search for the largest inline payload: no
// mlx5 send WQE is longer than 1 KiB (16 basic blocks), so no inline
// payload is either.
const probeInlineLimit = 1024

// probe creates throw-away objects once per device: a PD, a CQ of 64- and
// one of 128-byte CQEs, RC QPs with the kit's send operations (to find the
// largest inline payload by bisection, and from it the largest send WQE:
// rdma-core derives both from max_sq_desc_sz, which no query reports),
// RC QPs with more scatter entries (the receive WQE's limit, from
// max_rq_desc_sz, which no query reports either) and a DCI, which it
// moves to RTS to learn DC's read/atomic depth where rdma-core does not
// report it (see probeDCInitRdAtomic). Everything is destroyed before it
// returns.
func (d *Device) probe() probeResult {
	d.probeMu.Lock()
	defer d.probeMu.Unlock()
	if !d.probeDone {
		d.probed = d.runProbe()
		d.probeDone = d.probed.err == nil
	}
	return d.probed
}

func (d *Device) runProbe() (r probeResult) {
	if err := d.use("probe"); err != nil {
		r.err = err
		return r
	}
	defer d.mu.Unlock()
	pd, errno := C.ibv_alloc_pd(d.c)
	if pd == nil {
		r.err = ptrError("ibv_alloc_pd", "probe", errno)
		return r
	}
	defer C.ibv_dealloc_pd(pd)

	newCQ := func(size uint16) (*C.struct_ibv_cq, error) {
		var attr C.struct_ibv_cq_init_attr_ex
		attr.cqe = 1
		var dv C.struct_mlx5dv_cq_init_attr
		dv.comp_mask = C.MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE
		dv.cqe_size = C.uint16_t(size)
		cqx, errno := C.mlx5dv_create_cq(d.c, &attr, &dv)
		if cqx == nil {
			return nil, ptrError("mlx5dv_create_cq", "probe", errno)
		}
		return C.mk_cq_ex_to_cq(cqx), nil
	}
	cq, err := newCQ(64)
	if cq == nil {
		r.err = err
		return r
	}
	defer C.ibv_destroy_cq(cq)
	cq128, err := newCQ(128)
	switch {
	case cq128 != nil:
		r.cqe128 = true
		C.ibv_destroy_cq(cq128)
	case transient(err):
		r.err = err
		return r
	}

	rcOps := sqsize.KitOps(ctx.QPTypeRC, d.atomics)
	var rcErr error
	rc := func(inline uint32) (ok bool, granted uint32, bf uint32) {
		createPD := pd
		if dom, err := newDedicatedDomain(d.c, pd); err == nil {
			defer dom.release()
			createPD = dom.pdd
		}
		qp, caps, err := createQP(d.c, createPD, qpParams{
			typ: ctx.QPTypeRC, send: cq, recv: cq, ops: rcOps,
			caps: ctx.QueuePairCaps{SendDepth: 1, RecvDepth: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: inline},
		})
		if err != nil {
			rcErr = err
			return false, 0, 0
		}
		var out C.struct_mlx5dv_qp
		if C.mk_init_qp(qp, &out) == 0 {
			bf = uint32(out.bf.size)
		}
		C.ibv_destroy_qp(qp)
		return true, uint32(caps.max_inline_data), bf
	}
	ok, granted, bf := rc(0)
	if !ok {
		r.err = rcErr
		return r
	}
	r.blueFlameSize = bf
	// Largest request that succeeds, in 16-byte steps (inline data is
	// counted in 16-byte segments).
	lo, hi := uint32(0), uint32(probeInlineLimit/16)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if ok, g, _ := rc(mid * 16); ok {
			lo, granted = mid, g
		} else if transient(rcErr) {
			r.err = rcErr
			return r
		} else {
			hi = mid - 1
		}
	}
	// rdma-core grants what fills the WQE: the largest one is the
	// overhead, the inline header and the largest inline payload.
	r.maxSendWQESize = min(granted+uint32(sqsize.Overhead(ctx.QPTypeRC, rcOps))+prm.InlineHeaderSize, sqsize.MaxWQESize) / prm.WQEBBSize * prm.WQEBBSize
	r.maxInline = sqsize.LimitsOf(ctx.QPTypeRC, sqsize.Device{MaxSQDescSize: r.maxSendWQESize, MaxSendWQEBB: d.maxQPWR, MaxSGE: d.maxSGE, Atomics: d.atomics}).MaxInline

	// rdma-core takes max_recv_sge up to max_rq_desc_sz / 16 and grants
	// the power of two the receive WQE is rounded to: from max_sge (the
	// smaller of the send and receive limits), one more than granted is
	// asked until it is refused.
	for n := max(d.maxSGE, 1); n <= probeInlineLimit/16; {
		qp, caps, err := createQP(d.c, pd, qpParams{
			typ: ctx.QPTypeRC, send: cq, recv: cq, ops: rcOps,
			caps: ctx.QueuePairCaps{SendDepth: 1, RecvDepth: 1, MaxSendSGE: 1, MaxRecvSGE: n},
		})
		if err != nil {
			if transient(err) {
				r.err = err
				return r
			}
			break
		}
		C.ibv_destroy_qp(qp)
		r.maxRecvSGE = max(uint32(caps.max_recv_sge), n)
		n = r.maxRecvSGE + 1
	}

	dci, _, err := createQP(d.c, pd, qpParams{
		typ: ctx.QPTypeDCI, send: cq, recv: cq, ops: sqsize.KitOps(ctx.QPTypeDCI, d.atomics),
		caps: ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: 1},
	})
	if err == nil {
		r.dc = true
		if dcDepthUnreported(d.dv) {
			r.dcInitRdAtomic = d.probeDCInitRdAtomic(dci)
			d.dcInitRdAtomic = r.dcInitRdAtomic
		}
		C.ibv_destroy_qp(dci)
	} else if transient(err) {
		r.err = err
	}
	return r
}

// transient reports whether a probe's creation failed for want of memory
// (ENOMEM, ENOSPC): that says nothing about what the device takes, which is
// what the probe measures, so it fails the probe (retried on the next call)
// instead of being recorded as a capability the device lacks.
func transient(err error) bool { return errors.Is(err, ctx.ErrNoMemory) }

// probeDCInitRdAtomic returns the deepest max_rd_atomic the kernel accepts
// for a DCI, or 0 where it cannot tell. rdma-core before 47 does not
// report max_dc_init_rd_atom (1 << log_max_ra_res_dc), the depth mlx5_ib's
// validate_rd_atomic bounds a DCI's max_rd_atomic by (kernels before the
// December 2022 fix bound it by RC's max_qp_init_rd_atom), so a depth
// taken from RC's is refused with EINVAL at RTS wherever DC's is lower.
// The probe brings the throw-away DCI to RTR on port 1 and asks for RTS
// with RC's depth (rounded down to a power of two, as both limits are),
// halving it on each EINVAL down to 1: the first depth accepted is DC's.
// Any other error, or a refusal of 1, stops it with 0. The caller holds
// d.mu.
func (d *Device) probeDCInitRdAtomic(dci *C.struct_ibv_qp) uint32 {
	a, err := d.queryDeviceEx()
	if err != nil || a.orig_attr.max_qp_init_rd_atom <= 0 {
		return 0
	}
	port, err := d.queryPort(1)
	if err != nil {
		return 0
	}
	modify := func(from, to ctx.QPState, attr *C.struct_ibv_qp_attr) error {
		mask, err := qpstate.Derive(ctx.QPTypeDCI, from, to)
		if err != nil {
			return err
		}
		attr.qp_state = uint32(to)
		ret, errno := C.ibv_modify_qp(dci, attr, C.int(mask))
		switch {
		case ret > 0:
			return syscall.Errno(ret)
		case ret < 0 && errno != nil:
			return errno
		case ret < 0:
			return syscall.EIO
		}
		return nil
	}
	var init, rtr C.struct_ibv_qp_attr
	init.port_num = 1
	rtr.path_mtu = port.active_mtu
	if modify(ctx.QPStateReset, ctx.QPStateInit, &init) != nil || modify(ctx.QPStateInit, ctx.QPStateRTR, &rtr) != nil {
		return 0
	}
	depth := uint32(1)
	for depth*2 <= min(uint32(a.orig_attr.max_qp_init_rd_atom), 128) {
		depth *= 2
	}
	for ; depth >= 1; depth /= 2 {
		var rts C.struct_ibv_qp_attr
		rts.timeout, rts.retry_cnt, rts.rnr_retry = 14, 7, 7
		rts.max_rd_atomic = C.uint8_t(depth)
		err := modify(ctx.QPStateRTR, ctx.QPStateRTS, &rts)
		if err == nil {
			return depth
		}
		if !errors.Is(err, syscall.EINVAL) {
			return 0
		}
	}
	return 0
}

// dcDepthUnreported reports whether mlx5dv_query_device left DC's initiator
// depth unknown, so that the probe must find it: without
// MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM (rdma-core before 47), or with the bit
// and a depth of 0. libmlx5 sets the bit whenever it is asked but reads
// the depths once, at context creation, with a DEVX QUERY_HCA_CAP
// (get_hca_general_caps), and leaves both 0 when that command fails (a
// kernel or firmware without DEVX user contexts); a depth it read is
// 1 << log_max_ra_res_dc, never 0.
func dcDepthUnreported(dv DVAttr) bool {
	init, _ := dcRdAtomic(dv)
	return init == 0
}
