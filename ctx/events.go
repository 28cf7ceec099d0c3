package ctx

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// EventFilter says which asynchronous events an EventRouter subscriber
// receives: the events of the QPs, CQs and SRQs it names (by number), of
// the ports it names, and, with Device, DEVICE_FATAL and WQ_FATAL, the
// events that name no object. All receives every event.
type EventFilter struct {
	QPNs   []uint32
	CQNs   []uint32
	SRQNs  []uint32
	Ports  []uint8
	Device bool
	All    bool
}

// match reports whether the filter selects ev.
func (f *EventFilter) match(ev AsyncEvent) bool {
	if f.All {
		return true
	}
	switch ev.Type {
	case EventCQError:
		return slices.Contains(f.CQNs, ev.CQN)
	case EventSRQLimitReached, EventSRQError:
		return slices.Contains(f.SRQNs, ev.SRQN)
	case EventPortActive, EventPortError, EventLIDChange, EventPKeyChange, EventSMChange,
		EventClientReregister, EventGIDChange:
		return slices.Contains(f.Ports, ev.Port)
	case EventDeviceFatal, EventWQFatal:
		return f.Device
	default:
		return slices.Contains(f.QPNs, ev.QPN)
	}
}

// EventRouter reads a Context's asynchronous events on a goroutine of its
// own and hands each to the subscribers whose filter selects it, in the
// order the device raised them. A Context has one router, started by the
// first call to Context.EventRouter and stopped when the Context closes;
// from then on the router consumes every event: subscribe with
// EventFilter.All to see them all.
//
// An EventRouter or EventSubscription not made by this package (a zero
// value) routes nothing: Subscribe and Flush refuse the router with
// ErrInvalidArgument, its Done channel is closed, and Cancel of a nil or
// zero subscription does nothing.
type EventRouter struct {
	c    *Context
	stop chan struct{}
	done chan struct{}

	// reading serializes reading and routing (the goroutine and Flush),
	// which keeps the events in order.
	reading sync.Mutex
	subs2   []*EventSubscription // scratch of route, under reading

	mu       sync.Mutex
	subs     []*EventSubscription
	unrouted uint64 // events no subscriber selected
	err      error  // the first error reading an event
}

// EventSubscription is one subscriber of an EventRouter.
type EventSubscription struct {
	r      *EventRouter
	filter EventFilter
	fn     func(AsyncEvent)
	// forget forgets the close hook that cancels a subscription to the
	// events of one object (subscribeUntilCloseOf); guarded by r.mu.
	forget func()
}

// routers holds the router of each Context that started one.
var routers sync.Map // *Context → *EventRouter

// eventIdle bounds how long the router sleeps between looks at a provider
// without an event descriptor, and between looks at its stop signal.
const eventIdle = 20 * time.Millisecond

// EventRouter returns the Context's event router, starting it on the
// first call. It fails with ErrClosed on a closed Context, and with
// ErrInvalidArgument on a nil or zero Context (not made by Open).
func (c *Context) EventRouter() (*EventRouter, error) {
	const op = "event router"
	switch {
	case c == nil:
		return nil, &OpError{Op: op, Err: errNilContext}
	case c.t == nil:
		return nil, &OpError{Op: op, Err: errZero}
	}
	if r, ok := routers.Load(c); ok {
		return r.(*EventRouter), nil
	}
	r := &EventRouter{c: c, stop: make(chan struct{}), done: make(chan struct{})}
	if old, loaded := routers.LoadOrStore(c, r); loaded {
		return old.(*EventRouter), nil
	}
	c.addOnClose(func() {
		routers.Delete(c)
		close(r.stop)
	})
	select {
	case <-r.stop:
		// addOnClose ran the hook at once: the Context was closed.
		close(r.done)
		return nil, &OpError{Op: op, Err: ErrClosed}
	default:
	}
	go r.run()
	return r, nil
}

// Subscribe registers fn for the events filter selects. fn runs on the
// router's goroutine (or in a caller of Flush), one event at a time, and
// must return promptly; it may call Cancel of any subscription but must
// not wait for the router or call Flush. The router of a closed Context,
// which reads no more events, refuses with ErrClosed.
func (r *EventRouter) Subscribe(filter EventFilter, fn func(AsyncEvent)) (*EventSubscription, error) {
	const op = "subscribe to events"
	if fn == nil {
		return nil, &OpError{Op: op, Err: fmt.Errorf("nil function: %w", ErrInvalidArgument)}
	}
	if r.c == nil {
		return nil, &OpError{Op: op, Err: errZero}
	}
	select {
	case <-r.stop:
		return nil, &OpError{Op: op, Err: fmt.Errorf("router of %s: %w", r.c.name, ErrClosed)}
	default:
	}
	s := &EventSubscription{r: r, filter: filter, fn: fn}
	r.mu.Lock()
	r.subs = append(r.subs, s)
	r.mu.Unlock()
	return s, nil
}

// Cancel stops the subscription: fn is not called for events read after
// Cancel returns. Idempotent.
func (s *EventSubscription) Cancel() {
	if s == nil || s.r == nil {
		return // nil, or a zero EventSubscription
	}
	// The close hook takes the Context's lock: forget it without r.mu,
	// which the hook takes under that lock.
	if forget := s.drop(); forget != nil {
		forget()
	}
}

// drop removes the subscription from its router and returns the function
// that forgets its close hook (nil when it has none, or had it taken).
func (s *EventSubscription) drop() (forget func()) {
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := slices.Index(r.subs, s); i >= 0 {
		r.subs = slices.Delete(r.subs, i, i+1)
	}
	forget, s.forget = s.forget, nil
	return forget
}

// subscribeUntilCloseOf is seam.SubscribeUntilClose: Subscribe on the
// event router of obj's Context, for the events of obj, a *QueuePair or a
// *SharedReceiveQueue. Closing obj, directly or with a parent, cancels the
// subscription, so that it never sees the events of a later object that
// reuses the number. A closed obj is refused with ErrClosed (before the
// router starts).
func subscribeUntilCloseOf(obj, filter, fn any) (any, error) {
	const op = "subscribe to events"
	var n *node
	var c *Context
	var what string
	switch x := obj.(type) {
	case *QueuePair:
		n, c, what = &x.node, x.pd.ctx, "QP"
	case *SharedReceiveQueue:
		n, c, what = &x.node, x.pd.ctx, "SRQ"
	default:
		panic(fmt.Sprintf("ctx: subscription until close of %T", obj))
	}
	errClosed := &OpError{Op: op, Err: fmt.Errorf("%s: %w", what, ErrClosed)}
	if n.closed.Load() {
		return nil, errClosed
	}
	r, err := c.EventRouter()
	if err != nil {
		return nil, err
	}
	s, err := r.Subscribe(filter.(EventFilter), fn.(func(AsyncEvent)))
	if err != nil {
		return nil, err
	}
	// The hook runs at once when obj closed since the look above.
	forget := n.addOnClose(func() { s.drop() })
	r.mu.Lock()
	live := slices.Contains(r.subs, s)
	if live {
		s.forget = forget
	}
	r.mu.Unlock()
	if !live {
		// Only the hook removes s before it is returned: obj closed.
		return nil, errClosed
	}
	return s, nil
}

// Unrouted returns how many events no subscriber selected (they were
// dropped).
func (r *EventRouter) Unrouted() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unrouted
}

// Err returns the first error the router met reading events (nil when
// none): the router keeps trying.
func (r *EventRouter) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Done is closed when the router has stopped (its Context closed).
func (r *EventRouter) Done() <-chan struct{} {
	if r.c == nil {
		return zeroRouterDone // a zero EventRouter never runs
	}
	return r.done
}

// zeroRouterDone is the Done channel of a zero EventRouter: closed.
var zeroRouterDone = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Flush reads and routes, on the caller's goroutine, every event the
// device holds now, so that an event raised before a completion the
// caller has seen (a flush after QP_FATAL) has reached its subscribers
// when Flush returns. It returns the error of reading, if any.
func (r *EventRouter) Flush() error {
	if r.c == nil {
		return &OpError{Op: "flush events", Err: errZero}
	}
	for {
		ok, err := r.step()
		if err != nil || !ok {
			return err
		}
	}
}

// step reads one event and routes it; ok is false when none was pending.
func (r *EventRouter) step() (ok bool, err error) {
	r.reading.Lock()
	defer r.reading.Unlock()
	ev, ok, err := r.c.readAsyncEvent()
	if err != nil || !ok {
		return false, err
	}
	r.mu.Lock()
	subs := append(r.subs2[:0], r.subs...)
	r.mu.Unlock()
	routed := false
	for _, s := range subs {
		if s.filter.match(ev) && s.live() {
			s.fn(ev)
			routed = true
		}
	}
	clear(subs)
	r.subs2 = subs[:0]
	if !routed {
		r.mu.Lock()
		r.unrouted++
		r.mu.Unlock()
	}
	return true, nil
}

// run reads and routes events until the Context closes.
func (r *EventRouter) run() {
	defer close(r.done)
	fd := r.c.asyncEventFD()
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		ok, err := r.step()
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return
			}
			r.mu.Lock()
			if r.err == nil {
				r.err = err
			}
			r.mu.Unlock()
			r.sleep(-1)
			continue
		}
		if !ok {
			r.sleep(fd)
		}
	}
}

// live reports whether the subscription has not been cancelled.
func (s *EventSubscription) live() bool {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	return slices.Contains(s.r.subs, s)
}

// sleep waits for the event descriptor fd to become readable (fd < 0: for
// eventIdle), or for the stop signal, at most eventIdle.
func (r *EventRouter) sleep(fd int) {
	if fd >= 0 {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, int(eventIdle/time.Millisecond))
		if err == nil && (n == 0 || pfd[0].Revents&unix.POLLNVAL == 0) || errors.Is(err, unix.EINTR) {
			return
		}
	}
	t := time.NewTimer(eventIdle)
	defer t.Stop()
	select {
	case <-r.stop:
	case <-t.C:
	}
}
