//go:build cgo && linux

package verbs

/*
#include "mlx5kit_verbs.h"
*/
import "C"

import (
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/descriptor"
)

// SharedReceiveQueue is a struct ibv_srq handed to the data plane with
// mlx5dv_init_obj.
type SharedReceiveQueue struct {
	pd     *ProtectionDomain
	srq    *C.struct_ibv_srq
	desc   descriptor.SRQ
	closed bool
	// ext is the parent domain the SRQ is created through: its ring and
	// doorbell record come from ext.arena (extalloc.go).
	ext extDomain
}

// CreateSRQ creates a shared receive queue (ibv_create_srq) and fills its
// descriptor.
//
// The descriptor's ring is the free list rdma-core built: WQEs 0..Tail
// linked in order, the last one pointing back to 0 (Head is 0), so
// WQECnt = Tail+1, a power of two at least Depth+1. rdma-core may
// allocate extra WQEs after them for its own wait queue; they are not part
// of the ring the data plane uses.
func (pd *ProtectionDomain) CreateSRQ(cfg ctx.SRQConfig) (*SharedReceiveQueue, error) {
	const verb = "ibv_create_srq"
	if cfg.MaxSGE == 0 {
		cfg.MaxSGE = 1
	}
	detail := fmt.Sprintf("depth %d × %d SGE", cfg.Depth, cfg.MaxSGE)
	if cfg.Depth == 0 {
		return nil, &VerbError{Verb: verb, Detail: detail + ": depth 0", Sentinel: ctx.ErrInvalidArgument}
	}
	if err := wqSignatureRefusal(verb, "SRQ", envSRQSignature); err != nil {
		return nil, err
	}
	if err := pd.use(verb); err != nil {
		return nil, err
	}
	defer pd.d.mu.Unlock()
	var ia C.struct_ibv_srq_init_attr
	ia.attr.max_wr = C.uint32_t(cfg.Depth)
	ia.attr.max_sge = C.uint32_t(cfg.MaxSGE)
	ext, err := newExtDomain(pd.d.c, pd.pd, nil, "SRQ")
	if err != nil {
		return nil, err
	}
	srq, errno := C.ibv_create_srq(ext.pdd, &ia)
	if srq == nil {
		_ = ext.abandon()
		return nil, ptrError(verb, detail, errno)
	}
	fail := func(err error) (*SharedReceiveQueue, error) {
		C.ibv_destroy_srq(srq)
		_ = ext.abandon()
		return nil, err
	}
	var out C.struct_mlx5dv_srq
	if ret := C.mk_init_srq(srq, &out); ret != 0 {
		return fail(retError("mlx5dv_init_obj", "SRQ", int(ret), nil))
	}
	if out.comp_mask&C.MLX5DV_SRQ_MASK_SRQN == 0 {
		return fail(&VerbError{Verb: "mlx5dv_init_obj", Detail: "SRQ: rdma-core did not report the SRQ number", Sentinel: ctx.ErrNotSupported})
	}
	head, tail := uint32(out.head), uint32(out.tail)
	n := tail - head + 1
	if head != 0 || bits.OnesCount32(n) != 1 {
		return fail(&VerbError{Verb: "mlx5dv_init_obj", Detail: fmt.Sprintf("SRQ: free list head %d tail %d is not a ring from 0", head, tail), Sentinel: ctx.ErrNotSupported})
	}
	s := &SharedReceiveQueue{pd: pd, srq: srq, desc: descriptor.SRQ{
		Buf:        out.buf,
		DBRec:      unsafe.Pointer(out.dbrec),
		Stride:     uint32(out.stride),
		WQECnt:     n,
		Head:       head,
		Tail:       tail,
		SRQN:       uint32(out.srqn),
		MaxRecvSGE: uint32(ia.attr.max_sge),
		Memory:     pd.d.queueMemory(ext.arena, nil),
	}, ext: ext}
	pd.d.srqs[unsafe.Pointer(srq)] = s
	return s, nil
}

// Descriptor returns the SRQ ring and doorbell record.
func (s *SharedReceiveQueue) Descriptor() descriptor.SRQ { return s.desc }

// Close destroys the SRQ (ibv_destroy_srq). Every QP attached to it must be
// destroyed first. It is idempotent.
func (s *SharedReceiveQueue) Close() error {
	s.pd.d.mu.Lock()
	defer s.pd.d.mu.Unlock()
	return s.closeLocked()
}

func (s *SharedReceiveQueue) closeLocked() error {
	if s.closed {
		return nil
	}
	if ret, errno := C.ibv_destroy_srq(s.srq); ret != 0 {
		return retError("ibv_destroy_srq", fmt.Sprintf("SRQN %#x", s.desc.SRQN), int(ret), errno)
	}
	s.closed = true
	delete(s.pd.d.srqs, unsafe.Pointer(s.srq))
	// The ring stays mapped while the data plane can reach it (the
	// descriptor's Memory).
	return s.ext.dealloc()
}
