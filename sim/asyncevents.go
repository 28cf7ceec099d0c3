package sim

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// Async events of shared receive queues, and the subscriber through which
// the model of the kernel side (package cgo/emulate) receives a device's
// events instead of its queue.

// ArmLimit arms the SRQ limit (ibv_modify_srq with IBV_SRQ_LIMIT, the
// firmware's ARM_RQ): once the WQEs posted and not yet consumed drop below
// limit, the device raises EventSRQLimitReached once and disarms (Limit
// reads 0 again), as a ConnectX does. 0 disarms. A limit at or above the
// ring's WQE count is refused, as mlx5_ib_modify_srq refuses it; after a
// fatal device error the verb fails with EIO (FailDevice).
func (s *srq) ArmLimit(limit uint32) error {
	const op = "sim: arm SRQ limit"
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if s.closed {
		return provider.Errorf(op, "%w", ctx.ErrClosed)
	}
	if s.pd.dev.deadLocked() {
		return errDeviceFatal(op)
	}
	if limit >= s.cnt {
		return provider.Errorf(op, "limit %d not below the %d WQEs of the ring: %w", limit, s.cnt, errEINVAL)
	}
	s.limit = limit
	return nil
}

// Limit returns the armed SRQ limit: 0 when disarmed, as it reads once the
// limit event was raised (ibv_query_srq's srq_limit); EIO after a fatal
// device error (FailDevice).
func (s *srq) Limit() (uint32, error) {
	const op = "sim: query SRQ limit"
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if s.closed {
		return 0, provider.Errorf(op, "%w", ctx.ErrClosed)
	}
	if s.pd.dev.deadLocked() {
		return 0, errDeviceFatal(op)
	}
	return s.limit, nil
}

// checkLimit raises the SRQ limit event when the posted WQEs left (those
// the doorbell announced less those consumed) are below the armed limit,
// and disarms (f.mu held; called as a WQE is consumed).
func (s *srq) checkLimit() {
	if s.limit == 0 || uint32(s.counter-s.consumed) >= s.limit {
		return
	}
	s.limit = 0
	s.pd.dev.postEvent(ctx.AsyncEvent{Type: ctx.EventSRQLimitReached, SRQN: s.srqn})
}

// lastWQEReached raises EventQPLastWQEReached for a QP that receives
// through an SRQ and has just entered the error state: it takes no more
// WQEs from the SRQ (f.mu held). A DCT is not a QP the verbs see go to
// error, and raises none; nor does a DCI created on an SRQ, which receives
// nothing through it (as on the emulated kernel, which does not give the
// model a DCI's SRQ).
func (q *qp) lastWQEReached() {
	if q.srq == nil || q.typ == ctx.QPTypeDCT || q.typ == ctx.QPTypeDCI {
		return
	}
	q.dev.postEvent(ctx.AsyncEvent{Type: ctx.EventQPLastWQEReached, QPN: q.qpn})
}

// subscribeAsyncEvents makes fn receive every async event of dev (a device
// of the model) in place of dev's own queue: ReadAsyncEvent and the
// AsyncEventFD of that device then report none. fn runs with the model's
// lock held, on the engine or the caller of a verb; it must not call back
// into the model. nil restores the queue. ok is false for a device of
// another provider.
func subscribeAsyncEvents(dev provider.Device, fn func(ctx.AsyncEvent)) bool {
	d, ok := dev.(*device)
	if !ok {
		return false
	}
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	d.subscriber = fn
	return true
}

var _ provider.SRQLimiter = (*srq)(nil)
