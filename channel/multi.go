package channel

import (
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/rc"
)

// MultiChannel is a connected channel to several peers, all sharing one
// protection domain (a memory region registered once serves every peer)
// and one completion queue. Requests name their peer by index.
//
// It offers three levels of control: blocking calls (Send, ScatterSend,
// GatherReceive, MulticastSend, …) that return when their work completed;
// Scope, whose work is all polled before it returns; and raw posts
// (PostSend, …) returning a Pending to poll when the caller likes.
//
// A MultiChannel is used by one goroutine at a time.
type MultiChannel struct {
	c *core
}

// Peers returns the number of peers.
func (m *MultiChannel) Peers() int { return len(m.c.links) }

// Transport returns the channel's transport.
func (m *MultiChannel) Transport() Transport { return m.c.transport }

// ProtectionDomain returns the PD every queue of the channel belongs to;
// register the memory the requests use in it.
func (m *MultiChannel) ProtectionDomain() *ctx.ProtectionDomain { return m.c.pd }

// Remote returns the endpoint peer sent in the handshake.
func (m *MultiChannel) Remote(peer int) endpoint.Endpoint {
	if l := m.c.peerLink(peer); l != nil {
		return l.ep
	}
	return endpoint.Endpoint{}
}

// RemoteRegion returns region i of those peer shared, or an error when it
// shared fewer.
func (m *MultiChannel) RemoteRegion(peer, i int) (endpoint.RemoteRegion, error) {
	l := m.c.peerLink(peer)
	if l == nil {
		return endpoint.RemoteRegion{}, m.c.badPeer(peer, 0)
	}
	if i < 0 || i >= len(l.ep.Regions) {
		return endpoint.RemoteRegion{}, fmt.Errorf("channel: peer %d shared %d regions, not %d: %w", peer, len(l.ep.Regions), i+1, ctx.ErrNotFound)
	}
	return l.ep.Regions[i], nil
}

// QP returns the RC queue pair to peer (nil for a DC channel), for raw
// posting with its own wqebuilder stages. Work posted on it directly is not
// tracked by the channel: its completions count as strays (see Err).
func (m *MultiChannel) QP(peer int) *rc.QP {
	if l := m.c.peerLink(peer); l != nil {
		return l.qp
	}
	return nil
}

// DCI returns the DC initiator of a DC channel (nil for RC).
func (m *MultiChannel) DCI() *dc.DCI { return m.c.dci }

// Poller returns the poller of the channel's completion queue.
func (m *MultiChannel) Poller() *rc.Poller { return m.c.poller }

// Outstanding returns the number of work requests posted and not yet
// completed.
func (m *MultiChannel) Outstanding() int { return m.c.pending }

// Err returns the first problem met while polling that belongs to no work
// request: a completion the channel did not post, or the CQ's own error
// (overrun).
func (m *MultiChannel) Err() error {
	if err := m.c.poller.Err(); err != nil {
		return err
	}
	return m.c.stray
}

// Close destroys the channel's queues and completion queue (not the
// protection domain or the memory regions). Outstanding work is lost.
func (m *MultiChannel) Close() error { return m.c.close() }

// ---- raw level ----

// Pending is a work request posted by a raw Post call (or inside a scope).
// Its completion is recorded when the channel polls it (Poll, or any
// waiting call). The record is kept until four times as many work requests
// as the channel's queues hold have been posted after it; a Pending asked
// later reports ErrStale.
type Pending struct {
	c   *core
	seq uint64
}

// Done reports whether the request has completed, without polling.
func (p Pending) Done() bool {
	s := &p.c.slots[p.seq&p.c.mask]
	return s.seq == p.seq && (s.state == slotDone || s.state == slotFailed)
}

// Poll polls the channel once and reports whether the request has
// completed, with its error.
func (p Pending) Poll() (bool, error) {
	if !p.Done() {
		p.c.poll()
	}
	s := &p.c.slots[p.seq&p.c.mask]
	switch {
	case s.seq != p.seq:
		return false, ErrStale
	case s.state == slotFailed:
		return true, s.err()
	}
	return s.state == slotDone, nil
}

// Wait polls until the request has completed and returns its error.
func (p Pending) Wait() error {
	if err := p.c.waitSeq(p.seq); err != nil {
		return err
	}
	if s := &p.c.slots[p.seq&p.c.mask]; s.state == slotFailed {
		return s.err()
	}
	return nil
}

// Result returns the result of a completed request (ok false while it is
// outstanding or when its record was reused).
func (p Pending) Result() (r Result, ok bool) {
	s := &p.c.slots[p.seq&p.c.mask]
	if s.seq != p.seq || (s.state != slotDone && s.state != slotFailed) {
		return Result{}, false
	}
	return s.result(), true
}

// WRID returns the work request id the request was posted with.
func (p Pending) WRID() uint64 { return p.seq }

// Poll processes the completions that have arrived (one batch) and returns
// how many there were.
func (m *MultiChannel) Poll() int { return m.c.poll() }

// PostSend posts a SEND without waiting. A full send queue is an error
// (wrapping wqebuilder.ErrQueueFull): poll and post again.
func (m *MultiChannel) PostSend(r SendRequest) (Pending, error) {
	seq, err := m.c.postSend(&r)
	if err != nil {
		return Pending{}, wrap(r.Peer, OpSend, err)
	}
	return Pending{m.c, seq}, nil
}

// PostReceive posts a receive without waiting.
func (m *MultiChannel) PostReceive(r RecvRequest) (Pending, error) {
	seq, err := m.c.postRecv(&r)
	if err != nil {
		return Pending{}, wrap(r.Peer, OpRecv, err)
	}
	return Pending{m.c, seq}, nil
}

// PostWrite posts an RDMA WRITE without waiting.
func (m *MultiChannel) PostWrite(r WriteRequest) (Pending, error) {
	seq, err := m.c.postWrite(&r)
	if err != nil {
		return Pending{}, wrap(r.Peer, OpWrite, err)
	}
	return Pending{m.c, seq}, nil
}

// PostRead posts an RDMA READ without waiting.
func (m *MultiChannel) PostRead(r ReadRequest) (Pending, error) {
	seq, err := m.c.postRead(&r)
	if err != nil {
		return Pending{}, wrap(r.Peer, OpRead, err)
	}
	return Pending{m.c, seq}, nil
}

// ---- blocking level ----

// Send sends and waits for the completion.
func (m *MultiChannel) Send(r SendRequest) error {
	seq, err := m.c.post(OpSend, r.Peer, &r, nil, nil, nil)
	if err != nil {
		return err
	}
	return m.c.waitRange(seq, seq+1)
}

// Receive posts a receive and waits until a message arrived in it.
func (m *MultiChannel) Receive(r RecvRequest) (Result, error) {
	seq, err := m.c.post(OpRecv, r.Peer, nil, &r, nil, nil)
	if err != nil {
		return Result{Peer: r.Peer, Op: OpRecv, Err: err}, err
	}
	if err := m.c.waitSeq(seq); err != nil {
		return Result{Peer: r.Peer, Op: OpRecv, Err: err}, err
	}
	res := m.c.slots[seq&m.c.mask].result()
	return res, res.Err
}

// Write writes and waits for the completion.
func (m *MultiChannel) Write(r WriteRequest) error {
	seq, err := m.c.post(OpWrite, r.Peer, nil, nil, &r, nil)
	if err != nil {
		return err
	}
	return m.c.waitRange(seq, seq+1)
}

// Read reads and waits until the data is in the local buffers.
func (m *MultiChannel) Read(r ReadRequest) error {
	seq, err := m.c.post(OpRead, r.Peer, nil, nil, nil, &r)
	if err != nil {
		return err
	}
	return m.c.waitRange(seq, seq+1)
}

// batch runs posts of a blocking call: it waits for whatever was posted,
// also when a post fails, and joins every error.
func (m *MultiChannel) batch(n int, post func(i int) (uint64, error)) error {
	first := m.c.seq
	var perr error
	for i := 0; i < n; i++ {
		if _, err := post(i); err != nil {
			perr = err
			break
		}
	}
	werr := m.c.waitRange(first, m.c.seq)
	if perr == nil {
		return werr
	}
	return errors.Join(perr, werr)
}

// ScatterSend sends reqs[i] to reqs[i].Peer for every i and waits for all
// of them. Errors from any of them are joined.
func (m *MultiChannel) ScatterSend(reqs []SendRequest) error {
	return m.batch(len(reqs), func(i int) (uint64, error) {
		return m.c.post(OpSend, reqs[i].Peer, &reqs[i], nil, nil, nil)
	})
}

// ScatterWrite writes every request to its peer and waits for all.
func (m *MultiChannel) ScatterWrite(reqs []WriteRequest) error {
	return m.batch(len(reqs), func(i int) (uint64, error) {
		return m.c.post(OpWrite, reqs[i].Peer, nil, nil, &reqs[i], nil)
	})
}

// GatherReceive posts every receive and waits until each has received a
// message. When results is not nil (it must then be at least as long as
// reqs) results[i] receives the outcome of reqs[i].
func (m *MultiChannel) GatherReceive(reqs []RecvRequest, results []Result) error {
	if results != nil && len(results) < len(reqs) {
		return fmt.Errorf("channel: gather receive: %d results for %d requests: %w", len(results), len(reqs), ctx.ErrInvalidArgument)
	}
	first := m.c.seq
	err := m.batch(len(reqs), func(i int) (uint64, error) {
		return m.c.post(OpRecv, reqs[i].Peer, nil, &reqs[i], nil, nil)
	})
	for i := range results[:min(len(results), int(m.c.seq-first))] {
		if s := &m.c.slots[(first+uint64(i))&m.c.mask]; s.seq == first+uint64(i) {
			results[i] = s.result()
		}
	}
	return err
}

// GatherRead reads from every peer named in reqs and waits for all.
func (m *MultiChannel) GatherRead(reqs []ReadRequest) error {
	return m.batch(len(reqs), func(i int) (uint64, error) {
		return m.c.post(OpRead, reqs[i].Peer, nil, nil, nil, &reqs[i])
	})
}

// MulticastSend sends the same message (r's buffers and immediate data;
// r.Peer is ignored) to every peer in peers and waits for all.
func (m *MultiChannel) MulticastSend(peers []int, r SendRequest) error {
	return m.batch(len(peers), func(i int) (uint64, error) {
		r.Peer = peers[i]
		return m.c.post(OpSend, r.Peer, &r, nil, nil, nil)
	})
}
