package transport

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/seam"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// closer stops the data plane of one queue pair when ctx closes the QP,
// directly or with a parent (its CQ, SRQ, PD, the Context), on whichever
// goroutine closes it: it closes the send queue, so that a stage begun
// before and finished after fails with ctx.ErrClosed and rings nothing, and
// the receive ring likewise. The memory both write stays mapped while they
// are reachable (the descriptor's Memory, which they keep); the closer
// only makes the posts fail.
//
// It then tells the Pollers the queue was added to (their owner drops
// it on its own goroutine: see Poller.reap). That list is the one
// piece of the queue's bookkeeping that the closing goroutine reads, so
// it has a lock of its own, which only Add, Remove and the close take.
//
// Setup registers one closer per QP (internal/seam.OnClose) and points it
// at the rings of each setup: a Reset builds new ones.
type closer struct {
	qp *ctx.QueuePair
	sq atomic.Pointer[wqebuilder.SendQueue]
	rq atomic.Pointer[recvRing]

	mu sync.Mutex
	// pollers are the Pollers the queue was added to.
	pollers []*Poller
}

// close closes the rings the closer points at and flags the Pollers
// the queue was added to.
func (c *closer) close() {
	if sq := c.sq.Load(); sq != nil {
		sq.Close()
	}
	if r := c.rq.Load(); r != nil {
		r.closed.Store(1)
	}
	c.mu.Lock()
	for _, d := range c.pollers {
		d.reapFlag.Or(reapBit)
	}
	c.mu.Unlock()
}

// addPoller records that the queue was added to d; removePoller
// that it left.
func (c *closer) addPoller(d *Poller) {
	c.mu.Lock()
	c.pollers = append(c.pollers, d)
	c.mu.Unlock()
}

func (c *closer) removePoller(d *Poller) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.pollers {
		if x == d {
			c.pollers = append(c.pollers[:i], c.pollers[i+1:]...)
			return
		}
	}
}

// closeWithQP makes q's send queue and own receive ring close with its QP.
func closeWithQP(q *Queue) {
	c := q.closer
	if c == nil || c.qp != q.qp {
		c = &closer{qp: q.qp}
		q.closer = c
		seam.OnClose(q.qp, c.close)
	}
	c.sq.Store(q.sq)
	var rq *recvRing
	if q.recv == q.rq {
		rq = q.rq
	}
	c.rq.Store(rq)
	// A QP closed before the stores above ran the hook already.
	if q.qp.Closed() {
		c.close()
	}
}

// polling returns an error wrapping ctx.ErrBusy when the ring of one of
// q's open completion queues is inside a poll (a Poll of its Poller,
// whether q was added to it or not, or a poll of NewCQ's ring): its batch
// may hold CQEs of q that the poll goes on to hand over, and the ring
// cannot be compacted (monocq.CQ.Discard does nothing then), so a Reset
// there would leave CQEs that name WQE indexes the rebuilt rings reuse.
// Reset asks before it moves the queue pair.
func (q *Queue) polling() error {
	c := q.closer
	if c == nil || c.qp != q.qp {
		return nil
	}
	cfg := q.qp.Config()
	for _, cq := range [2]*ctx.CompletionQueue{cfg.SendCQ, cfg.RecvCQ} {
		if cq == nil {
			continue
		}
		claimsMu.Lock()
		cl := claims[cq]
		claimsMu.Unlock()
		if cl != nil && !cq.Closed() && cl.ring.InBatch() {
			return fmt.Errorf("QP %#x: the ring of CQ %#x is inside a poll: %w", q.qpn, cq.CQN(), ctx.ErrBusy)
		}
	}
	return nil
}

// discard removes the CQEs of q that are still in the rings of its open
// completion queues, as rdma-core's mlx5_modify_qp cleans the QP's CQs:
// through the Poller that holds a ring (see Poller.discard), which q was
// added to or not, or through the ring alone (NewCQ's, or a closed
// Poller's, which the next Poller goes on from). Reset calls it, through
// setup, once the queue pair is in RESET: the device writes no more CQEs
// for it.
func (c *closer) discard(q *Queue) {
	cfg := q.qp.Config()
	for i, cq := range [2]*ctx.CompletionQueue{cfg.SendCQ, cfg.RecvCQ} {
		if cq == nil || i == 1 && cq == cfg.SendCQ {
			continue
		}
		claimsMu.Lock()
		cl := claims[cq]
		var p *Poller
		if cl != nil {
			p = cl.poller
		}
		claimsMu.Unlock()
		switch {
		case p != nil:
			p.discard(q)
		case cl != nil && !cq.Closed():
			discardFrom(cl.ring, q)
		}
	}
}
