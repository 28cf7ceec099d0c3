package ctx

import "fmt"

// srqLimitHandle is what a provider's SRQ implements when it has the SRQ
// limit (provider.SRQLimiter).
type srqLimitHandle interface {
	ArmLimit(limit uint32) error
	Limit() (uint32, error)
}

// ArmLimit arms the SRQ limit (ibv_modify_srq with IBV_SRQ_LIMIT): once
// the receive WQEs posted to the SRQ and not yet consumed drop below
// limit, the device raises one EventSRQLimitReached (see EventRouter)
// and disarms itself, as a ConnectX does; the application posts more
// receives and arms again. 0 disarms. A limit at or above the SRQ's WQE
// count is ErrInvalidArgument; a provider without the limit
// ErrNotSupported.
func (s *SharedReceiveQueue) ArmLimit(limit uint32) error {
	const op = "arm SRQ limit"
	if err := s.lock(op); err != nil {
		return err
	}
	defer s.t.mu.Unlock()
	h, ok := s.h.(srqLimitHandle)
	if !ok {
		return &OpError{Op: op, Err: fmt.Errorf("provider has no SRQ limit: %w", ErrNotSupported)}
	}
	return opErr(op, h.ArmLimit(limit))
}

// Limit returns the armed SRQ limit (ibv_query_srq's srq_limit): 0 when
// disarmed, as it reads again once the limit event was raised.
func (s *SharedReceiveQueue) Limit() (uint32, error) {
	const op = "query SRQ limit"
	if err := s.lock(op); err != nil {
		return 0, err
	}
	defer s.t.mu.Unlock()
	h, ok := s.h.(srqLimitHandle)
	if !ok {
		return 0, &OpError{Op: op, Err: fmt.Errorf("provider has no SRQ limit: %w", ErrNotSupported)}
	}
	n, err := h.Limit()
	if err != nil {
		return 0, opErr(op, err)
	}
	return n, nil
}
