package channel

import (
	"github.com/mlx5kit/mlx5kit/transport"
)

// Counters is a snapshot of what a channel counted (Options.Counters).
type Counters struct {
	// CQ is what the channel's Poller counted: every completion of the
	// channel's one completion queue.
	CQ transport.CQCounters
	// Queues is the sum over the channel's queue pairs (RC: one per peer;
	// DC: the initiator and each peer's target).
	Queues transport.QueueCounters
}

// enableCounters turns counting on for the poller and every queue pair.
func (c *core) enableCounters() {
	c.poller.EnableCounters()
	if c.dci != nil {
		c.dci.EnableCounters()
	}
	for i := range c.links {
		if l := &c.links[i]; l.qp != nil {
			l.qp.EnableCounters()
		} else if l.dct != nil {
			l.dct.EnableCounters()
		}
	}
}

// counting reports whether the first queue pair counts (all do or none).
func (m *MultiChannel) counting() bool {
	if m.c.dci != nil {
		return m.c.dci.Counting()
	}
	return len(m.c.links) > 0 && m.c.links[0].qp != nil && m.c.links[0].qp.Counting()
}

// Counters returns a snapshot of the channel's counters: all zero unless
// it was built with Options.Counters. It does not allocate. Like every call
// on the channel, it is its goroutine's.
func (m *MultiChannel) Counters() Counters {
	if m.zero() {
		return Counters{}
	}
	c := m.c
	out := Counters{CQ: c.poller.Counters(), Queues: transport.QueueCounters{RetriesCounted: true}}
	if c.dci != nil {
		out.Queues.Add(c.dci.Counters())
	}
	for i := range c.links {
		out.Queues.Add(m.peerCounters(i))
	}
	if !m.counting() {
		out.Queues.RetriesCounted = false
	}
	return out
}

func (m *MultiChannel) peerCounters(peer int) transport.QueueCounters {
	l := &m.c.links[peer]
	switch {
	case l.qp != nil:
		return l.qp.Counters()
	case l.dct != nil:
		return l.dct.Counters()
	}
	return transport.QueueCounters{}
}
