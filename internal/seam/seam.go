// Package seam is the untyped meeting point of ctx and the provider seam
// (internal/provider). It imports neither: ctx imports it to read the
// registered providers and installs its hooks here from its init;
// internal/provider, which imports ctx for the types its interfaces
// mention, registers providers and reaches ctx's objects through it. The
// values crossing it are internal/provider's adapters, which ctx sees
// through interfaces of its own.
package seam

import (
	"sort"
	"sync"
	"unsafe"
)

var (
	mu        sync.RWMutex
	providers = map[string]any{}
)

// Register makes the provider adapter p available under name. It panics
// if name is empty, p is nil or the name is already taken.
func Register(name string, p any) {
	mu.Lock()
	defer mu.Unlock()
	if name == "" || p == nil {
		panic("provider: Register: empty name or nil provider")
	}
	if _, dup := providers[name]; dup {
		panic("provider: Register called twice for provider " + name)
	}
	providers[name] = p
}

// Lookup returns the provider adapter registered under name.
func Lookup(name string) (any, bool) {
	mu.RLock()
	defer mu.RUnlock()
	p, ok := providers[name]
	return p, ok
}

// Names returns the registered provider names, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(providers))
	for n := range providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Hooks ctx installs from its init (before any provider package's init,
// since those import ctx).
var (
	// Open opens device of the provider adapter p under name and returns
	// the *ctx.Context.
	Open func(name string, p any, device string) (any, error)
	// Handle returns the provider handle behind a ctx object (*Context,
	// *ProtectionDomain, *CompletionQueue, *SharedReceiveQueue,
	// *QueuePair, *MemoryRegion, *AddressHandle), or nil.
	Handle func(obj any) any
	// OnClose arranges for f to run when obj, a *ctx.QueuePair, a
	// *ctx.SharedReceiveQueue or a *ctx.CompletionQueue, closes, directly
	// or with a parent (a CQ, its SRQ, its PD, the Context), on the
	// goroutine that closes it: after Closed starts to report true and
	// before the provider destroys the object. An object closed already runs f at once. f runs with the
	// Context's lock held and must not call into that Context; package
	// transport stops the data plane built on the object with it, package
	// completion wakes a Notifier asleep on a CQ's events. The function
	// OnClose returns forgets f if it has not run. OnClose panics for any
	// other type.
	OnClose func(obj any, f func()) (remove func())
	// SubscribeUntilClose subscribes fn, a func(ctx.AsyncEvent), to the
	// events filter (a ctx.EventFilter) selects, through the event router
	// of obj's Context, until the subscription is cancelled or obj, a
	// *ctx.QueuePair or a *ctx.SharedReceiveQueue, closes; a closed obj is
	// refused with ctx.ErrClosed. sub is a *ctx.EventSubscription.
	SubscribeUntilClose func(obj, filter, fn any) (sub any, err error)
	// ReadAsyncEvent reads the next asynchronous event of c, a
	// *ctx.Context, without blocking, the way its EventRouter does: ev is
	// a ctx.AsyncEvent, ok is false when none is pending.
	ReadAsyncEvent func(c any) (ev any, ok bool, err error)
	// Descriptor returns the descriptor (internal/descriptor) a
	// *ctx.CompletionQueue, *ctx.QueuePair or *ctx.SharedReceiveQueue
	// keeps of its queue's memory, as the provider reported it.
	Descriptor func(obj any) any
	// CQEventFD returns the completion channel descriptor of cq, a
	// *ctx.CompletionQueue (-1 without one or once closed); ReadCQEvent
	// consumes and acknowledges one of its completion events without
	// blocking (ok is false when none is pending).
	CQEventFD   func(cq any) int
	ReadCQEvent func(cq any) (ok bool, err error)
	// CQDoorbell returns the doorbell record of the ring a *monocq.CQ
	// polls (monocq installs it from its init), so that code pairing a
	// poller with a *ctx.CompletionQueue can check that both name one
	// ring, not only one CQN: each device numbers its CQs itself.
	CQDoorbell func(poller any) unsafe.Pointer
	// PollerClosed reports whether poller is a *transport.Poller that
	// was closed (transport installs it from its init), so that package
	// completion's iterator ends over a closed Poller also when no
	// completion is in its ring.
	PollerClosed func(poller any) bool
)
