//go:build cgo && linux

package verbs

/*
#include "mlx5kit_verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/asyncevent"
	"golang.org/x/sys/unix"
)

// ReadAsyncEvent returns the next asynchronous event without blocking
// (ibv_get_async_event on the non-blocking async descriptor) and
// acknowledges it (ibv_ack_async_event); ok is false when none is pending.
// The QPN, CQN or SRQN is resolved before the acknowledgement, while
// rdma-core still guarantees the object exists. Every event of enum
// ibv_event_type has its ctx type; a value newer than this package comes
// with Type 0 and its verbs name in Detail.
func (d *Device) ReadAsyncEvent() (ev ctx.AsyncEvent, ok bool, err error) {
	const verb = "ibv_get_async_event"
	if err := d.use(verb); err != nil {
		return ctx.AsyncEvent{}, false, err
	}
	defer d.mu.Unlock()
	var e C.struct_ibv_async_event
	ret, errno := C.ibv_get_async_event(d.c, &e)
	if ret != 0 {
		if errors.Is(errno, syscall.EAGAIN) {
			return ctx.AsyncEvent{}, false, nil
		}
		return ctx.AsyncEvent{}, false, ptrError(verb, fmt.Sprintf("%q", d.name), errno)
	}
	typ := uint32(e.event_type)
	var el C.struct_mk_async_element
	C.mk_async_element(&e, C.int(asyncevent.ElementOf(typ)), &el)
	ev = ctx.AsyncEvent{Type: asyncevent.Type(typ), QPN: uint32(el.qpn), Port: uint8(el.port)}
	if el.cq != nil {
		if cq, found := d.cqs[el.cq]; found {
			ev.CQN = cq.desc.CQN
		}
	}
	if el.srq != nil {
		if s, found := d.srqs[el.srq]; found {
			ev.SRQN = s.desc.SRQN
		}
	}
	if ev.Type == 0 {
		ev.Detail = C.GoString(C.ibv_event_type_str(e.event_type))
	}
	C.ibv_ack_async_event(&e)
	return ev, true, nil
}

// AsyncWatcher delivers a device's asynchronous events to a function from
// its own goroutine until Stop.
type AsyncWatcher struct {
	d      *Device
	stopFD int
	done   chan struct{}
	once   sync.Once
	err    error
}

// WatchAsyncEvents starts a goroutine that waits on the async event
// descriptor and calls fn for every event (port active / down, QP fatal, CQ
// error, …), in order, until Stop or Close of the device. fn runs on the
// watcher's goroutine and should not block for long; it must not call the
// watcher's Stop or the device's Close, which wait for that goroutine to
// end and so would wait for themselves. Use either a watcher
// or ReadAsyncEvent (which ctx.Context.EventRouter reads through), not both:
// each event is delivered once.
func (d *Device) WatchAsyncEvents(fn func(ctx.AsyncEvent)) (*AsyncWatcher, error) {
	const verb = "eventfd"
	if fn == nil {
		return nil, &VerbError{Verb: "WatchAsyncEvents", Detail: "nil function", Sentinel: ctx.ErrInvalidArgument}
	}
	if err := d.use(verb); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		var en syscall.Errno
		errors.As(err, &en)
		return nil, errnoError(verb, "async watcher stop descriptor", en)
	}
	w := &AsyncWatcher{d: d, stopFD: efd, done: make(chan struct{})}
	d.watchers[w] = struct{}{}
	go w.run(int(d.c.async_fd), fn)
	return w, nil
}

func (w *AsyncWatcher) run(asyncFD int, fn func(ctx.AsyncEvent)) {
	defer close(w.done)
	fds := []unix.PollFd{
		{Fd: int32(asyncFD), Events: unix.POLLIN},
		{Fd: int32(w.stopFD), Events: unix.POLLIN},
	}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			var en syscall.Errno
			errors.As(err, &en)
			w.err = errnoError("poll", "async event descriptor", en)
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		for {
			ev, ok, err := w.d.ReadAsyncEvent()
			if err != nil {
				w.err = err
				return
			}
			if !ok {
				break
			}
			fn(ev)
		}
	}
}

// Stop ends the watcher's goroutine and waits for it; fn is not called
// after Stop returns. It is idempotent and returns the error that ended the
// goroutine early, if any. Called from fn it never returns (see
// WatchAsyncEvents).
func (w *AsyncWatcher) Stop() error {
	w.once.Do(func() {
		var one = [8]byte{1}
		_, _ = unix.Write(w.stopFD, one[:])
		<-w.done
		_ = unix.Close(w.stopFD)
		w.d.mu.Lock()
		delete(w.d.watchers, w)
		w.d.mu.Unlock()
	})
	return w.err
}
