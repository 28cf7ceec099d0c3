package channel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// ErrAsyncEvent is wrapped by the error of work that failed because the
// device raised an asynchronous event that ends the channel (see
// Options.OnEvent); errors.As with *EventError gives the event.
var ErrAsyncEvent = errors.New("async event")

// EventError is the cause of work a channel failed because of an
// asynchronous event: it names the event and wraps ErrAsyncEvent.
type EventError struct {
	Event ctx.AsyncEvent
}

// Error reads "async event PORT_ERR port=1: link down".
func (e *EventError) Error() string { return "async event " + e.Event.String() }

// Unwrap returns ErrAsyncEvent.
func (e *EventError) Unwrap() error { return ErrAsyncEvent }

// endsChannel reports whether an event about one of the channel's objects
// (or its port, or the device) leaves it unable to complete its work: a
// queue pair, SRQ or CQ in error, the port down, the device failed.
func endsChannel(t ctx.AsyncEventType) bool {
	switch t {
	case ctx.EventQPFatal, ctx.EventQPRequestError, ctx.EventQPAccessError, ctx.EventCQError,
		ctx.EventSRQError, ctx.EventPortError, ctx.EventDeviceFatal, ctx.EventWQFatal:
		return true
	}
	return false
}

// eventWatch is a channel's subscription to its context's events.
type eventWatch struct {
	router  *ctx.EventRouter
	sub     *ctx.EventSubscription
	onEvent func(ctx.AsyncEvent)
	// fatal is the first event that ends the channel; the waits look at it
	// (one atomic load per empty poll).
	fatal atomic.Pointer[ctx.AsyncEvent]
}

// deliver records an event that ends the channel, then tells the user.
// It runs on the event router's goroutine.
func (w *eventWatch) deliver(ev ctx.AsyncEvent) {
	if endsChannel(ev.Type) {
		e := ev
		w.fatal.CompareAndSwap(nil, &e)
	}
	w.onEvent(ev)
}

// eventErr returns the error of the first event that ends the channel,
// nil when none arrived (or the channel does not watch events).
func (c *core) eventErr() error {
	if c.watch == nil {
		return nil
	}
	if ev := c.watch.fatal.Load(); ev != nil {
		return &EventError{Event: *ev}
	}
	return nil
}

// watchEvents subscribes the connected channel to its context's events
// when Options.OnEvent is set: those of its queue pairs, SRQs and CQ, of
// its port and of the device.
func (c *core) watchEvents() error {
	if c.opts.OnEvent == nil {
		return nil
	}
	r, err := c.ctx.EventRouter()
	if err != nil {
		return err
	}
	f := ctx.EventFilter{CQNs: []uint32{c.cq.CQN()}, Device: true}
	port := c.gid().Port
	if port == 0 {
		port = max(c.opts.Port, 1)
	}
	f.Ports = []uint8{port}
	if c.dci != nil {
		f.QPNs = append(f.QPNs, c.dci.QPN())
	}
	for i := range c.links {
		l := &c.links[i]
		if l.qp != nil {
			f.QPNs = append(f.QPNs, l.qp.QPN())
		}
		if l.dct != nil {
			f.QPNs = append(f.QPNs, l.dct.QPN())
		}
	}
	for _, s := range c.srqs {
		f.SRQNs = append(f.SRQNs, s.SRQN())
	}
	w := &eventWatch{router: r, onEvent: c.opts.OnEvent}
	if w.sub, err = r.Subscribe(f, w.deliver); err != nil {
		return err
	}
	c.watch = w
	return nil
}

// heldEventErr is eventErr after the events the device holds now have been
// read (EventRouter.Flush): a completion that failed because of an event
// (a flush after QP_FATAL or DEVICE_FATAL) may be polled before the
// router's goroutine read the event. It is called on error paths only.
func (c *core) heldEventErr() error {
	if c.watch == nil {
		return nil
	}
	if err := c.eventErr(); err != nil {
		return err
	}
	_ = c.watch.router.Flush()
	return c.eventErr()
}

// failOnEvent fails the channel when err is the error of an event that
// ends it, or of a completion queue in error (see cancel), and returns the
// error to report; any other err is returned as is.
func (c *core) failOnEvent(op string, err error) error {
	var ee *EventError
	var ce *cqError
	if errors.As(err, &ee) || errors.As(err, &ce) {
		return c.cancel(op, err)
	}
	return err
}

// cqError is the error of a wait on a completion queue in error (an
// overrun or a corrupt CQE: monocq.ErrOverrun, ErrCorrupt), which ends
// the channel as an event that ends it does.
type cqError struct{ err error }

func (e *cqError) Error() string { return "completion queue in error: " + e.err.Error() }
func (e *cqError) Unwrap() error { return e.err }

// Reestablish builds the channel again after it failed (an event, a
// cancelled call, Fail): it closes the channel's queues and completion
// queue and creates new ones in the same protection domain with the same
// Options, sharing the same memory regions. The regions stay registered
// and keep their keys; only the queue numbers change. Exchange the new
// Endpoints with the peers, which reestablish their side too, and
// Handshake (or use the mesh calls). The channel itself is closed, even
// when building the new one fails.
func (m *MultiChannel) Reestablish() (*PreparedMulti, error) {
	const op = "channel: reestablish"
	if m.zero() {
		return nil, errZeroChannel
	}
	c := m.c
	if err := c.close(); err != nil {
		return nil, fmt.Errorf("%s: close the old queues: %w", op, err)
	}
	p, err := build(c.pd, len(c.links), c.opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	p.regions = slices.Clone(c.regions)
	return p, nil
}

// Reestablish is MultiChannel.Reestablish for a Channel: exchange the new
// Endpoint with the peer and Handshake.
func (ch *Channel) Reestablish() (*Prepared, error) {
	m, err := ch.MultiChannel.Reestablish()
	if err != nil {
		return nil, err
	}
	return &Prepared{m: m}, nil
}

// ReestablishConn reestablishes the channel and handshakes with the peer
// over conn, a new connection to it (see Prepared.HandshakeConn; the peer
// calls ReestablishConn too, with the other side). The new channel serves
// the same memory regions with the same keys. What the exchange refuses
// without sending anything (endpoint.CheckExchange: a nil connection, a
// bad side or key) is refused first, and ch is left as it was.
func (ch *Channel) ReestablishConn(c context.Context, conn net.Conn, side endpoint.Side, sec endpoint.Security) (*Channel, error) {
	// What the exchange would refuse (a nil connection included) is refused before the channel's queue
	// pair is given up for a new one.
	if err := endpoint.CheckExchange(conn, side, sec); err != nil {
		return nil, fmt.Errorf("channel: reestablish: %w", err)
	}
	p, err := ch.Reestablish()
	if err != nil {
		return nil, err
	}
	nc, err := p.HandshakeConn(c, conn, side, sec)
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	return nc, nil
}

// CompletionQueue returns the completion queue every queue of the channel
// completes on (its CQN is what a CQ_ERR event names).
func (m *MultiChannel) CompletionQueue() *ctx.CompletionQueue {
	if m.zero() {
		return nil
	}
	return m.c.cq
}
