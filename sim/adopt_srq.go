package sim

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// adoptSharedReceiveQueue creates a shared receive queue of p (a protection
// domain of the model) over the caller's ring and doorbell record: the
// responder takes receive WQEs from that ring, following the WQE counter
// of the doorbell record, and writes the SRQ number into the CQEs of the
// receives it completes. The memory must stay mapped until the queue is
// closed; the model neither initialises nor frees it.
func adoptSharedReceiveQueue(p provider.ProtectionDomain, cfg simadopt.SRQConfig) (provider.SRQ, error) {
	const op = "sim: adopt SRQ"
	bad := func(format string, args ...any) error {
		return provider.Errorf(op, format+": %w", append(args, ctx.ErrInvalidArgument)...)
	}
	pr, ok := p.(*pd)
	if !ok {
		return nil, bad("not a protection domain of the software HCA")
	}
	if pr.dev.dead() {
		return nil, errDeviceFatal(op)
	}
	maxStride := roundPow2(prm.SRQNextSize + maxSGE*prm.DataSize)
	s := cfg.Stride
	switch {
	case cfg.Ring == nil || cfg.DBRec == nil:
		return nil, bad("nil ring or doorbell record")
	case cfg.Count < 2 || cfg.Count > maxRecvWR || cfg.Count&(cfg.Count-1) != 0:
		return nil, bad("%d WQEs (a power of two from 2 to %d)", cfg.Count, maxRecvWR)
	case s < 32 || s > maxStride || s&(s-1) != 0:
		return nil, bad("WQE stride %d (a power of two from 32 to %d)", s, maxStride)
	case uintptr(cfg.Ring)%uintptr(s) != 0 || uintptr(cfg.DBRec)%4 != 0:
		return nil, bad("ring %p or doorbell record %p misaligned", cfg.Ring, cfg.DBRec)
	}
	x := &srq{f: pr.f, pd: pr, ring: cfg.Ring, cnt: cfg.Count, stride: s,
		maxSGE: (s - prm.SRQNextSize) / prm.DataSize, db: cfg.DBRec}
	pr.f.mu.Lock()
	defer pr.f.mu.Unlock()
	if pr.closed {
		return nil, provider.Errorf(op, "PD: %w", ctx.ErrClosed)
	}
	srqn, _, ok := pr.f.srqns.take()
	if !ok {
		return nil, exhausted(op, "SRQNs", &pr.f.srqns)
	}
	x.srqn = srqn
	pr.f.addSRQ(x)
	x.mem = keepMemory(nil)
	return x, nil
}

// sharedReceiveQueueNumber returns the SRQ number of a shared receive
// queue of the model (what mlx5_ib returns to libmlx5 as srqn); ok is false
// for a queue of another provider.
func sharedReceiveQueueNumber(s provider.SRQ) (srqn uint32, ok bool) {
	x, ok := s.(*srq)
	if !ok {
		return 0, false
	}
	return x.srqn, true
}

// adoptDCT creates the DCT of an adoptQueuePair call: no rings of the
// caller's (a DCT receives through its SRQ and sends nothing), so the
// doorbell record the model clears on the way to RESET is one of its own.
func adoptDCT(pr *pd, sendCQ, recvCQ *cq, sr *srq, cfg simadopt.QPConfig, op string) (provider.QueuePair, error) {
	bad := func(format string, args ...any) error {
		return provider.Errorf(op, format+": %w", append(args, ctx.ErrInvalidArgument)...)
	}
	switch {
	case recvCQ == nil:
		return nil, bad("receive CQ of another provider")
	case sr == nil:
		return nil, bad("a DCT needs an SRQ")
	case cfg.SQ != nil || cfg.SQCount != 0 || cfg.RQ != nil || cfg.RQCount != 0:
		return nil, bad("a DCT has no rings")
	}
	if sendCQ == nil {
		sendCQ = recvCQ
	}
	q := &qp{f: pr.f, dev: pr.dev, pd: pr, typ: ctx.QPTypeDCT, sendCQ: sendCQ, recvCQ: recvCQ, srq: sr,
		dcKey: cfg.DCKey, scatterToCQE: scatterToCQE(ctx.QPTypeDCT, cfg.ScatterToCQE, recvCQ), state: ctx.QPStateReset}
	var err error
	if q.bufs[2], err = region(pageSize); err != nil {
		return nil, provider.Errorf(op, "doorbell record: %w", err)
	}
	q.db = q.bufs[2].Pointer()
	pr.f.mu.Lock()
	defer pr.f.mu.Unlock()
	if pr.closed || sendCQ.closed || recvCQ.closed || sr.closed {
		freeAll(q.bufs[:]...)
		return nil, provider.Errorf(op, "PD, CQ or SRQ: %w", ctx.ErrClosed)
	}
	qpn, _, ok := pr.f.qpns.take()
	if !ok {
		freeAll(q.bufs[:]...)
		return nil, exhausted(op, "QPNs", &pr.f.qpns)
	}
	q.qpn = qpn
	pr.f.addQP(q)
	q.mem = keepMemory(q.bufs[:])
	return q, nil
}

// lookupSRQ returns the live shared receive queue with the given
// number.
func (f *Fabric) lookupSRQ(srqn uint32) (simadopt.SRQInfo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.srqs[srqn]
	if !ok || s.closed {
		return simadopt.SRQInfo{}, false
	}
	return simadopt.SRQInfo{SRQN: s.srqn, Ring: s.ring, Count: s.cnt, Stride: s.stride, DBRec: s.db, PDN: s.pd.pdn}, true
}
