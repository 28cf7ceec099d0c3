//go:build cgo && linux

package verbs

/*
#include "mlx5kit_verbs.h"
*/
import "C"

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
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
	err            error // why the probe could not run, if it could not
}

// probeInlineLimit bounds the search for the largest inline payload: no
// mlx5 device has send WQEs beyond 1 KiB (max_sq_desc_sz is 512 on
// ConnectX-4 to -7).
const probeInlineLimit = 1024

// probe creates throw-away objects once per device: a PD, a CQ of 64- and
// one of 128-byte CQEs, RC QPs with the kit's send operations (to find the
// largest inline payload by bisection, and from it the largest send WQE:
// rdma-core derives both from max_sq_desc_sz, which no query reports) and
// a DCI. Everything is destroyed before it returns.
func (d *Device) probe() probeResult {
	d.probeOnce.Do(func() { d.probed = d.runProbe() })
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

	newCQ := func(size uint16) *C.struct_ibv_cq {
		var attr C.struct_ibv_cq_init_attr_ex
		attr.cqe = 1
		var dv C.struct_mlx5dv_cq_init_attr
		dv.comp_mask = C.MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE
		dv.cqe_size = C.uint16_t(size)
		cqx := C.mlx5dv_create_cq(d.c, &attr, &dv)
		if cqx == nil {
			return nil
		}
		return C.mk_cq_ex_to_cq(cqx)
	}
	cq := newCQ(64)
	if cq == nil {
		r.err = &VerbError{Verb: "mlx5dv_create_cq", Detail: "probe"}
		return r
	}
	defer C.ibv_destroy_cq(cq)
	if cq128 := newCQ(128); cq128 != nil {
		r.cqe128 = true
		C.ibv_destroy_cq(cq128)
	}

	rcOps := sqsize.KitOps(ctx.QPTypeRC, d.atomics)
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
		r.err = &VerbError{Verb: "mlx5dv_create_qp", Detail: "probe RC QP"}
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
		} else {
			hi = mid - 1
		}
	}
	// rdma-core grants what fills the WQE: the largest one is the
	// overhead, the inline header and the largest inline payload.
	r.maxSendWQESize = min(granted+uint32(sqsize.Overhead(ctx.QPTypeRC, rcOps))+prm.InlineHeaderSize, sqsize.MaxWQESize) / prm.WQEBBSize * prm.WQEBBSize
	r.maxInline = sqsize.LimitsOf(ctx.QPTypeRC, sqsize.Device{MaxSQDescSize: r.maxSendWQESize, MaxSendWQEBB: d.maxQPWR, MaxSGE: d.maxSGE, Atomics: d.atomics}).MaxInline

	dci, _, err := createQP(d.c, pd, qpParams{
		typ: ctx.QPTypeDCI, send: cq, recv: cq, ops: sqsize.KitOps(ctx.QPTypeDCI, d.atomics),
		caps: ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: 1},
	})
	if err == nil {
		r.dc = true
		C.ibv_destroy_qp(dci)
	}
	return r
}
