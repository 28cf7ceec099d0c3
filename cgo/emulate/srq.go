//go:build cgo && linux

package emulate

/*
#include "uverbs_abi.h"
*/
import "C"

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// Shared receive queues. A user SRQ is created on the model over the ring
// and doorbell record libmlx5 allocated (simadopt.SharedReceiveQueue):
// struct mlx5_ib_create_srq names the ring (whose free list libmlx5 has
// linked) and the doorbell record. The checks are the uverbs core's
// (__uverbs_create_xsrq, ib_uverbs_modify_srq, ib_uverbs_query_srq,
// ib_uverbs_destroy_srq) and mlx5_ib's (mlx5_ib_create_srq,
// create_srq_user, mlx5_ib_modify_srq), with their errnos. libibverbs tries
// the ioctl method SRQ_CREATE first; the model does not answer it
// (EPROTONOSUPPORT, as a kernel without it), so libibverbs sends the write
// command.

// objSRQ is the kind of an SRQ object; a value apart from the other kinds'
// sequence.
const objSRQ objKind = 64

// srqObject is what a context keeps of an SRQ besides the model's queue.
type srqObject struct {
	srq provider.SRQ
	// max is the WQE count (a power of two), maxSGE the scatter entries
	// the library asked for. The armed limit is the model's
	// (provider.SRQLimiter).
	max, maxSGE uint32
}

// srqRequest is what CREATE_SRQ asks for.
type srqRequest struct {
	pd            uint32
	maxWR, maxSGE uint32
	userHandle    uint64 // what an async event names (libibverbs' SRQ)
	vendor        []byte // struct mlx5_ib_create_srq
}

// createSRQ checks a CREATE_SRQ request as mlx5_ib_create_srq and
// create_srq_user do and creates the SRQ on the model.
func (k *kernel) createSRQ(f *ufile, r srqRequest) (handle, srqn, maxWR uint32, en syscall.Errno) {
	uc := f.uctx
	p, en := uc.object(r.pd, objPD)
	if en != 0 {
		return 0, 0, 0, en
	}
	attr := f.dev.Attr
	// mlx5_ib_create_srq: max_wr below 1 << log_max_srq_sz, max_sge within
	// max_wqe_sz_rq's data segments.
	if r.maxWR >= attr.MaxSRQWR+1 || r.maxSGE > attr.MaxSGE {
		return 0, 0, 0, unix.EINVAL
	}
	count := uint32(1)
	for count < r.maxWR+1 {
		count <<= 1
	}
	desc := uint32(16 + r.maxSGE*16)
	stride := uint32(32)
	for stride < desc {
		stride <<= 1
	}
	// create_srq_user: the request as far as the library sent it, the
	// rest zero; bytes beyond the structure must be zero (EINVAL), and so
	// must the reserved fields.
	var ucmd C.struct_mlx5_ib_create_srq
	n := copy(bytesOf(&ucmd), r.vendor)
	for _, b := range r.vendor[n:] {
		if b != 0 {
			return 0, 0, 0, unix.EINVAL
		}
	}
	if ucmd.reserved0 != 0 || ucmd.reserved1 != 0 {
		return 0, 0, 0, unix.EINVAL
	}
	if uint32(ucmd.flags)&C.MLX5_SRQ_FLAG_SIGNATURE != 0 {
		// WQE signatures the model does not check.
		return 0, 0, 0, unix.EOPNOTSUPP
	}
	if count < 2 {
		// A one-WQE SRQ can never hold a posted WQE (the free list needs
		// a tail); mlx5_ib creates it, the model does not.
		return 0, 0, 0, unix.EOPNOTSUPP
	}
	buf, db := uint64(ucmd.buf_addr), uint64(ucmd.db_addr)
	// ib_umem_get of the ring, mlx5_ib_db_map_user of the record.
	if en := k.checkMapped(buf, uint64(count)*uint64(stride)); en != 0 {
		return 0, 0, 0, en
	}
	if en := k.checkMapped(db, 4); en != 0 {
		return 0, 0, 0, en
	}
	if buf%uint64(stride) != 0 || db%4 != 0 {
		// The model's aligned accesses (libmlx5 page-aligns the ring).
		return 0, 0, 0, unix.EINVAL
	}
	s, err := simadopt.SharedReceiveQueue(p.pd, simadopt.SRQConfig{
		// The library's memory, not Go's: it reaches the model as
		// pointers without uintptr conversions vet would flag.
		Ring: *(*unsafe.Pointer)(unsafe.Pointer(&buf)), Count: count, Stride: stride,
		DBRec: *(*unsafe.Pointer)(unsafe.Pointer(&db)),
	})
	if err != nil {
		return 0, 0, 0, errnoOfModel(err)
	}
	srqn, _ = simadopt.SharedReceiveQueueNumber(s)
	p.users++
	src := uc.async.add(asyncKey{asyncSRQ, srqn}, r.userHandle, nil)
	h := uc.addObject(&uobject{kind: objSRQ, owner: r.pd, srq: &srqObject{srq: s, max: count, maxSGE: r.maxSGE}, async: src})
	return h, srqn, count - 1, 0
}

// destroySRQ destroys an SRQ and returns the async events reported for
// it (see asyncEvents.release).
func (k *kernel) destroySRQ(f *ufile, h uint64) (uint32, syscall.Errno) {
	o, en := f.uctx.destroyable(h, objSRQ)
	if en != 0 {
		return 0, en
	}
	o.close()
	f.uctx.removeObject(uint32(h))
	if p, ok := f.uctx.objects[o.owner]; ok {
		p.users--
	}
	return f.uctx.async.release(o.async), 0
}

func (k *kernel) writeCreateSRQ(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_create_srq
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	h, srqn, maxWR, en := k.createSRQ(f, srqRequest{
		pd: uint32(req.pd_handle), maxWR: uint32(req.max_wr), maxSGE: uint32(req.max_sge),
		userHandle: uint64(req.user_handle), vendor: c.udataIn,
	})
	if en != 0 {
		return en
	}
	// The core's srqn is an XRC SRQ's number only; mlx5's vendor part
	// carries it for every SRQ.
	resp := C.struct_ib_uverbs_create_srq_resp{srq_handle: C.__u32(h), max_wr: C.__u32(maxWR), max_sge: req.max_sge}
	vendor := C.struct_mlx5_ib_create_srq_resp{srqn: C.__u32(srqn)}
	if en = c.response(bytesOf(&resp)); en == 0 {
		en = copyOut(c.udataOut, bytesOf(&vendor)[:min(c.udataLen, int(unsafe.Sizeof(vendor)))])
	}
	if en != 0 {
		_, _ = k.destroySRQ(f, uint64(h))
	}
	return en
}

// writeModifySRQ is mlx5_ib_modify_srq: resizing (IB_SRQ_MAX_WR) is
// EINVAL, a limit at or above the WQE count EINVAL; a limit arms the
// model's SRQ limit (mlx5_cmd_arm_srq), which raises SRQ_LIMIT_REACHED
// once and disarms, 0 disarms. Other mask bits are ignored, as the kernel
// ignores them.
func (k *kernel) writeModifySRQ(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_modify_srq
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	o, en := f.uctx.object(uint32(req.srq_handle), objSRQ)
	if en != 0 {
		return en
	}
	mask := uint32(req.attr_mask)
	if mask&C.IBV_SRQ_MAX_WR != 0 {
		return unix.EINVAL
	}
	if mask&C.IBV_SRQ_LIMIT != 0 {
		limit := uint32(req.srq_limit)
		if limit >= o.srq.max {
			return unix.EINVAL
		}
		l, ok := o.srq.srq.(provider.SRQLimiter)
		if !ok {
			return unix.EOPNOTSUPP
		}
		if err := l.ArmLimit(limit); err != nil {
			return errnoOfModel(err)
		}
	}
	return 0
}

// writeQuerySRQ is mlx5_ib_query_srq: max_wr is the WQE count less one,
// max_sge what the library asked for, srq_limit the armed limit (0 once
// the limit event was raised, as the firmware's SRQ context reads).
func (k *kernel) writeQuerySRQ(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_query_srq
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	o, en := f.uctx.object(uint32(req.srq_handle), objSRQ)
	if en != 0 {
		return en
	}
	var limit uint32
	if l, ok := o.srq.srq.(provider.SRQLimiter); ok {
		n, err := l.Limit()
		if err != nil {
			return errnoOfModel(err)
		}
		limit = n
	}
	resp := C.struct_ib_uverbs_query_srq_resp{max_wr: C.__u32(o.srq.max - 1), max_sge: C.__u32(o.srq.maxSGE), srq_limit: C.__u32(limit)}
	return c.response(bytesOf(&resp))
}

func (k *kernel) writeDestroySRQ(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_destroy_srq
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	n, en := k.destroySRQ(f, uint64(req.srq_handle))
	if en != 0 {
		return en
	}
	resp := C.struct_ib_uverbs_destroy_srq_resp{events_reported: C.__u32(n)}
	return c.response(bytesOf(&resp))
}

func init() {
	for cmd, w := range map[uint32]*writeCmd{
		C.IB_USER_VERBS_CMD_CREATE_SRQ: {
			name: "CREATE_SRQ", reqSize: C.sizeof_struct_ib_uverbs_create_srq, udata: true,
			respSize: C.sizeof_struct_ib_uverbs_create_srq_resp, context: true,
			run: (*kernel).writeCreateSRQ,
		},
		C.IB_USER_VERBS_CMD_MODIFY_SRQ: {
			name: "MODIFY_SRQ", reqSize: C.sizeof_struct_ib_uverbs_modify_srq, udata: true, context: true,
			run: (*kernel).writeModifySRQ,
		},
		C.IB_USER_VERBS_CMD_QUERY_SRQ: {
			name: "QUERY_SRQ", reqSize: C.sizeof_struct_ib_uverbs_query_srq,
			respSize: C.sizeof_struct_ib_uverbs_query_srq_resp, context: true,
			run: (*kernel).writeQuerySRQ,
		},
		C.IB_USER_VERBS_CMD_DESTROY_SRQ: {
			name: "DESTROY_SRQ", reqSize: C.sizeof_struct_ib_uverbs_destroy_srq,
			respSize: C.sizeof_struct_ib_uverbs_destroy_srq_resp,
			run:      (*kernel).writeDestroySRQ,
		},
	} {
		writeCmds[cmd] = w
	}
}
