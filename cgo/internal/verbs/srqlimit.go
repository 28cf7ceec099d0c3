//go:build cgo && linux

package verbs

/*
#include "mlx5kit_verbs.h"
*/
import "C"

import (
	"fmt"
	"syscall"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// ArmLimit arms the SRQ limit (ibv_modify_srq with IBV_SRQ_LIMIT): the
// device raises IBV_EVENT_SRQ_LIMIT_REACHED once when the posted receive
// WQEs drop below limit, and disarms. 0 disarms. A limit at or above the
// ring's WQE count is refused here (EINVAL): rdma-core tells the kernel the
// size of the ring and of its wait queue, so the kernel takes up to twice it.
func (s *SharedReceiveQueue) ArmLimit(limit uint32) error {
	const verb = "ibv_modify_srq"
	if err := s.pd.d.use(verb); err != nil {
		return err
	}
	defer s.pd.d.mu.Unlock()
	if s.closed {
		return errClosed(verb)
	}
	if limit >= s.desc.WQECnt {
		return &VerbError{Verb: verb, Detail: fmt.Sprintf("SRQN %#x limit %d: not below the %d WQEs of the ring", s.desc.SRQN, limit, s.desc.WQECnt),
			Errno: syscall.EINVAL, Sentinel: ctx.ErrInvalidArgument}
	}
	attr := C.struct_ibv_srq_attr{srq_limit: C.uint32_t(limit)}
	ret, errno := C.ibv_modify_srq(s.srq, &attr, C.IBV_SRQ_LIMIT)
	return retError(verb, fmt.Sprintf("SRQN %#x limit %d", s.desc.SRQN, limit), int(ret), errno)
}

// Limit returns the armed SRQ limit (ibv_query_srq's srq_limit), 0 when
// disarmed.
func (s *SharedReceiveQueue) Limit() (uint32, error) {
	const verb = "ibv_query_srq"
	if err := s.pd.d.use(verb); err != nil {
		return 0, err
	}
	defer s.pd.d.mu.Unlock()
	if s.closed {
		return 0, errClosed(verb)
	}
	var attr C.struct_ibv_srq_attr
	if ret, errno := C.ibv_query_srq(s.srq, &attr); ret != 0 {
		return 0, retError(verb, fmt.Sprintf("SRQN %#x", s.desc.SRQN), int(ret), errno)
	}
	return uint32(attr.srq_limit), nil
}
