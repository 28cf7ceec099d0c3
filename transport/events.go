package transport

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/seam"
)

// WatchEvents calls fn with every asynchronous event about the queue pair
// (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, QP_LAST_WQE_REACHED, COMM_EST,
// SQ_DRAINED, PATH_MIG, PATH_MIG_ERR), through its context's event router
// (ctx.Context.EventRouter, which from then on consumes every event of the
// context), until the subscription is cancelled or the queue pair (or a
// parent: its CQ, SRQ, PD, the context) closes, so that it never sees the
// events of a later queue pair that reuses the number. A closed queue
// pair is refused with ctx.ErrClosed. fn
// runs on the router's goroutine and must not post or poll: the queue is
// used by one goroutine at a time. A DCT gets none: mlx5_ib passes on no
// event of a DCT, and the software HCA raises none (docs/hardware.md).
func (q *Queue) WatchEvents(fn func(ctx.AsyncEvent)) (*ctx.EventSubscription, error) {
	if q.qp == nil {
		return nil, errZeroQueue
	}
	return watch(q.qp, ctx.EventFilter{QPNs: []uint32{q.qpn}}, fn)
}

// WatchEvents calls fn with every asynchronous event about the shared
// receive queue (SRQ_LIMIT_REACHED, SRQ_ERR), as Queue.WatchEvents does for
// a queue pair: until the subscription is cancelled or the SRQ closes; a
// closed SRQ is refused with ctx.ErrClosed.
func (s *SharedReceiveQueue) WatchEvents(fn func(ctx.AsyncEvent)) (*ctx.EventSubscription, error) {
	if s.srq == nil {
		return nil, errZeroSRQ
	}
	return watch(s.srq, ctx.EventFilter{SRQNs: []uint32{s.SRQN()}}, fn)
}

// errZeroSRQ is the error of a SharedReceiveQueue not made by
// NewSharedReceiveQueue.
var errZeroSRQ = &ctx.OpError{Package: "transport", Op: "watch events", Err: errSRQNotMade}

// errSRQNotMade is the cause of every refusal of a SharedReceiveQueue not
// made by NewSharedReceiveQueue.
var errSRQNotMade = fmt.Errorf("SRQ not made by NewSharedReceiveQueue: %w", ctx.ErrInvalidArgument)

// watch subscribes fn to the events of obj's context that f selects,
// until obj (a *ctx.QueuePair or *ctx.SharedReceiveQueue) closes.
func watch(obj any, f ctx.EventFilter, fn func(ctx.AsyncEvent)) (*ctx.EventSubscription, error) {
	if fn == nil {
		return nil, &ctx.OpError{Package: "transport", Op: "watch events", Err: fmt.Errorf("nil function: %w", ctx.ErrInvalidArgument)}
	}
	s, err := seam.SubscribeUntilClose(obj, f, fn)
	if err != nil {
		return nil, err
	}
	return s.(*ctx.EventSubscription), nil
}
