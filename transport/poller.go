package transport

import (
	"fmt"
	"sync/atomic"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// NewCQ returns a monocq poller over the ring of cq.
func NewCQ(cq *ctx.CompletionQueue) (*monocq.CQ, error) {
	if cq == nil {
		return nil, fmt.Errorf("nil completion queue: %w", ctx.ErrInvalidArgument)
	}
	if cq.Closed() {
		return nil, fmt.Errorf("completion queue: %w", ctx.ErrClosed)
	}
	d := cq.Descriptor()
	return monocq.New(monocq.Config{Buf: d.Buf, CQECnt: d.CQECnt, CQESize: d.CQESize, DBRec: d.DBRec, UAR: d.UAR, CQN: d.CQN, Memory: d.Memory})
}

// Dispatcher is the state behind the Poller of packages rc, dc and ud: a
// monocq poller over one completion queue, the table that maps a QPN to its
// Queue, and the Completion each CQE is decoded into. Each of those packages
// defines its own Poller type around a Dispatcher, with a Poll method the
// caller's package can inline: Go inlines a method only when the package
// that defines its receiver type is imported by the caller (or the call sits
// in a body inlined from such a package), so an alias of an internal type
// would not do.
//
// A Dispatcher is used by one goroutine at a time, its owner. The queue
// pairs added to it may be closed on any goroutine, also while the owner
// polls: the close only sets reapFlag, and the owner's next Poll (Reap)
// drops the closed queue from the table itself, once no CQE of it is left
// in the ring (see reap). Until then the CQEs of a closed queue are handed
// over as the device wrote them, so that whether a completion comes before
// or after a close on another goroutine decides nothing.
type Dispatcher struct {
	cq    *monocq.CQ
	owner *ctx.CompletionQueue
	table *monocq.Table[Queue]
	// reapFlag is 1 when a queue added here was closed (set by its
	// closer, on the closing goroutine) or a closed queue is still
	// draining (set by reap): Ring, which loads it once per poll, then
	// returns nil so that the Poller calls Reap.
	reapFlag atomic.Uint32
	wc       Completion
	err      error

	unknown uint64
	polled  uint64

	// queues are the open queues added, and draining the closed ones
	// still in the table; both are the owner's.
	queues   []*Queue
	draining []drain
}

// drain is a closed queue still in a Dispatcher's table: from the consumer
// index at, the ring may still hold CQEs of it.
type drain struct {
	q  *Queue
	at uint32
}

// NewDispatcher returns a dispatcher for cq with no queue pairs yet.
func NewDispatcher(transport string, cq *ctx.CompletionQueue) (*Dispatcher, error) {
	m, err := NewCQ(cq)
	if err != nil {
		return nil, Errorf(transport, "new poller", "%w", err)
	}
	return &Dispatcher{cq: m, owner: cq, table: new(monocq.Table[Queue])}, nil
}

// Add makes the dispatcher route the completions of q (by its QPN; a DCT by
// its DCT number). A closed queue is refused (ctx.ErrClosed). A closed queue
// that still holds q's QPN (the device reuses the QPNs of destroyed QPs) is
// dropped first: its QPN is q's from now on.
func (p *Dispatcher) Add(q *Queue) error {
	if q == nil {
		return fmt.Errorf("poller: add: nil queue: %w", ctx.ErrInvalidArgument)
	}
	if q.qp == nil || q.closer == nil {
		return fmt.Errorf("poller: add: queue not set up: %w", ctx.ErrInvalidArgument)
	}
	if q.qp.Closed() {
		return fmt.Errorf("poller: add QP %#x: %w", q.qpn, ctx.ErrClosed)
	}
	if old := p.table.Lookup(q.qpn); old != nil && old != q && old.qp.Closed() {
		p.drop(old)
	}
	if err := p.table.Register(q.qpn, q); err != nil {
		return fmt.Errorf("poller: add QP %#x: %w", q.qpn, err)
	}
	p.queues = append(p.queues, q)
	q.closer.addDispatcher(p)
	// A close that ran before the dispatcher was on the closer's list
	// did not flag it: look again.
	if q.qp.Closed() {
		p.reapFlag.Store(1)
	}
	return nil
}

// Remove stops routing the completions of q at once, closed or not (CQEs
// of it still in the ring then count as ones of an unknown QPN).
func (p *Dispatcher) Remove(q *Queue) error {
	if q == nil {
		return fmt.Errorf("poller: remove: nil queue: %w", ctx.ErrInvalidArgument)
	}
	if p.table.Lookup(q.qpn) != q {
		return fmt.Errorf("poller: remove QP %#x: %w", q.qpn, monocq.ErrUnknownQPN)
	}
	p.drop(q)
	return nil
}

// drop takes q, which is in the table, out of the dispatcher.
func (p *Dispatcher) drop(q *Queue) {
	_, _ = p.table.Unregister(q.qpn)
	for i, x := range p.queues {
		if x == q {
			p.queues = append(p.queues[:i], p.queues[i+1:]...)
			break
		}
	}
	for i, x := range p.draining {
		if x.q == q {
			p.draining = append(p.draining[:i], p.draining[i+1:]...)
			break
		}
	}
	q.closer.removeDispatcher(p)
}

// reap runs on the owner's goroutine, in Reap, while reapFlag is set: it
// finds the queues closed since the last reap and drops each closed queue
// once no CQE of it can be left in the ring.
//
// A closed queue's CQEs are all in the ring once the provider destroyed
// the QP, which ctx does under the Context's lock, after it set the closed
// flag and ran the close hooks: reap takes that lock once (through
// ctx.QueuePair.QPN) for each queue it finds closed, so that the destroy
// is complete. From then on, every CQE of the queue lies between the
// consumer index of that moment and CQECnt slots past it (the device
// writes no further than that past the index last released); the queue is
// dropped when the ring is found empty or the consumer index went that
// far.
func (p *Dispatcher) reap() {
	p.reapFlag.Store(0)
	for i := 0; i < len(p.queues); {
		q := p.queues[i]
		if !q.qp.Closed() {
			i++
			continue
		}
		_ = q.qp.QPN() // waits for the destroy (see above)
		p.queues = append(p.queues[:i], p.queues[i+1:]...)
		p.draining = append(p.draining, drain{q: q, at: p.cq.ConsumerIndex()})
	}
	if len(p.draining) == 0 {
		return
	}
	empty := p.cq.Ready(1) == 0
	ci, cnt := p.cq.ConsumerIndex(), p.cq.CQECnt()
	for i := 0; i < len(p.draining); {
		d := p.draining[i]
		if !empty && ci-d.at < cnt {
			i++
			continue
		}
		_, _ = p.table.Unregister(d.q.qpn)
		d.q.closer.removeDispatcher(p)
		p.draining = append(p.draining[:i], p.draining[i+1:]...)
	}
	if len(p.draining) > 0 {
		p.reapFlag.Store(1)
	}
}

// Lookup returns the queue added for qpn, or nil.
func (p *Dispatcher) Lookup(qpn uint32) *Queue { return p.table.Lookup(qpn) }

// Len returns the number of queue pairs added and not yet dropped (a
// closed queue pair counts until it is dropped).
func (p *Dispatcher) Len() int { return p.table.Len() }

// CQ returns the monocq poller of the ring.
func (p *Dispatcher) CQ() *monocq.CQ { return p.cq }

// Ring returns the monocq poller to take the next batch from, or nil when
// the completion queue has been closed or a queue added here was: the
// caller then calls Reap, which returns it or nil. A Poller calls Ring
// once per Poll; it inlines and makes no call.
func (p *Dispatcher) Ring() *monocq.CQ {
	if p.owner.Closed() || p.reapFlag.Load() != 0 {
		return nil
	}
	return p.cq
}

// Reap is Ring's slow path: it returns nil when the completion queue has
// been closed (its ring is gone), and otherwise drops the closed queues
// that have no CQE left in the ring (see reap) and returns the ring.
func (p *Dispatcher) Reap() *monocq.CQ {
	if p.owner.Closed() {
		return nil
	}
	p.reap()
	return p.cq
}

// Completion returns the Completion the dispatcher decodes CQEs into.
func (p *Dispatcher) Completion() *Completion { return &p.wc }

// Unknown decodes a CQE whose QPN no queue was added for into the
// dispatcher's Completion, with Status StatusUnknownQPN, and records it.
func (p *Dispatcher) Unknown(c *monocq.CQE) {
	p.wc.decode(nil, c)
	p.wc.Status = StatusUnknownQPN
	p.unknown++
	if p.err == nil {
		p.err = fmt.Errorf("poller: CQ %#x: %w (QPN %#x, opcode %v)", p.cq.CQN(), monocq.ErrUnknownQPN, p.wc.QPN, p.wc.Opcode)
	}
}

// Count adds n to the number of completions dispatched.
func (p *Dispatcher) Count(n int) { p.polled += uint64(n) }

// Err returns the first problem met: the ring's own (monocq ErrOverrun,
// ErrCorrupt), a CQE for an unknown QPN, or a closed CQ.
func (p *Dispatcher) Err() error {
	if err := p.cq.Err(); err != nil {
		return err
	}
	if p.err == nil && p.owner.Closed() {
		p.err = fmt.Errorf("poller: CQ %#x: %w", p.cq.CQN(), ctx.ErrClosed)
	}
	return p.err
}

// PollerStats counts what a poller saw.
type PollerStats struct {
	// Completions is the number of CQEs dispatched.
	Completions uint64
	// UnknownQPN is the number of CQEs for a QPN no queue was added for.
	UnknownQPN uint64
}

// Stats returns the counters.
func (p *Dispatcher) Stats() PollerStats {
	return PollerStats{Completions: p.polled, UnknownQPN: p.unknown}
}
