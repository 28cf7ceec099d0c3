package dc

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// Poller polls one completion queue and hands each completion, matched to
// its queue pair and work request, to the caller. Add the queue pairs whose
// completions arrive on the CQ (of any transport: their Queue is the same
// type in packages rc, dc and ud); a CQE is routed by its QPN through a
// monocq.Table (two array loads), and the queue pair's Queue.Complete
// retires the work requests it names.
//
// The Pollers of packages rc, dc and ud behave the same; each package has
// its own so that Poll inlines into a caller that imports only that
// package. A Poller is used by one goroutine at a time, the one that posts
// on its queue pairs.
type Poller struct {
	d *transport.Dispatcher
}

// NewPoller returns a Poller for cq with no queue pairs yet.
func NewPoller(cq *ctx.CompletionQueue) (*Poller, error) {
	d, err := transport.NewDispatcher(name, cq)
	if err != nil {
		return nil, err
	}
	return &Poller{d: d}, nil
}

// Poll hands up to max completions to fn, each as a *Completion valid
// during the call, and returns how many it handed over. Poll and a function
// literal passed to it compile into the caller's loop: no interface, no
// indirect call, no allocation, and an empty ring costs no call. A closed
// CQ polls nothing (Err says so). A CQE whose QPN no queue pair was added
// for is handed over with Status StatusUnknownQPN. fn may post (and post
// receives) but must not call Poll on the same Poller.
func (p *Poller) Poll(max int, fn func(*Completion)) int {
	return func() int {
		d := p.d
		cq := d.Ring()
		if cq == nil {
			return 0
		}
		wc := d.Completion()
		n := 0
		for c := range cq.All(max) {
			if q := d.Lookup(c.QPN()); q != nil {
				q.Complete(c, wc)
			} else {
				d.Unknown(c)
			}
			fn(wc)
			n++
		}
		d.Count(n)
		return n
	}()
}

// Add makes the poller route the completions of q (&qp.Queue; a DCT by its
// DCT number). A queue pair with separate send and receive CQs is added to
// the Poller of each.
func (p *Poller) Add(q *Queue) error { return p.d.Add(q) }

// Remove stops routing the completions of q.
func (p *Poller) Remove(q *Queue) error { return p.d.Remove(q) }

// Lookup returns the queue added for qpn, or nil.
func (p *Poller) Lookup(qpn uint32) *Queue { return p.d.Lookup(qpn) }

// Len returns the number of queue pairs added.
func (p *Poller) Len() int { return p.d.Len() }

// CQ returns the underlying ring poller (for Arm, AcknowledgeEvent and
// Stats).
func (p *Poller) CQ() *monocq.CQ { return p.d.CQ() }

// Err returns the first problem the poller met: the ring's own (monocq
// ErrOverrun, ErrCorrupt), a CQE for an unknown QPN (ErrUnknownQPN), or a
// closed CQ (ErrClosed).
func (p *Poller) Err() error { return p.d.Err() }

// Stats returns the poller's counters.
func (p *Poller) Stats() PollerStats { return p.d.Stats() }
