// Package expvarpub publishes the counters of queue pairs, pollers and
// channels (transport.QueueCounters, transport.CQCounters,
// channel.Counters) as one expvar variable, so that /debug/vars (import
// _ "expvar" and serve http.DefaultServeMux) shows them as JSON:
//
//	{"rc0": {"Posts": 7, "BlueFlameCopies": 2, …}, "cq0": {"Completions": 5, …}}
//
// The counters are plain fields their queue's owner goroutine writes, with
// no synchronisation on the post and poll paths. expvar reads its variables
// on the HTTP server's goroutine, so a Publisher shows snapshots that the
// owner takes: call Refresh from the goroutine that posts and polls (every
// so many polls, or when a ticker's channel is ready); it copies each
// source's counters under the Publisher's lock and allocates nothing.
// Sources added with AddFunc are read at publication time instead, on
// expvar's goroutine: the function must synchronise by itself.
//
// Invalid arguments (an empty name, a nil source or function, a Publisher
// not made by New) are errors matching ctx.ErrInvalidArgument.
package expvarpub

import (
	"errors"
	"expvar"
	"fmt"
	"sync"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/nilness"
	"github.com/mlx5kit/mlx5kit/transport"
)

// ErrExists means that the name is taken: by another expvar variable
// (New) or by another source of the Publisher (Add…).
var ErrExists = errors.New("name already published")

// queueSource is what counts for one queue pair: *rc.QP, *ud.QP, *dc.DCI,
// *dc.DCT and *transport.Queue.
type queueSource interface {
	Counters() transport.QueueCounters
}

// channelSource is what counts for one channel: *channel.Channel and
// *channel.MultiChannel.
type channelSource interface {
	Counters() channel.Counters
}

// Publisher is one expvar variable whose value is an object with a member
// per source. Its methods may be called from any goroutine; Refresh reads
// the sources and belongs on their owner's.
type Publisher struct {
	name    string
	mu      sync.Mutex
	entries map[string]*entry
	order   []*entry // the entries with a refresh, in the order added
}

// entry is one source: refresh copies its counters into the entry's
// snapshot (nil for AddFunc's sources), value returns what to publish.
type entry struct {
	name    string
	refresh func()
	value   func() any
}

// New publishes an empty Publisher under name (expvar.Publish). It fails
// with ErrExists when an expvar variable of that name exists already:
// expvar cannot take one back, so each name is published once per
// process.
func New(name string) (*Publisher, error) {
	if name == "" {
		return nil, fmt.Errorf("expvarpub: new: empty name: %w", ctx.ErrInvalidArgument)
	}
	p := &Publisher{name: name, entries: map[string]*entry{}}
	// expvar.Publish panics on a duplicate: check under expvar's own
	// order of events (a race with another Publish of the same name
	// would still panic, as expvar.Publish does).
	if expvar.Get(name) != nil {
		return nil, fmt.Errorf("expvarpub: new %q: %w", name, ErrExists)
	}
	expvar.Publish(name, expvar.Func(p.snapshot))
	return p, nil
}

// Name returns the expvar name the Publisher is published under ("" for
// a nil Publisher).
func (p *Publisher) Name() string {
	if p == nil {
		return ""
	}
	return p.name
}

// add registers e under its name.
func (p *Publisher) add(e *entry) error {
	if p == nil || p.entries == nil {
		return fmt.Errorf("expvarpub: add %q: Publisher not made by New: %w", e.name, ctx.ErrInvalidArgument)
	}
	if e.name == "" {
		return fmt.Errorf("expvarpub: %s: add: empty name: %w", p.name, ctx.ErrInvalidArgument)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, dup := p.entries[e.name]; dup {
		return fmt.Errorf("expvarpub: %s: add %q: %w", p.name, e.name, ErrExists)
	}
	p.entries[e.name] = e
	if e.refresh != nil {
		p.order = append(p.order, e)
		e.refresh()
	}
	return nil
}

// AddQueue publishes the counters of a queue pair (*rc.QP, *ud.QP,
// *dc.DCI, *dc.DCT or *transport.Queue) under name, as of the last Refresh
// (and of now: it takes a first snapshot). Enable its counting first
// (EnableCounters), or it shows zeros. A nil source, or a nil pointer of a
// source type, is an error.
func (p *Publisher) AddQueue(name string, q queueSource) error {
	if nilness.Is(q) {
		return fmt.Errorf("expvarpub: %s: add queue %q: nil source: %w", p.Name(), name, ctx.ErrInvalidArgument)
	}
	var snap transport.QueueCounters
	return p.add(&entry{name: name, refresh: func() { snap = q.Counters() }, value: func() any { return snap }})
}

// AddPoller publishes the counters of a Poller under name (see AddQueue).
func (p *Publisher) AddPoller(name string, s *transport.Poller) error {
	if s == nil {
		return fmt.Errorf("expvarpub: %s: add poller %q: nil source: %w", p.Name(), name, ctx.ErrInvalidArgument)
	}
	var snap transport.CQCounters
	return p.add(&entry{name: name, refresh: func() { snap = s.Counters() }, value: func() any { return snap }})
}

// AddChannel publishes the counters of a channel (*channel.Channel or
// *channel.MultiChannel) under name (see AddQueue; build it with
// channel.Options.Counters).
func (p *Publisher) AddChannel(name string, ch channelSource) error {
	if nilness.Is(ch) {
		return fmt.Errorf("expvarpub: %s: add channel %q: nil source: %w", p.Name(), name, ctx.ErrInvalidArgument)
	}
	var snap channel.Counters
	return p.add(&entry{name: name, refresh: func() { snap = ch.Counters() }, value: func() any { return snap }})
}

// AddFunc publishes what read returns under name, calling it each time the
// variable is read, on the reader's goroutine: read must be safe to call
// from there.
func (p *Publisher) AddFunc(name string, read func() any) error {
	if read == nil {
		return fmt.Errorf("expvarpub: %s: add func %q: nil function: %w", p.Name(), name, ctx.ErrInvalidArgument)
	}
	return p.add(&entry{name: name, value: read})
}

// Remove stops publishing name; it reports whether it was published.
func (p *Publisher) Remove(name string) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.entries[name]
	if !ok {
		return false
	}
	delete(p.entries, name)
	for i, x := range p.order {
		if x == e {
			p.order = append(p.order[:i], p.order[i+1:]...)
			break
		}
	}
	return true
}

// Refresh copies the counters of every queue, poller and channel source
// into the published snapshots. Call it on the goroutine that owns them; it
// does not allocate.
func (p *Publisher) Refresh() {
	if p == nil {
		return
	}
	p.mu.Lock()
	for _, e := range p.order {
		e.refresh()
	}
	p.mu.Unlock()
}

// snapshot is the expvar.Func: the published object. The AddFunc sources
// are read after the lock is released, so that they may call the
// Publisher.
func (p *Publisher) snapshot() any {
	p.mu.Lock()
	out := make(map[string]any, len(p.entries))
	var funcs []*entry
	for n, e := range p.entries {
		if e.refresh == nil {
			funcs = append(funcs, e)
			continue
		}
		out[n] = e.value()
	}
	p.mu.Unlock()
	for _, e := range funcs {
		out[e.name] = e.value()
	}
	return out
}
