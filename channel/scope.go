package channel

import (
	"context"
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// Scope is the middle level of control: work posted through it may be
// polled piece by piece (each post returns a Pending), and whatever is left
// is polled to completion before Scope returns. Every error is reported:
// the function's own, each failed completion (as a *PeerError wrapping a
// *monocq.CompletionError with the syndrome), and a timeout, joined.
//
// A queue that is full when the scope posts is polled until it has room,
// so a scope may post more than the queues hold at once. A Scope is valid
// only inside the function given to MultiChannel.Scope. One kept past it
// is refused (ctx.ErrClosed) until the channel's next Scope call, which
// reuses the same Scope, so that Scope allocates nothing: from then on it
// posts in that later scope, unnoticed.
type Scope struct {
	c           *core
	cx          context.Context // the scope's context: bounds its waits for room too
	outstanding int
	errs        []error
	active      bool
}

// Scope runs fn with a scope and, when fn returns, polls until every
// work request posted through the scope has completed. It returns the
// errors of fn, of every failed request and of the wait, joined (nil when
// there are none); the requests of a blocking call made in fn are that
// call's to report, and the scope reports one only when the call returned
// before it completed (ErrTimeout). With Options.WaitTimeout set, a wait
// that outlasts it returns ErrTimeout and leaves the rest outstanding. When c ends before
// the scope's work completed (while it waits for room to post, or for the
// completions after fn), the channel fails as a blocking call's does (see
// MultiChannel.Fail): the error wraps c.Err() and ErrFailed, and no buffer
// of the scope's requests is written after Scope returns (a scope with
// none of its requests outstanding when c ends, its post waiting for room
// that other work takes, returns c's error and leaves the channel
// working). A context
// that has ended before the call returns its error without running fn, and
// a nil fn is refused (ctx.ErrInvalidArgument) before anything else. The scope
// itself is reused: Scope allocates nothing unless work fails. When fn
// panics, the panic goes on without waiting for the scope's work, which
// stays outstanding (Fail flushes it), and the channel takes the next
// Scope as usual.
func (m *MultiChannel) Scope(c context.Context, fn func(s *Scope) error) error {
	if m.zero() {
		return errZeroChannel
	}
	return m.c.runScope(c, fn)
}

func (c *core) runScope(cx context.Context, fn func(s *Scope) error) error {
	if fn == nil {
		return fmt.Errorf("channel: scope: nil function: %w", ctx.ErrInvalidArgument)
	}
	if err := ended(cx, "scope"); err != nil {
		return err
	}
	if c.scope != nil {
		return fmt.Errorf("channel: scope: %w", ErrNestedScope)
	}
	if c.scopeState == nil {
		c.scopeState = &Scope{c: c}
	}
	s := c.scopeState
	s.cx, s.outstanding, s.errs, s.active = cx, 0, s.errs[:0], true
	c.scopeID++
	if c.scopeID == 0 {
		// 0 is the scope of work posted outside any (see record).
		c.scopeID = 1
	}
	c.scope = s
	defer func() {
		if c.scope == s {
			// fn (or the wait) panicked: end the scope, or every later
			// Scope would be refused as nested and every raw post
			// counted in this one.
			c.scope = nil
			s.active, s.cx = false, nil
			clear(s.errs)
			s.errs = s.errs[:0]
		}
	}()
	ferr := fn(s)
	werr := s.drain()
	c.scope = nil
	s.active, s.cx = false, nil
	if ferr == nil && werr == nil && len(s.errs) == 0 {
		return nil
	}
	all := make([]error, 0, len(s.errs)+2)
	all = append(all, ferr)
	all = append(all, s.errs...)
	all = append(all, werr)
	clear(s.errs)
	return errors.Join(all...)
}

// drain polls until the scope has nothing outstanding. When the scope's
// context ends first it fails the channel and returns the context's error,
// wrapped.
func (s *Scope) drain() error {
	w := newWaiter(s.c, s.cx)
	var err error
	for s.outstanding > 0 {
		if s.c.poll() > 0 {
			if err = w.progress(); err != nil {
				break
			}
			continue
		}
		if err = w.idlePoll(); err != nil {
			break
		}
	}
	if w.cancelled {
		err = s.c.cancel("scope", err) // (the flushes it causes are not the scope's errors)
	} else if len(s.errs) > 0 && s.c.eventMayExplain() {
		// Work failed: an event that ends the channel may be why.
		if eerr := s.c.heldEventErr(); eerr != nil {
			err = s.c.cancel("scope", eerr)
		}
	}
	return err
}

// Outstanding returns the number of the scope's requests not yet
// completed.
func (s *Scope) Outstanding() int { return s.outstanding }

func (s *Scope) check() error {
	if !s.active {
		return fmt.Errorf("channel: scope used after it returned: %w", ctx.ErrClosed)
	}
	return nil
}

// PostSend posts a SEND in the scope.
func (s *Scope) PostSend(r SendRequest) (Pending, error) {
	if err := s.check(); err != nil {
		return Pending{}, err
	}
	seq, err := s.c.post(s.cx, OpSend, r.Peer, &r, nil, nil, nil)
	return Pending{s.c, seq}, err
}

// PostReceive posts a receive in the scope.
func (s *Scope) PostReceive(r RecvRequest) (Pending, error) {
	if err := s.check(); err != nil {
		return Pending{}, err
	}
	seq, err := s.c.post(s.cx, OpRecv, r.Peer, nil, &r, nil, nil)
	return Pending{s.c, seq}, err
}

// PostWrite posts an RDMA WRITE in the scope.
func (s *Scope) PostWrite(r WriteRequest) (Pending, error) {
	if err := s.check(); err != nil {
		return Pending{}, err
	}
	seq, err := s.c.post(s.cx, OpWrite, r.Peer, nil, nil, &r, nil)
	return Pending{s.c, seq}, err
}

// PostRead posts an RDMA READ in the scope.
func (s *Scope) PostRead(r ReadRequest) (Pending, error) {
	if err := s.check(); err != nil {
		return Pending{}, err
	}
	seq, err := s.c.post(s.cx, OpRead, r.Peer, nil, nil, nil, &r)
	return Pending{s.c, seq}, err
}

// PostCompareSwap posts an atomic compare-and-swap in the scope.
func (s *Scope) PostCompareSwap(r CompareSwapRequest) (Pending, error) {
	if err := s.check(); err != nil {
		return Pending{}, err
	}
	seq, err := s.c.postAtomic(s.cx, r.Peer, &r, nil)
	return Pending{s.c, seq}, err
}

// PostFetchAdd posts an atomic fetch-and-add in the scope.
func (s *Scope) PostFetchAdd(r FetchAddRequest) (Pending, error) {
	if err := s.check(); err != nil {
		return Pending{}, err
	}
	seq, err := s.c.postAtomic(s.cx, r.Peer, nil, &r)
	return Pending{s.c, seq}, err
}

// PostScatterSend posts every send; it stops at the first refused post.
func (s *Scope) PostScatterSend(reqs []SendRequest) error {
	if err := s.check(); err != nil {
		return err
	}
	for i := range reqs {
		if _, err := s.c.post(s.cx, OpSend, reqs[i].Peer, &reqs[i], nil, nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// PostScatterWrite posts every write; it stops at the first refused post.
func (s *Scope) PostScatterWrite(reqs []WriteRequest) error {
	if err := s.check(); err != nil {
		return err
	}
	for i := range reqs {
		if _, err := s.c.post(s.cx, OpWrite, reqs[i].Peer, nil, nil, &reqs[i], nil); err != nil {
			return err
		}
	}
	return nil
}

// PostGatherReceive posts every receive; it stops at the first refused
// post. It keeps no Pending: to learn how many bytes each receive took,
// post them with PostReceive and read each Pending's Result.
func (s *Scope) PostGatherReceive(reqs []RecvRequest) error {
	if err := s.check(); err != nil {
		return err
	}
	for i := range reqs {
		if _, err := s.c.post(s.cx, OpRecv, reqs[i].Peer, nil, &reqs[i], nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// PostGatherRead posts every read; it stops at the first refused post.
func (s *Scope) PostGatherRead(reqs []ReadRequest) error {
	if err := s.check(); err != nil {
		return err
	}
	for i := range reqs {
		if _, err := s.c.post(s.cx, OpRead, reqs[i].Peer, nil, nil, nil, &reqs[i]); err != nil {
			return err
		}
	}
	return nil
}

// PostMulticastSend posts the same send (r.Peer is ignored) to every peer
// in peers; it stops at the first refused post.
func (s *Scope) PostMulticastSend(peers []int, r SendRequest) error {
	if err := s.check(); err != nil {
		return err
	}
	for _, p := range peers {
		r.Peer = p
		if _, err := s.c.post(s.cx, OpSend, p, &r, nil, nil, nil); err != nil {
			return err
		}
	}
	return nil
}
