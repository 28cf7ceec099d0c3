package completion

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/nilness"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/seam"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// ErrNoEventChannel is returned by NewNotifier for a completion queue
// created without ctx.CompletionQueueConfig.EventChannel.
var ErrNoEventChannel = errors.New("completion queue has no event channel")

// ErrMismatch is returned by NewNotifier when the poller does not poll the
// completion queue it is paired with.
var ErrMismatch = errors.New("poller and completion queue differ")

// Notifier waits for completions on one completion queue without spinning:
// the event mode of a CQ (a completion channel, arming, a blocking wait).
// It is used by the goroutine that polls the CQ, between batches (Wait
// releases the CQEs taken so far, as arming must). Close is the
// exception: it may be called from any goroutine, also while the owner
// sleeps in Wait, which then returns an error wrapping ctx.ErrClosed (as
// it does when the CQ closes under it).
type Notifier struct {
	cq   *ctx.CompletionQueue
	poll *monocq.CQ
	file *os.File
	raw  syscall.RawConn
	// closed is set by Close, on any goroutine; file is never cleared,
	// so that a Wait running meanwhile reads no field Close writes.
	closed    atomic.Bool
	armed     bool
	solicited bool
	events    uint64
	sleeps    uint64
	// forget removes the CQ's close hook (NewNotifier) when the Notifier
	// closes first.
	forget func()
}

// NewNotifier pairs cq, which must have been created with an event channel,
// with poll, the poller of its ring. The Notifier holds a duplicate of the
// channel's descriptor registered with the Go runtime's network poller;
// Close releases it (closing the CQ does not).
func NewNotifier(cq *ctx.CompletionQueue, poll *monocq.CQ) (*Notifier, error) {
	const op = "completion: new notifier"
	if cq == nil || poll == nil {
		return nil, fmt.Errorf("%s: nil CQ or poller: %w", op, ctx.ErrInvalidArgument)
	}
	if cq.Context() == nil {
		return nil, fmt.Errorf("%s: CQ not made by CreateCompletionQueue: %w", op, ctx.ErrInvalidArgument)
	}
	fd := provider.CQEventFD(cq)
	if fd < 0 {
		if cq.Closed() {
			return nil, fmt.Errorf("%s: CQ 0x%x: %w", op, cq.CQN(), ctx.ErrClosed)
		}
		return nil, fmt.Errorf("%s: CQ 0x%x: %w", op, cq.CQN(), ErrNoEventChannel)
	}
	if seam.CQDoorbell(poll) != provider.CQDescriptor(cq).DBRec {
		// Another ring: another CQ, or one of another device with the
		// same number (each device numbers its CQs).
		return nil, fmt.Errorf("%s: CQ 0x%x of %v, poller of another ring (CQ 0x%x): %w", op, cq.CQN(), cq.Context(), poll.CQN(), ErrMismatch)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: dup event channel: %w", op, err)
	}
	// The channel is non-blocking (both providers make it so), which lets
	// os.NewFile hand it to the network poller.
	if err := unix.SetNonblock(dup, true); err != nil {
		_ = unix.Close(dup)
		return nil, fmt.Errorf("%s: set non-blocking: %w", op, err)
	}
	f := os.NewFile(uintptr(dup), fmt.Sprintf("cq-0x%x-events", cq.CQN()))
	raw, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	// The CQ may be closed on another goroutine (directly or with its
	// Context) while the owner sleeps in Wait: its events then never come.
	// The close wakes the sleeper by moving the read deadline of the
	// Notifier's own descriptor into the past (an *os.File may be used
	// from several goroutines; once closed, the call fails harmlessly),
	// and Wait, finding the CQ closed, returns ErrClosed.
	forget := seam.OnClose(cq, func() { _ = f.SetReadDeadline(longAgo) })
	return &Notifier{cq: cq, poll: poll, file: f, raw: raw, forget: forget}, nil
}

// SolicitedOnly makes the Notifier arm for solicited completions (and error
// completions) only, instead of any completion.
func (n *Notifier) SolicitedOnly(on bool) { n.solicited = on }

// Events returns the number of completion events consumed so far.
func (n *Notifier) Events() uint64 { return n.events }

// Sleeps returns how many times Wait went to sleep on the completion
// channel (whether an event or the deadline woke it). A completion that
// lands while the waiter is between sleeps is found by polling and leaves
// its event to be read by the next Wait, so Sleeps, not Events, tells
// whether a wait slept.
func (n *Notifier) Sleeps() uint64 { return n.sleeps }

// Close releases the Notifier's descriptor. It does not close the CQ. It
// is idempotent and may be called from any goroutine (see Notifier).
//
// Close of a nil *Notifier returns nil.
func (n *Notifier) Close() error {
	if n == nil {
		return nil
	}
	if !n.closed.CompareAndSwap(false, true) || n.file == nil {
		return nil // closed already, or a zero Notifier: nothing to release
	}
	n.forget()
	return n.file.Close()
}

// errZeroNotifier is the error of Wait on a Notifier not made by NewNotifier.
var errZeroNotifier = fmt.Errorf("completion: wait: notifier not made by NewNotifier: %w", ctx.ErrInvalidArgument)

// Wait returns once the poller has at least one CQE ready (monocq.CQ.Ready
// found it), blocking until the device raises a completion event when there
// is none. It returns an error wrapping ctx's error when ctx is done first
// (context.DeadlineExceeded for a deadline, context.Canceled for a
// cancellation), one wrapping ctx.ErrClosed when the CQ is closed, also
// by another goroutine while Wait sleeps (directly or with its Context),
// and the ring's error (monocq.ErrCorrupt) once its poller stopped at a
// corrupt CQE.
// Wait releases the CQEs taken so far before it arms: call it between
// batches.
func (n *Notifier) Wait(c context.Context) error {
	if n.poll == nil {
		return errZeroNotifier
	}
	if n.poll.Ready(1) > 0 {
		return nil
	}
	for {
		if err := n.stopped(); err != nil {
			return err
		}
		if !n.armed {
			if n.cq.Closed() {
				// Its number may be another CQ's by now: no arm.
				return fmt.Errorf("completion: wait on CQ 0x%x: %w", n.poll.CQN(), ctx.ErrClosed)
			}
			if err := n.poll.Arm(n.solicited); err != nil {
				return fmt.Errorf("completion: wait on CQ 0x%x: %w", n.poll.CQN(), err)
			}
			n.armed = true
			// A CQE written between the empty poll and the arm raises no
			// event: poll once more before sleeping.
			if n.poll.Ready(1) > 0 {
				return nil
			}
		}
		if err := n.waitEvent(c); err != nil {
			return err
		}
		if n.poll.Ready(1) > 0 {
			return nil
		}
	}
}

// stopped returns the ring's error once its poller stopped at a corrupt
// CQE (monocq.ErrCorrupt): no CQE is ready from then on, and no event
// would end a sleep with one.
func (n *Notifier) stopped() error {
	if err := n.poll.Err(); errors.Is(err, monocq.ErrCorrupt) {
		return fmt.Errorf("completion: wait on CQ 0x%x: %w", n.poll.CQN(), err)
	}
	return nil
}

// WaitTimeout is Wait bounded by timeout instead of a context.
func (n *Notifier) WaitTimeout(timeout time.Duration) error {
	c, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return n.Wait(c)
}

// longAgo is a deadline in the past: it wakes a waiting read at once.
var longAgo = time.Unix(1, 0)

// waitEvent sleeps until one completion event can be read and consumes it
// (acknowledging it to the provider and to the poller's arm sequence).
func (n *Notifier) waitEvent(c context.Context) error {
	op := fmt.Sprintf("completion: wait on CQ 0x%x", n.poll.CQN())
	if n.closed.Load() {
		return fmt.Errorf("%s: notifier: %w", op, ctx.ErrClosed)
	}
	if n.cq.Closed() {
		return fmt.Errorf("%s: %w", op, ctx.ErrClosed)
	}
	if err := c.Err(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	deadline, _ := c.Deadline()
	if err := n.file.SetReadDeadline(deadline); err != nil {
		if n.closed.Load() {
			return fmt.Errorf("%s: notifier: %w", op, ctx.ErrClosed)
		}
		return fmt.Errorf("%s: set deadline: %w", op, err)
	}
	var stop func() bool
	var woke chan struct{}
	if c.Done() != nil {
		woke = make(chan struct{})
		stop = context.AfterFunc(c, func() {
			_ = n.file.SetReadDeadline(longAgo)
			close(woke)
		})
	}
	var got bool
	var rerr error
	n.sleeps++
	err := n.raw.Read(func(uintptr) bool {
		got, rerr = provider.ReadCQEvent(n.cq)
		return got || rerr != nil
	})
	if stop != nil && !stop() {
		<-woke // the wake-up ran: let it finish before the next deadline
	}
	if rerr != nil {
		return fmt.Errorf("%s: %w", op, rerr)
	}
	if err != nil {
		if n.cq.Closed() {
			// Woken by the CQ's close (see NewNotifier).
			return fmt.Errorf("%s: %w", op, ctx.ErrClosed)
		}
		if n.closed.Load() {
			// The Notifier's descriptor closed under the read.
			return fmt.Errorf("%s: notifier: %w", op, ctx.ErrClosed)
		}
		if cerr := c.Err(); cerr != nil {
			return fmt.Errorf("%s: %w", op, cerr)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%s: %w", op, context.DeadlineExceeded)
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	n.poll.AcknowledgeEvent()
	n.armed = false
	n.events++
	return nil
}

// Poller is a completion poller the Notifier's iterator can drive: the
// Poller of package rc, dc or ud (C is their *Completion, and Poll retires
// the work requests each completion names, so that their send queue slots
// are free again), or the ring's own *monocq.CQ (C is *monocq.CQE, and
// nothing is retired: code at that level retires its work requests itself).
type Poller[C any] interface {
	Poll(max int, fn func(C)) int
}

// Completions returns an iterator over the completions p hands out on the
// Notifier's CQ: each with nil, or with its error when it is an error
// completion (its Err method: a *monocq.CompletionError). It takes them one
// at a time through p.Poll, so a completion the loop did not reach stays
// in the ring, and waits (n.Wait) when none is ready: it yields exactly
// the completions, in the same order, that a busy-polling loop over p
// would. With a transport Poller every completion has retired its work
// request by the time it is yielded, so the loop may post again at once.
// It ends when the loop breaks, or after yielding (zero C, err) when ctx
// is done, waiting fails, the CQ or the transport Poller p is closed
// (ctx.ErrClosed) or p polls another ring than n (ErrMismatch); a nil or
// zero Notifier (not made by NewNotifier) or a nil or zero p yields an
// error wrapping ctx.ErrInvalidArgument. A completion is valid until the
// loop body returns; the body may post but must not poll p itself.
func Completions[C any](c context.Context, n *Notifier, p Poller[C]) iter.Seq2[C, error] {
	return func(yield func(C, error) bool) {
		var zero C
		if n == nil || nilness.Is(p) {
			yield(zero, fmt.Errorf("completion: completions: nil notifier or poller: %w", ctx.ErrInvalidArgument))
			return
		}
		if n.poll == nil {
			yield(zero, fmt.Errorf("completion: completions: notifier not made by NewNotifier: %w", ctx.ErrInvalidArgument))
			return
		}
		if err := n.pairedWith(p); err != nil {
			yield(zero, err)
			return
		}
		more := true
		for more {
			if n.cq.Closed() {
				// The ring is gone: a poller polls nothing, and waiting
				// for it would spin.
				yield(zero, fmt.Errorf("completion: completions of CQ 0x%x: %w", n.poll.CQN(), ctx.ErrClosed))
				return
			}
			if seam.PollerClosed != nil && seam.PollerClosed(p) {
				// A closed transport Poller takes nothing: waiting would
				// last until a completion came, only to be refused.
				yield(zero, fmt.Errorf("completion: completions of CQ 0x%x: the Poller is closed: %w", n.poll.CQN(), ctx.ErrClosed))
				return
			}
			if err := n.Wait(c); err != nil {
				yield(zero, err)
				return
			}
			// Wait found a completion ready: a poller that takes none
			// was closed (a transport Poller), and waiting again would
			// find the same one at once, for ever.
			if p.Poll(1, func(x C) { more = yield(x, errOf(x)) }) == 0 {
				yield(zero, fmt.Errorf("completion: completions of CQ 0x%x: the poller takes none of the completions ready (closed): %w", n.poll.CQN(), ctx.ErrClosed))
				return
			}
			for more && p.Poll(1, func(x C) { more = yield(x, errOf(x)) }) > 0 {
			}
		}
	}
}

// pairedWith checks that p polls the Notifier's ring, when p says which
// ring it polls.
func (n *Notifier) pairedWith(p any) error {
	var ring *monocq.CQ
	switch p := p.(type) {
	case *monocq.CQ:
		ring = p
	case interface{ CQ() *monocq.CQ }:
		ring = p.CQ()
	default:
		return nil
	}
	if ring == nil {
		// A zero transport Poller (not made by NewPoller).
		return fmt.Errorf("completion: completions of CQ 0x%x: poller has no ring: %w", n.poll.CQN(), ctx.ErrInvalidArgument)
	}
	if ring != n.poll {
		return fmt.Errorf("completion: completions of CQ 0x%x from a poller of CQ 0x%x: %w", n.poll.CQN(), ring.CQN(), ErrMismatch)
	}
	return nil
}

// errOf is the error a completion carries: its Err method (a raw
// *monocq.CQE's or a transport Completion's).
func errOf[C any](x C) error {
	if v, ok := any(x).(interface{ Err() error }); ok {
		return v.Err()
	}
	return nil
}
