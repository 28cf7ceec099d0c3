package transport

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// NewCQ returns a monocq poller over the ring of cq.
func NewCQ(cq *ctx.CompletionQueue) (*monocq.CQ, error) {
	if cq == nil {
		return nil, fmt.Errorf("nil completion queue: %w", ErrInvalidConfig)
	}
	if cq.Closed() {
		return nil, fmt.Errorf("completion queue: %w", ErrClosed)
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
// A Dispatcher is used by one goroutine at a time.
type Dispatcher struct {
	cq    *monocq.CQ
	owner *ctx.CompletionQueue
	table *monocq.Table[Queue]
	wc    Completion
	err   error

	unknown uint64
	polled  uint64
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
// its DCT number).
func (p *Dispatcher) Add(q *Queue) error {
	if q == nil {
		return fmt.Errorf("poller: add: nil queue: %w", ErrInvalidConfig)
	}
	if err := p.table.Register(q.qpn, q); err != nil {
		return fmt.Errorf("poller: add QP %#x: %w", q.qpn, err)
	}
	q.dispatchers = append(q.dispatchers, p)
	return nil
}

// Remove stops routing the completions of q.
func (p *Dispatcher) Remove(q *Queue) error {
	if q == nil {
		return fmt.Errorf("poller: remove: nil queue: %w", ErrInvalidConfig)
	}
	if p.table.Lookup(q.qpn) != q {
		return fmt.Errorf("poller: remove QP %#x: %w", q.qpn, ErrUnknownQPN)
	}
	if _, err := p.table.Unregister(q.qpn); err != nil {
		return fmt.Errorf("poller: remove QP %#x: %w", q.qpn, err)
	}
	for i, d := range q.dispatchers {
		if d == p {
			q.dispatchers = append(q.dispatchers[:i], q.dispatchers[i+1:]...)
			break
		}
	}
	return nil
}

// Lookup returns the queue added for qpn, or nil.
func (p *Dispatcher) Lookup(qpn uint32) *Queue { return p.table.Lookup(qpn) }

// Len returns the number of queue pairs added.
func (p *Dispatcher) Len() int { return p.table.Len() }

// CQ returns the monocq poller of the ring.
func (p *Dispatcher) CQ() *monocq.CQ { return p.cq }

// Ring returns the monocq poller to take the next batch from, or nil when
// the completion queue has been closed (its ring is gone).
func (p *Dispatcher) Ring() *monocq.CQ {
	if p.owner.Closed() {
		return nil
	}
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
		p.err = fmt.Errorf("poller: CQ %#x: %w (QPN %#x, opcode %v)", p.cq.CQN(), ErrUnknownQPN, p.wc.QPN, p.wc.Opcode)
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
		p.err = fmt.Errorf("poller: CQ %#x: %w", p.cq.CQN(), ErrClosed)
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
