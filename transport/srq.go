package transport

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/seam"
	"github.com/mlx5kit/mlx5kit/internal/transport/qpcore"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// SharedReceiveQueue is a shared receive queue: receive WQEs that any queue
// pair attached to it (RC, UD, or a DCT) consumes. Its receive completions
// arrive on the CQ of the QP that consumed the WQE, and that QP's Queue
// hands them back here, so every QP attached to one SRQ must be polled by
// the goroutine that posts to the SRQ.
type SharedReceiveQueue struct {
	srq  *ctx.SharedReceiveQueue
	ring *recvRing
	errs [1]error
}

// NewSharedReceiveQueue creates a shared receive queue in pd, for RC and UD
// queue pairs (Config.SRQ) and DCTs (DCTConfig.SRQ): cfg.Depth receive
// WQEs that may be outstanding, of cfg.MaxSGE scatter entries each
// (default 1).
func NewSharedReceiveQueue(pd *ctx.ProtectionDomain, cfg ctx.SRQConfig) (*SharedReceiveQueue, error) {
	const op, transport = "new SRQ", "transport"
	if pd == nil {
		return nil, qpcore.Errorf(transport, op, "nil protection domain: %w", ctx.ErrInvalidArgument)
	}
	if cfg.Depth == 0 {
		return nil, qpcore.Errorf(transport, op, "depth 0: %w", ctx.ErrInvalidArgument)
	}
	if cfg.MaxSGE == 0 {
		cfg.MaxSGE = 1
	}
	attr, err := pd.Context().Query()
	if err != nil {
		return nil, qpcore.Errorf(transport, op, "%w", err)
	}
	if attr.MaxSRQWR != 0 && cfg.Depth > attr.MaxSRQWR {
		return nil, qpcore.Errorf(transport, op, "depth %d above the device's %d: %w", cfg.Depth, attr.MaxSRQWR, ctx.ErrInvalidArgument)
	}
	if attr.MaxSRQSGE != 0 && cfg.MaxSGE > attr.MaxSRQSGE {
		return nil, qpcore.Errorf(transport, op, "max SGE %d above the device's %d: %w", cfg.MaxSGE, attr.MaxSRQSGE, ctx.ErrInvalidArgument)
	}
	s, err := pd.CreateSRQ(ctx.SRQConfig{Depth: cfg.Depth, MaxSGE: cfg.MaxSGE})
	if err != nil {
		return nil, qpcore.Errorf(transport, op, "%w", err)
	}
	d := provider.SRQDescriptor(s)
	ring, err := newRecvRing(d.Buf, d.DBRec, d.WQECnt, d.Stride, d.MaxRecvSGE, true, d.Head, d.Tail)
	if err != nil {
		_ = s.Close()
		return nil, qpcore.Errorf(transport, op, "descriptor: %w", err)
	}
	ring.errFull = &wqebuilder.PostError{Transport: transport, Op: "post receive", QPN: d.SRQN, SRQ: true, Err: ErrReceiveQueueFull}
	ring.errSGE = &wqebuilder.PostError{Transport: transport, Op: "post receive", QPN: d.SRQN, SRQ: true, Err: wqebuilder.ErrTooManySGE}
	ring.errLength = &wqebuilder.PostError{Transport: transport, Op: "post receive", QPN: d.SRQN, SRQ: true, Err: wqebuilder.ErrSGETooLong}
	ring.errStale = &wqebuilder.PostError{Transport: transport, Op: "post receive", QPN: d.SRQN, SRQ: true, Err: wqebuilder.ErrStaleStage}
	ring.memory = d.Memory
	q := &SharedReceiveQueue{srq: s, ring: ring}
	q.errs[0] = &wqebuilder.PostError{Transport: transport, Op: "post receive", QPN: d.SRQN, SRQ: true, Err: ctx.ErrClosed}
	ring.refusal = q.recvRefusal
	// A stage begun before the SRQ closed (from any goroutine) fails at
	// Finish; the ring it writes stays mapped (ring.memory).
	seam.OnClose(s, func() { ring.closed.Store(1) })
	return q, nil
}

// SRQN returns the SRQ number (0 for a zero SharedReceiveQueue, as its
// other getters return 0 or nil).
func (s *SharedReceiveQueue) SRQN() uint32 {
	if s.srq == nil {
		return 0
	}
	return s.srq.SRQN()
}

// Handle returns the control-plane object.
func (s *SharedReceiveQueue) Handle() *ctx.SharedReceiveQueue { return s.srq }

// MaxSGE returns the scatter entries one WQE may carry.
func (s *SharedReceiveQueue) MaxSGE() uint32 {
	if s.ring == nil {
		return 0
	}
	return s.ring.maxSGE
}

// Outstanding returns the WQEs posted and not yet completed.
func (s *SharedReceiveQueue) Outstanding() uint32 {
	if s.ring == nil {
		return 0
	}
	return s.ring.posted
}

// Free returns how many more WQEs can be posted now.
func (s *SharedReceiveQueue) Free() uint32 {
	if s.ring == nil {
		return 0
	}
	return s.ring.mask - s.ring.posted
}

// BeginRecv starts a receive WQE with the given work request id; add its
// buffers with SGE and post it with Finish (then RingRecvDoorbell) or
// FinishDoorbell.
//
// Like Queue.BeginRecv, the staged post compiles into the caller.
func (s *SharedReceiveQueue) BeginRecv(wrid uint64) RecvStage {
	// Open, and a slot on the free list besides its tail (a zero
	// SharedReceiveQueue's ring has none).
	r := s.ring
	if r == nil {
		r = zeroSRQRecv
	}
	if r.head == r.tail || s.srq.Closed() {
		return r.refuse()
	}
	return r.begin(wrid)
}

// zeroSRQRecv is the ring of a zero SharedReceiveQueue: full (head ==
// tail), so that BeginRecv refuses every post.
var zeroSRQRecv = &recvRing{srq: true, refusal: func() error {
	return &wqebuilder.PostError{Transport: "transport", Op: "post receive", SRQ: true,
		Err: errSRQNotMade}
}}

// recvRefusal is why a post on s cannot go ahead: it is closed, or full.
func (s *SharedReceiveQueue) recvRefusal() error {
	if s.srq.Closed() {
		return s.errs[0]
	}
	return s.ring.errFull
}

// PostRecv posts a receive WQE of one buffer and rings the doorbell: like
// Queue.PostRecv, the staged post in a closure called once.
func (s *SharedReceiveQueue) PostRecv(wrid uint64, addr uint64, length, lkey uint32) error {
	return func() error {
		return s.BeginRecv(wrid).SGE(addr, length, lkey).FinishDoorbell()
	}()
}

// RingRecvDoorbell publishes the receive WQEs finished since the last
// doorbell.
func (s *SharedReceiveQueue) RingRecvDoorbell() {
	if s.Closed() {
		return
	}
	s.ring.ringDoorbell()
}

// Close destroys the SRQ (and, first, every QP attached to it). It may be
// called from any goroutine, also while the owner posts receives and
// polls: posts then fail with ctx.ErrClosed (a stage begun before fails at
// Finish), and the Pollers drop the attached queue pairs as after their
// own Close. It is idempotent.
//
// Close of a nil *SharedReceiveQueue, or of a zero one, returns nil.
func (s *SharedReceiveQueue) Close() error {
	if s == nil || s.srq == nil {
		return nil
	}
	return s.srq.Close()
}

// Closed reports whether the SRQ has been closed. A SharedReceiveQueue
// not made by NewSharedReceiveQueue (a zero value) reports true.
func (s *SharedReceiveQueue) Closed() bool { return s.srq == nil || s.srq.Closed() }
