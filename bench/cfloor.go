//go:build cgo

package bench

/*
#cgo CFLAGS: -O2 -Wall
#include <stdlib.h>
#include "cfloor.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// haveCFloor reports whether the C baselines are built in.
const haveCFloor = true

// cFloor is the C floor over a queueMemory: the post + poll loop written in
// C with rdma-core's mlx5dv_set_ctrl_seg and mlx5dv_set_data_seg (cfloor.c).
type cFloor struct {
	q *C.struct_floor_queue
}

// newCFloor builds the C queue state over m. The state and its wr_id array
// live in C memory; Free releases them.
func newCFloor(m *queueMemory) (*cFloor, error) {
	q := (*C.struct_floor_queue)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_floor_queue{}))))
	if q == nil {
		return nil, fmt.Errorf("bench: C floor: calloc failed")
	}
	q.wrid = (*C.uint64_t)(C.calloc(C.size_t(m.wqeCnt), 8))
	if q.wrid == nil {
		C.free(unsafe.Pointer(q))
		return nil, fmt.Errorf("bench: C floor: calloc failed")
	}
	q.sq_start = (*C.uint8_t)(m.sq)
	q.sq_end = (*C.uint8_t)(m.sqEnd)
	q.wqe_cnt = C.uint32_t(m.wqeCnt)
	q.qpn = C.uint32_t(m.qpn)
	q.qp_dbrec = (*C.uint32_t)(m.qpDBRec)
	q.bf_reg = (*C.uint8_t)(m.bf)
	q.bf_size = C.uint32_t(m.bfSize)
	q.cq_buf = (*C.uint8_t)(m.cq)
	q.cqe_cnt = C.uint32_t(m.cqeCnt)
	q.cq_log_cnt = C.uint32_t(bits.TrailingZeros32(m.cqeCnt))
	q.sop_drop_qpn = C.uint32_t(bits.ReverseBytes32(uint32(prm.OpRdmaWriteImm)<<prm.CQESendOpShift | m.qpn))
	q.cq_dbrec = (*C.uint32_t)(m.cqDBRec)
	q.laddr = C.uint64_t(uintptr(m.payload))
	q.raddr = benchRAddr
	q.lkey = benchLKey
	q.rkey = benchRKey
	q.len = benchLen
	q.imm = C.uint32_t(benchImm)
	return &cFloor{q: q}, nil
}

// free releases the C state (not the rings).
func (f *cFloor) free() {
	C.free(unsafe.Pointer(f.q.wrid))
	C.free(unsafe.Pointer(f.q))
	f.q = nil
}

// run posts, completes and polls n times in one cgo call and returns the sum
// of the polled wr_ids (0 + 1 + ... + n-1 when all went right).
func (f *cFloor) run(n uint64) (uint64, error) {
	f.q.wrid_sum = 0
	if rc := C.floor_run(f.q, C.uint64_t(n)); rc != 0 {
		return 0, floorError("run", int(rc))
	}
	return uint64(f.q.wrid_sum), nil
}

// runPostCall is run with the post called out of line inside C
// (floor_run_post_call).
func (f *cFloor) runPostCall(n uint64) (uint64, error) {
	f.q.wrid_sum = 0
	if rc := C.floor_run_post_call(f.q, C.uint64_t(n)); rc != 0 {
		return 0, floorError("run with the post called", int(rc))
	}
	return uint64(f.q.wrid_sum), nil
}

// post posts one WQE through one cgo call.
func (f *cFloor) post(wrID uint64) error {
	if rc := C.floor_post_one(f.q, C.uint64_t(wrID)); rc != 0 {
		return floorError("post", int(rc))
	}
	return nil
}

// poll polls one CQE through one cgo call.
func (f *cFloor) poll() (uint64, error) {
	if rc := C.floor_poll_one(f.q); rc != 0 {
		return 0, floorError("poll", int(rc))
	}
	return uint64(f.q.polled_wrid), nil
}

// completeInC runs the C completer once (through one cgo call).
func (f *cFloor) completeInC() { C.floor_complete_one(f.q) }

// producerIndex and consumerIndex expose the C loop's counters to tests.
func (f *cFloor) producerIndex() uint32 { return uint32(f.q.cur_post) }
func (f *cFloor) consumerIndex() uint32 { return uint32(f.q.cons_index) }

// Further errors of the C loop.
var (
	errBadCQE   = errors.New("unexpected CQE opcode")
	errBadWRID  = errors.New("completion for the wrong work request")
	errUnknownC = errors.New("unknown return code")
)

// floorError maps a return code of cfloor.c to an error naming the
// operation.
func floorError(op string, rc int) error {
	var err error
	switch rc {
	case C.FLOOR_SQ_FULL:
		err = errSQFull
	case C.FLOOR_CQ_EMPTY:
		err = errCQEmpty
	case C.FLOOR_BAD_CQE:
		err = errBadCQE
	case C.FLOOR_BAD_WRID:
		err = errBadWRID
	default:
		err = fmt.Errorf("%w %d", errUnknownC, rc)
	}
	return fmt.Errorf("bench: C floor %s: %w", op, err)
}

// setLocalAddress changes the address of the SGE the loop posts.
func (f *cFloor) setLocalAddress(addr uint64) { f.q.laddr = C.uint64_t(addr) }
