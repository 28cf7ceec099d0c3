//go:build cgo && linux

package emulate

/*
#include "uverbs_abi.h"
*/
import "C"

import (
	"encoding/binary"
	"slices"
	"sync"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/asyncevent"
)

// Async events. The model raises a device's async events (CQ error, QP
// fatal and access errors, SRQ limit, last WQE reached, port events) to
// the context that opened the device (simadopt.SubscribeAsyncEvents); the
// context writes each as one struct ib_uverbs_async_event_desc into an
// async event descriptor, as ib_uverbs_async_handler queues one: the
// element is the user handle of the QP, CQ or SRQ given at creation
// (libibverbs' struct ibv_qp, ibv_cq or ibv_srq), the port number for a
// port or device event. An object's events go to the context's first async
// descriptor (GET_CONTEXT's, or the first ASYNC_EVENT_ALLOC's: the
// kernel's default_async_file) or, for a CQ, to the one CQ_CREATE named;
// port events go to every async descriptor of the context, as every async
// file registers an event handler. ibv_get_async_event reads them from the
// descriptor with no interposing: a pipe's read, poll and O_NONBLOCK are
// the event file's (EAGAIN when empty and non-blocking).
//
// A destroyed object's unread events are taken out of the descriptor
// (ib_uverbs_release_uevent) and the destroy response reports those that
// were read (events_reported, async_events_reported), for which libibverbs
// waits for as many ibv_ack_async_event calls before ibv_destroy_* returns.

// asyncRecordSize is sizeof(struct ib_uverbs_async_event_desc).
const asyncRecordSize = C.sizeof_struct_ib_uverbs_async_event_desc

// asyncClass is what an async event's element names.
type asyncClass uint8

const (
	asyncPort asyncClass = iota // a port number (port and device events)
	asyncQP
	asyncCQ
	asyncSRQ
)

// asyncEventType maps the model's event type to the verbs event number
// (internal/asyncevent: enum ibv_event_type, the kernel's enum
// ib_event_type) and the class of its element; ok is false for a type the
// ABI has no number for and for WQ_FATAL: the model has no work queues. A
// device event's element is a port number, as the kernel writes one.
func asyncEventType(t ctx.AsyncEventType) (typ uint32, class asyncClass, ok bool) {
	typ, ok = asyncevent.Verbs(t)
	if !ok {
		return 0, 0, false
	}
	switch asyncevent.ElementOf(typ) {
	case asyncevent.ElementCQ:
		return typ, asyncCQ, true
	case asyncevent.ElementQP:
		return typ, asyncQP, true
	case asyncevent.ElementSRQ:
		return typ, asyncSRQ, true
	case asyncevent.ElementPort, asyncevent.ElementDevice:
		return typ, asyncPort, true
	}
	return 0, 0, false
}

// asyncKey names an object as the model's events do: by class and number
// (QPN, CQN, SRQN).
type asyncKey struct {
	class asyncClass
	num   uint32
}

// asyncSource is the async event source of one QP, CQ or SRQ.
type asyncSource struct {
	key    asyncKey
	handle uint64     // the user handle given at creation
	file   *eventFile // where its events go; nil drops them
	tally  eventTally // its records in file
}

// asyncEvents routes a context's async events. Its lock is taken by the
// model's engine with the model's lock held (post) and by commands with
// the kernel's lock held; it is never held while calling the model.
type asyncEvents struct {
	mu sync.Mutex
	// files are the context's async event descriptors, the default first.
	files   []*eventFile
	sources map[asyncKey]*asyncSource
}

// addFile adds an async event descriptor of the context.
func (a *asyncEvents) addFile(e *eventFile) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.files = append(a.files, e)
}

// removeFile forgets an async event descriptor whose creation failed
// (before any object's events went to it).
func (a *asyncEvents) removeFile(e *eventFile) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i := slices.Index(a.files, e); i >= 0 {
		a.files = slices.Delete(a.files, i, i+1)
	}
}

// add registers an object's event source; file nil means the default
// descriptor.
func (a *asyncEvents) add(key asyncKey, handle uint64, file *eventFile) *asyncSource {
	a.mu.Lock()
	defer a.mu.Unlock()
	if file == nil && len(a.files) > 0 {
		file = a.files[0]
	}
	s := &asyncSource{key: key, handle: handle, file: file}
	if a.sources == nil {
		a.sources = map[asyncKey]*asyncSource{}
	}
	a.sources[key] = s
	return s
}

// release forgets an object's event source and returns the events
// reported for it: those written less those still unread, which are
// taken out of the descriptor. The object must be gone from the model
// already. nil reports none.
func (a *asyncEvents) release(s *asyncSource) uint32 {
	if s == nil {
		return 0
	}
	a.mu.Lock()
	if a.sources[s.key] == s {
		delete(a.sources, s.key)
	}
	a.mu.Unlock()
	if s.file == nil {
		return 0
	}
	return s.file.reported(&s.tally)
}

// post writes one event of the model; it runs on the model's engine or in
// a verb, with the model's lock held. An event for an object the context
// does not know (destroyed meanwhile) or of a type the ABI has no number
// for is dropped.
func (a *asyncEvents) post(ev ctx.AsyncEvent) {
	typ, class, ok := asyncEventType(ev.Type)
	if !ok {
		return
	}
	var rec [asyncRecordSize]byte
	binary.NativeEndian.PutUint32(rec[8:], typ)
	a.mu.Lock()
	defer a.mu.Unlock()
	if class == asyncPort {
		binary.NativeEndian.PutUint64(rec[:], uint64(ev.Port))
		for _, f := range a.files {
			f.writeRecord(rec[:], nil)
		}
		return
	}
	num := ev.QPN
	switch class {
	case asyncCQ:
		num = ev.CQN
	case asyncSRQ:
		num = ev.SRQN
	}
	s := a.sources[asyncKey{class, num}]
	if s == nil || s.file == nil {
		return
	}
	binary.NativeEndian.PutUint64(rec[:], s.handle)
	s.file.writeRecord(rec[:], &s.tally)
}
