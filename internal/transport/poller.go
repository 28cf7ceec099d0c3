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
	return monocq.New(monocq.Config{Buf: d.Buf, CQECnt: d.CQECnt, CQESize: d.CQESize, DBRec: d.DBRec, UAR: d.UAR, CQN: d.CQN})
}

// Poller polls one completion queue and hands each completion, matched to
// its queue pair and work request, to the caller. The queue pairs whose
// completions arrive on the CQ are added with Add; a CQE is dispatched by
// its QPN through a monocq.Table (two array loads), and the queue pair's
// Complete retires the work requests it names.
//
// Poll takes a function literal and is compiled, with the literal, into the
// caller's loop (no interface, no indirect call, no allocation): see the
// package documentation of rc for the pattern and its measurement.
//
// A Poller is used by one goroutine at a time, the one that posts on its
// queue pairs.
type Poller struct {
	cq    *monocq.CQ
	owner *ctx.CompletionQueue
	table *monocq.Table[Queue]
	wc    Completion
	err   error

	unknown uint64
	polled  uint64
}

// NewPoller returns a poller for cq with no queue pairs yet.
func NewPoller(transport string, cq *ctx.CompletionQueue) (*Poller, error) {
	m, err := NewCQ(cq)
	if err != nil {
		return nil, Errorf(transport, "new poller", "%w", err)
	}
	return &Poller{cq: m, owner: cq, table: new(monocq.Table[Queue])}, nil
}

// Add makes the poller dispatch the completions of q (by its QPN; a DCT by
// its DCT number). A queue pair with separate send and receive CQs is
// added to the poller of each.
func (p *Poller) Add(q *Queue) error {
	if q == nil {
		return fmt.Errorf("poller: add: nil queue: %w", ErrInvalidConfig)
	}
	if err := p.table.Register(q.qpn, q); err != nil {
		return fmt.Errorf("poller: add QP %#x: %w", q.qpn, err)
	}
	return nil
}

// Remove stops dispatching the completions of q.
func (p *Poller) Remove(q *Queue) error {
	if _, err := p.table.Unregister(q.qpn); err != nil {
		return fmt.Errorf("poller: remove QP %#x: %w", q.qpn, err)
	}
	return nil
}

// Lookup returns the queue added for qpn, or nil.
func (p *Poller) Lookup(qpn uint32) *Queue { return p.table.Lookup(qpn) }

// Len returns the number of queue pairs added.
func (p *Poller) Len() int { return p.table.Len() }

// CQ returns the underlying ring poller (for Arm, AcknowledgeEvent, Stats).
func (p *Poller) CQ() *monocq.CQ { return p.cq }

// Poll hands up to max completions to fn, each as a *Completion valid
// during the call, and returns how many it handed over. Poll is inlined,
// and so is fn when it is a function literal at the call site. A closed CQ
// polls nothing (and Err says so). A CQE whose QPN no queue pair was added
// for is handed over with Status StatusUnknownQPN and counted.
func (p *Poller) Poll(max int, fn func(*Completion)) int {
	return func() int {
		if p.owner.Closed() {
			p.closed()
			return 0
		}
		n := 0
		for c := range p.cq.All(max) {
			p.dispatch(c)
			fn(&p.wc)
			n++
		}
		return n
	}()
}

// dispatch matches one CQE to its queue pair.
func (p *Poller) dispatch(c *monocq.CQE) {
	p.polled++
	if q := p.table.Lookup(c.QPN()); q != nil {
		q.Complete(c, &p.wc)
		return
	}
	p.wc.decode(c)
	p.wc.Status = StatusUnknownQPN
	p.unknown++
	if p.err == nil {
		p.err = fmt.Errorf("poller: CQ %#x: %w (QPN %#x, opcode %v)", p.cq.CQN(), ErrUnknownQPN, p.wc.QPN, p.wc.Opcode)
	}
}

func (p *Poller) closed() {
	if p.err == nil {
		p.err = fmt.Errorf("poller: CQ %#x: %w", p.cq.CQN(), ErrClosed)
	}
}

// Err returns the first problem the poller met: the CQ's own (monocq
// ErrOverrun, ErrCorrupt), a CQE for an unknown QPN, or a closed CQ.
func (p *Poller) Err() error {
	if err := p.cq.Err(); err != nil {
		return err
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

// Stats returns the poller's counters.
func (p *Poller) Stats() PollerStats {
	return PollerStats{Completions: p.polled, UnknownQPN: p.unknown}
}
