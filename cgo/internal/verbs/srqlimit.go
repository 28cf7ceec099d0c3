//go:build cgo && linux

package verbs

/*
#include "mlx5kit_verbs.h"
*/
import "C"

import "fmt"

// ArmLimit arms the SRQ limit (ibv_modify_srq with IBV_SRQ_LIMIT): the
// device raises IBV_EVENT_SRQ_LIMIT_REACHED once when the posted receive
// WQEs drop below limit, and disarms. 0 disarms. The kernel refuses a limit
// at or above the SRQ's WQE count (EINVAL).
func (s *SharedReceiveQueue) ArmLimit(limit uint32) error {
	const verb = "ibv_modify_srq"
	if err := s.pd.d.use(verb); err != nil {
		return err
	}
	defer s.pd.d.mu.Unlock()
	if s.closed {
		return errClosed(verb)
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
