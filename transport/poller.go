package transport

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/nilness"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/seam"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// NewCQ returns the monocq poller over the ring of cq. A completion queue
// has one, whatever asks for it: NewCQ called again, and cq's Poller
// (Poller.CQ), get the same one, with its one consumer index, so that no
// CQE is taken twice (two pollers over one ring, each with an index of its
// own, each took every CQE). Poll it from one goroutine at a time.
func NewCQ(cq *ctx.CompletionQueue) (*monocq.CQ, error) {
	c, err := claimOf(cq, false)
	if err != nil {
		return nil, fmt.Errorf("transport: new CQ: %w", err)
	}
	return c.ring, nil
}

// claimOf returns the claim of cq, made with its ring poller if it has
// none; with hold it takes the claim for a Poller, and refuses one a
// Poller holds. It takes claimsMu, and registers the close hook of a claim
// it made after it let claimsMu go: seam.OnClose takes the Context's lock,
// and the Context runs the hook, which takes claimsMu, with its lock held
// (a CQ closed since the look at Closed gets the hook run at once, on this
// goroutine). The claim of a CQ that closed meanwhile is forgotten by the
// time claimOf returns; its Poller finds the CQ closed.
func claimOf(cq *ctx.CompletionQueue, hold bool) (*claim, error) {
	if cq == nil {
		return nil, fmt.Errorf("nil completion queue: %w", ctx.ErrInvalidArgument)
	}
	claimsMu.Lock()
	c, made, err := claimLocked(cq, hold)
	claimsMu.Unlock()
	if made {
		seam.OnClose(cq, func() {
			claimsMu.Lock()
			if claims[cq] == c {
				delete(claims, cq)
			}
			if c.poller != nil {
				c.poller.reapFlag.Or(closedBit)
			}
			claimsMu.Unlock()
		})
	}
	return c, err
}

// claimLocked is claimOf's part under claimsMu; made says it made the
// claim.
func claimLocked(cq *ctx.CompletionQueue, hold bool) (c *claim, made bool, err error) {
	if cq.Closed() {
		return nil, false, fmt.Errorf("completion queue: %w", ctx.ErrClosed)
	}
	if c = claims[cq]; c == nil {
		d := provider.CQDescriptor(cq)
		m, err := monocq.New(monocq.Config{Buf: d.Buf, CQECnt: d.CQECnt, CQESize: d.CQESize, DBRec: d.DBRec, UAR: d.UAR, CQN: d.CQN, Memory: d.Memory})
		if err != nil {
			return nil, false, err
		}
		c, made = &claim{ring: m}, true
		claims[cq] = c
	}
	if hold {
		if c.held {
			return nil, made, fmt.Errorf("CQ %#x has a Poller already (one Poller per completion queue): %w", cq.CQN(), ctx.ErrInvalidArgument)
		}
		c.held = true
	}
	return c, made, nil
}

// Poller polls one completion queue and hands each completion, matched to
// its queue pair and work request, to the caller. Add the queue pairs
// whose completions arrive on the CQ, of any transport (*rc.QP, *ud.QP,
// *dc.DCI, *dc.DCT); a CQE is routed by its QPN through a monocq.Table
// (two array loads), and the queue pair's Queue.Complete retires the work
// requests it names.
//
// A Poller is used by one goroutine at a time, its owner, the one that
// posts on its queue pairs. The queue pairs may be closed from any
// goroutine, also while the owner polls: the close only sets reapFlag, and
// the owner's next Poll drops the closed queue pair from the table itself,
// once no CQE of it is left in the ring (see reap), waiting for the
// destroy to finish, through the Context's lock, once per queue pair.
// Until then the CQEs of a closed queue pair are handed over as the device
// wrote them, so that whether a completion comes before or after a close on
// another goroutine decides nothing.
type Poller struct {
	cq    *monocq.CQ
	owner *ctx.CompletionQueue
	table *monocq.Table[Queue]
	// reapFlag has readyBit set from NewPoller on, reapBit when a queue
	// added here was closed (set by its closer, on the closing goroutine)
	// or a closed queue is still draining (set by reap), closedBit once
	// the Poller or its CQ was closed (the claim's close hook), and
	// slowBit while the Poller counts or reads timestamps: ring, which
	// loads it once per poll, returns nil unless it is readyBit alone, so
	// that Poll calls reapRing (a zero Poller, whose flag is 0, included).
	reapFlag atomic.Uint32
	wc       Completion
	err      error

	// claim is the CQ's claim this Poller holds until Close (closed).
	claim  *claim
	closed bool

	// counts is set by EnableCounters; stamps when the CQ writes
	// timestamps (both read only when reapRing said slow).
	counts *CQCounters
	stamps bool

	// unknownQPN and unknownOpcode are those of the first CQE of an
	// unknown QPN (unknownSeen), from which Err builds its error: Poll
	// allocates nothing.
	unknownSeen   bool
	unknownQPN    uint32
	unknownOpcode prm.CQEOpcode

	// queues are the open queues added, and draining the closed ones
	// still in the table; both are the owner's.
	queues   []*Queue
	draining []drain
}

// QueuePair is a queue pair of package rc, dc or ud as a Poller takes it:
// *rc.QP, *ud.QP, *dc.DCI and *dc.DCT (each embeds a Queue), or a *Queue.
type QueuePair interface {
	queue() *Queue
}

func (q *Queue) queue() *Queue { return q }

// drain is a closed queue still in a Poller's table: from the consumer
// index at, the ring may still hold CQEs of it.
type drain struct {
	q  *Queue
	at uint32
}

// A claim is the ring poller of an open completion queue (NewCQ), and
// whether a Poller holds it: a second Poller over one ring would keep a
// consumer index of its own, and the two would lose or duplicate
// completions. Poller.Close gives the ring back, and the next NewPoller
// for the CQ takes the same ring poller, which goes on from the consumer
// index (and the arm sequence) the closed one left. The CQ's close
// forgets its claim.
type claim struct {
	ring *monocq.CQ
	held bool
	// poller is the Poller holding the claim, once made (claimsMu): the
	// CQ's close sets its closedBit, so that its polls look at one flag.
	poller *Poller
}

var (
	claimsMu sync.Mutex
	claims   = map[*ctx.CompletionQueue]*claim{}
)

// NewPoller returns a Poller for cq with no queue pairs yet. A completion
// queue has one Poller at a time: while cq is open and its Poller is not
// closed, a second NewPoller for it is refused with ctx.ErrInvalidArgument
// (poll the CQ through the first, or Close it first). A Poller made after
// one was closed takes the ring from where that one left it.
func NewPoller(cq *ctx.CompletionQueue) (*Poller, error) {
	c, err := claimOf(cq, true)
	if err != nil {
		return nil, fmt.Errorf("poller: new: %w", err)
	}
	p := &Poller{cq: c.ring, owner: cq, claim: c, table: new(monocq.Table[Queue]), stamps: cq.Config().Timestamps}
	p.reapFlag.Store(readyBit)
	if p.stamps {
		p.reapFlag.Or(slowBit)
	}
	// From here the CQ's close flags p (the claim's hook). A close that
	// ran its hooks before set the CQ's closed flag first: it is seen
	// here, under the same lock.
	claimsMu.Lock()
	c.poller = p
	if cq.Closed() {
		p.reapFlag.Or(closedBit)
	}
	claimsMu.Unlock()
	return p, nil
}

// Close ends the Poller and gives its completion queue back: it drops every
// queue pair added, as Remove does (their completions still in the ring
// stay there), and the next NewPoller for the CQ goes on from this
// Poller's consumer index, through the same ring poller (CQ returns it: a
// completion.Notifier made on it serves the next Poller too). A closed
// Poller polls nothing, refuses Add with
// ctx.ErrClosed, and Err says it is closed (unless it holds an earlier
// problem). Close from inside Poll (from
// the function Poll hands completions to) is refused with ctx.ErrBusy; a
// second Close does nothing. Close runs on the owner's goroutine, like
// Poll.
func (p *Poller) Close() error {
	if p == nil || p.closed || p.claim == nil {
		return nil // nil, closed, or a zero Poller
	}
	if p.cq.InBatch() {
		return fmt.Errorf("poller: close CQ %#x: inside Poll: %w", p.cq.CQN(), ctx.ErrBusy)
	}
	for len(p.queues) > 0 {
		p.drop(p.queues[0])
	}
	for len(p.draining) > 0 {
		p.drop(p.draining[0].q)
	}
	p.closed = true
	p.reapFlag.Or(closedBit) // ring returns nil: Poll finds it closed (reapRing)
	claimsMu.Lock()
	p.claim.held = false
	p.claim.poller = nil
	claimsMu.Unlock()
	return nil
}

// errZeroPoller is the error of a Poller not made by NewPoller.
var errZeroPoller = fmt.Errorf("poller: not made by NewPoller: %w", ctx.ErrInvalidArgument)

// The bits of Poller.reapFlag.
const (
	reapBit = 1 << iota
	slowBit
	readyBit
	// closedBit is set once the Poller or its CQ is closed, and never
	// cleared (reap clears reapBit).
	closedBit
)

// Poll hands up to max completions to fn, each as a *Completion valid
// during the call, and returns how many it handed over. Poll and a function
// literal passed to it compile into the caller's loop: no interface, no
// indirect call, no allocation, and an empty ring costs no call. A closed
// CQ polls nothing (Err says so). A CQE whose QPN no queue pair was added
// for is handed over with Match MatchUnknownQPN. fn may post (and post
// receives) but must not call Poll on the same Poller. A nil fn takes
// nothing: Poll returns 0 and the completions stay for the next Poll.
func (p *Poller) Poll(max int, fn func(*Completion)) int {
	// A closure called once (see monocq.CQ.Poll): the inliner prices it
	// as a call when it sizes Poll and inlines it at its one call site,
	// with the caller's function literal.
	return func() int {
		if fn == nil {
			// Folded away where fn is a function literal.
			return 0
		}
		cq, slow := p.ring(), false
		if cq == nil {
			// The CQ was closed, a queue pair added here was, or
			// the Poller counts or reads timestamps.
			if cq, slow = p.reapRing(); cq == nil {
				return 0
			}
		}
		wc := &p.wc
		n := 0
		for c := range cq.All(max) {
			q := p.table.Lookup(c.QPN())
			if q != nil {
				if !q.CompleteSend(c, wc) && !q.CompleteRecv(c, wc) {
					q.Complete(c, wc)
				}
			} else {
				p.unknown(c)
			}
			if slow {
				p.count(q, c, wc)
			}
			fn(wc)
			n++
		}
		if slow {
			p.countPoll(n)
		}
		return n
	}()
}

// Add makes the poller route the completions of qp (by its QPN; a DCT by
// its DCT number). A queue pair with separate send and receive CQs is
// added to the Poller of each. A closed queue pair is refused (ctx.ErrClosed),
// and so is one whose send and receive CQs are both another than the
// Poller's (ctx.ErrInvalidArgument): none of its completions would come
// here. A closed one that still holds qp's QPN (the device reuses the QPNs of
// destroyed QPs) is dropped first: its QPN is qp's from now on. An open
// queue pair whose QPN the Poller already routes (qp added twice, or
// another device's queue pair with the same number) is refused with
// monocq.ErrDuplicateQPN.
func (p *Poller) Add(qp QueuePair) error {
	q := queueOf(qp)
	if q == nil {
		return fmt.Errorf("poller: add: nil queue pair: %w", ctx.ErrInvalidArgument)
	}
	if p.table == nil {
		return errZeroPoller
	}
	if q.qp == nil || q.closer == nil {
		return fmt.Errorf("poller: add: queue not set up: %w", ctx.ErrInvalidArgument)
	}
	if q.qp.Closed() {
		return fmt.Errorf("poller: add QP %#x: %w", q.qpn, ctx.ErrClosed)
	}
	if p.closed {
		return fmt.Errorf("poller: add QP %#x: the Poller of CQ %#x is closed: %w", q.qpn, p.owner.CQN(), ctx.ErrClosed)
	}
	if cfg := q.qp.Config(); cfg.SendCQ != p.owner && cfg.RecvCQ != p.owner {
		return fmt.Errorf("poller: add QP %#x: it completes on CQ %#x (send) and %#x (receive), the poller polls CQ %#x: %w",
			q.qpn, cfg.SendCQ.CQN(), cfg.RecvCQ.CQN(), p.owner.CQN(), ctx.ErrInvalidArgument)
	}
	if old := p.table.Lookup(q.qpn); old != nil && old != q && old.qp.Closed() {
		p.drop(old)
	}
	if err := p.table.Register(q.qpn, q); err != nil {
		return fmt.Errorf("poller: add QP %#x: %w", q.qpn, err)
	}
	p.queues = append(p.queues, q)
	q.closer.addPoller(p)
	if q.counts != nil {
		p.reapFlag.Or(slowBit)
	}
	// A close that ran before the poller was on the closer's list
	// did not flag it: look again.
	if q.qp.Closed() {
		p.reapFlag.Or(reapBit)
	}
	return nil
}

// Remove stops routing the completions of qp at once, closed or not (CQEs
// of it still in the ring then count as ones of an unknown QPN; for a
// queue pair on an SRQ, the SRQ slots its receive CQEs there hold are not
// given back to the SRQ, so remove such a queue pair once its receives
// are polled, or close it with the SRQ). An open
// queue pair that was not added is refused with monocq.ErrUnknownQPN. A
// closed one is not: the Poller drops closed queue pairs itself, in a Poll
// that the close does not order, so Remove of a closed queue pair returns
// nil whether or not that Poll ran (and leaves alone a queue added since
// for its QPN).
func (p *Poller) Remove(qp QueuePair) error {
	q := queueOf(qp)
	if q == nil {
		return fmt.Errorf("poller: remove: nil queue pair: %w", ctx.ErrInvalidArgument)
	}
	if p.Lookup(q.qpn) != q {
		if p.table != nil && q.qp != nil && q.qp.Closed() {
			return nil // dropped already, by a Poll or a Remove
		}
		return fmt.Errorf("poller: remove QP %#x: %w", q.qpn, monocq.ErrUnknownQPN)
	}
	p.drop(q)
	return nil
}

// queueOf returns the Queue of qp, or nil for a nil qp (an interface
// holding a nil *rc.QP included: the embedded Queue's address is then not
// nil, but the queue pair was never set up).
func queueOf(qp QueuePair) *Queue {
	if nilness.Is(qp) {
		return nil
	}
	return qp.queue()
}

// drop takes q, which is in the table, out of the poller.
func (p *Poller) drop(q *Queue) {
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
	q.closer.removePoller(p)
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
func (p *Poller) reap() {
	p.reapFlag.And(^uint32(reapBit))
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
		d.q.closer.removePoller(p)
		p.draining = append(p.draining[:i], p.draining[i+1:]...)
	}
	if len(p.draining) > 0 {
		p.reapFlag.Or(reapBit)
	}
}

// discard removes the CQEs of q from the ring after q's queue pair went
// through RESET, as rdma-core's mlx5_modify_qp cleans them out of the QP's
// CQs: RESET restarts the rings at index 0, so a CQE left behind would name
// a WQE index that the work requests posted after the reset reuse, and
// retire them (or fill a receive's completion) before the device ran them.
// A receive CQE of a queue pair on an SRQ gives its SRQ slot back, with no
// completion, as RESET discards every outstanding work request. It runs on
// the owner's goroutine, from Reset, never during a Poll (monocq.CQ.Discard
// does nothing then).
func (p *Poller) discard(q *Queue) {
	if p.owner.Closed() {
		return
	}
	removed := discardFrom(p.cq, q)
	// The CQEs kept moved up the ring by up to removed slots, and the
	// consumer index by removed: a closed queue still draining has its
	// CQEs as far from the index it was found closed at, plus removed
	// (see reap).
	for i := range p.draining {
		p.draining[i].at += uint32(removed)
	}
}

// discardFrom removes the CQEs of q from ring, giving the SRQ slots of
// its receive CQEs back (see Poller.discard), and returns how many it
// removed.
func discardFrom(ring *monocq.CQ, q *Queue) int {
	qpn, srq := q.qpn, q.srq
	return ring.Discard(func(c *monocq.CQE) bool {
		if c.QPN() != qpn {
			return false
		}
		switch c.Opcode() {
		case prm.CQERespSend, prm.CQERespSendImm, prm.CQERespSendInv, prm.CQERespWrImm, prm.CQERespErr:
			if srq != nil {
				_, _ = srq.ring.takeSRQ(c.WQECounter())
			}
		}
		return true
	})
}

// Lookup returns the queue added for qpn, or nil; a closed queue pair
// until the Poller dropped it.
func (p *Poller) Lookup(qpn uint32) *Queue {
	if p.table == nil {
		return nil // a zero Poller
	}
	return p.table.Lookup(qpn)
}

// Len returns the number of queue pairs added, closed ones counting until
// the Poller dropped them.
func (p *Poller) Len() int {
	if p.table == nil {
		return 0 // a zero Poller
	}
	return p.table.Len()
}

// CQ returns the underlying ring poller (for Arm, AcknowledgeEvent, Ready
// and a completion.Notifier); nil for a zero Poller.
func (p *Poller) CQ() *monocq.CQ { return p.cq }

// ring returns the monocq poller to take the next batch from, or nil when
// the completion queue has been closed or a queue added here was: Poll
// then calls reapRing, which returns it or nil. Poll calls ring once; it
// inlines and makes no call.
func (p *Poller) ring() *monocq.CQ {
	// One flag: the CQ's close sets closedBit (the claim's hook), and a
	// zero Poller's is 0.
	if p.reapFlag.Load() != readyBit {
		return nil
	}
	return p.cq
}

// reapRing is ring's slow path: it returns nil when the completion queue
// has been closed (its ring is gone), and otherwise drops the closed queues
// that have no CQE left in the ring (see reap) and returns the ring, with
// slow true when the Poller counts or reads timestamps (Poll then calls
// count for each completion and countPoll once).
func (p *Poller) reapRing() (cq *monocq.CQ, slow bool) {
	if p.owner == nil || p.owner.Closed() || p.closed {
		return nil, false
	}
	flags := p.reapFlag.Load()
	if flags&reapBit != 0 {
		p.reap()
	}
	return p.cq, flags&slowBit != 0
}

// countPoll counts one Poll that handed over n completions.
func (p *Poller) countPoll(n int) {
	if p.counts != nil {
		p.counts.Polls++
		if n == 0 {
			p.counts.EmptyPolls++
		}
	}
}

// count reads the timestamp of a completion and counts it, as asked. An
// error CQE has no timestamp (its syndromes are where the timestamp would
// be), so an error completion's stays 0, matched or not.
func (p *Poller) count(q *Queue, c *monocq.CQE, wc *Completion) {
	if p.stamps {
		wc.Timestamp = 0
		if !c.IsError() {
			wc.Timestamp = c.Timestamp()
		}
	}
	if q != nil && q.counts != nil {
		q.counts.count(wc)
	}
	if k := p.counts; k != nil {
		k.Completions++
		switch wc.Match {
		case MatchError:
			k.Errors.add(wc.Syndrome)
		case MatchUnknownQPN:
			k.UnknownQPN++
		}
	}
}

// unknown decodes a CQE whose QPN no queue was added for into the
// poller's Completion, with Match MatchUnknownQPN, and records the first
// for Err (without allocating).
func (p *Poller) unknown(c *monocq.CQE) {
	p.wc.decode(nil, c)
	p.wc.Match = MatchUnknownQPN
	if p.err == nil && !p.unknownSeen {
		p.unknownSeen, p.unknownQPN, p.unknownOpcode = true, p.wc.QPN, p.wc.Opcode
	}
}

// Err returns the problem the poller met, nil if none: the ring's own
// (monocq ErrOverrun, ErrCorrupt), which stops the polling and so comes
// first; else the first CQE for an unknown QPN (monocq.ErrUnknownQPN);
// else a closed CQ or Poller (ctx.ErrClosed). Once it has returned one
// of the last two, it keeps returning it.
func (p *Poller) Err() error {
	if p.cq == nil {
		return errZeroPoller
	}
	if err := p.cq.Err(); err != nil {
		return err
	}
	if p.err == nil && p.unknownSeen {
		p.err = fmt.Errorf("poller: CQ %#x: %w (QPN %#x, opcode %v)", p.cq.CQN(), monocq.ErrUnknownQPN, p.unknownQPN, p.unknownOpcode)
	}
	if p.err == nil && p.owner.Closed() {
		p.err = fmt.Errorf("poller: CQ %#x: %w", p.cq.CQN(), ctx.ErrClosed)
	}
	if p.err == nil && p.closed {
		p.err = fmt.Errorf("poller: CQ %#x: the Poller is closed: %w", p.cq.CQN(), ctx.ErrClosed)
	}
	return p.err
}
