package channel

import (
	"context"
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
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
// A MultiChannel is used by one goroutine at a time, Close included: to
// end a blocking call from another goroutine, cancel its context (the
// channel then fails, see the package documentation). Closing the
// objects under the channel is the exception, as in package transport:
// its Context or protection domain, or one of its queue pairs, may be
// closed from any goroutine while the owner waits. The owner's wait then
// ends with an error wrapping ctx.ErrClosed (the work outstanding on a
// closed queue pair never completes), the wait closes what is left of the
// channel, and the channel is closed from then on (Close returns nil).
//
// A zero MultiChannel (or Channel), one not made by this package, has no
// peers: its getters return zero values (nil, 0), Poll polls nothing, and
// Err, Fail, Scope, Reestablish, the raw posts and the blocking calls
// refuse it with an error wrapping ctx.ErrInvalidArgument.
type MultiChannel struct {
	c *core
}

// zero reports whether m is nil or a zero MultiChannel (a zero Channel's
// is nil), one not made by this package.
func (m *MultiChannel) zero() bool { return m == nil || m.c == nil }

// Peers returns the number of peers.
func (m *MultiChannel) Peers() int {
	if m.zero() {
		return 0
	}
	return len(m.c.links)
}

// Transport returns the channel's transport.
func (m *MultiChannel) Transport() endpoint.Transport {
	if m.zero() {
		return 0
	}
	return m.c.transport
}

// ProtectionDomain returns the PD every queue of the channel belongs to;
// register the memory the requests use in it.
func (m *MultiChannel) ProtectionDomain() *ctx.ProtectionDomain {
	if m.zero() {
		return nil
	}
	return m.c.pd
}

// GID returns the local GID table entry the channel sends from (see
// PreparedMulti.GID).
func (m *MultiChannel) GID() ctx.GIDEntry {
	if m.zero() {
		return ctx.GIDEntry{}
	}
	return m.c.gid()
}

// Remote returns the endpoint peer sent in the handshake.
func (m *MultiChannel) Remote(peer int) endpoint.Endpoint {
	if m.zero() {
		return endpoint.Endpoint{}
	}
	if l := m.c.peerLink(peer); l != nil {
		return l.ep
	}
	return endpoint.Endpoint{}
}

// RemoteRegion returns region i of those peer shared, or an error when it
// shared fewer.
func (m *MultiChannel) RemoteRegion(peer, i int) (endpoint.RemoteRegion, error) {
	if m.zero() {
		return endpoint.RemoteRegion{}, fmt.Errorf("channel: remote region %d of peer %d: %w (%w)", i, peer, ErrPeer, errZeroChannel)
	}
	l := m.c.peerLink(peer)
	if l == nil {
		return endpoint.RemoteRegion{}, fmt.Errorf("channel: remote region %d of peer %d: %w (the channel has %d)", i, peer, ErrPeer, len(m.c.links))
	}
	if i < 0 || i >= len(l.ep.Regions) {
		return endpoint.RemoteRegion{}, fmt.Errorf("channel: peer %d shared %d regions, not %d: %w", peer, len(l.ep.Regions), i+1, ctx.ErrNotFound)
	}
	return l.ep.Regions[i], nil
}

// QP returns the RC queue pair to peer (nil for a DC channel), for raw
// posting with its own wqebuilder stages. Work posted on it directly is not
// tracked by the channel: its completions count as strays (see Err), and
// they take room in the completion queue the channel sized for its own
// work, which they can overrun: Err then reports the overrun, and the
// channel's next wait fails it (ErrFailed).
func (m *MultiChannel) QP(peer int) *rc.QP {
	if m.zero() {
		return nil
	}
	if l := m.c.peerLink(peer); l != nil {
		return l.qp
	}
	return nil
}

// DCI returns the DC initiator of a DC channel (nil for RC). Work posted
// on it directly is not tracked, as with QP.
func (m *MultiChannel) DCI() *dc.DCI {
	if m.zero() {
		return nil
	}
	return m.c.dci
}

// Notifier returns the completion-event waiter of a channel built with
// Options.Events (nil otherwise).
func (m *MultiChannel) Notifier() *completion.Notifier {
	if m.zero() {
		return nil
	}
	return m.c.notifier
}

// Poller returns the poller of the channel's completion queue.
func (m *MultiChannel) Poller() *transport.Poller {
	if m.zero() {
		return nil
	}
	return m.c.poller
}

// Outstanding returns the number of work requests posted and not yet
// completed.
func (m *MultiChannel) Outstanding() int {
	if m.zero() {
		return 0
	}
	return m.c.pending
}

// errZeroChannel is the error of a Channel or MultiChannel not made by
// this package (a zero value): Err's answer, and Fail's, Scope's and
// Reestablish's.
var errZeroChannel = fmt.Errorf("channel: not made by this package: %w", ctx.ErrInvalidArgument)

// Err returns the first problem met while polling that belongs to no work
// request: the async event that ended the channel (Options.OnEvent), a
// completion the channel did not post, or the CQ's own error (overrun).
// Once the channel is closed (Close, its queues closed under it, or a
// Fail that destroyed its queues, as a DC channel's with receives
// outstanding does) and none of those came first, it returns the closed
// poller's error, wrapping ctx.ErrClosed.
func (m *MultiChannel) Err() error {
	if m.zero() {
		return errZeroChannel // a zero Channel or MultiChannel
	}
	if err := m.c.eventErr(); err != nil {
		if m.c.failed {
			return fmt.Errorf("channel: %w (%w)", err, ErrFailed)
		}
		return fmt.Errorf("channel: %w", err)
	}
	if err := m.c.poller.Err(); err != nil {
		return err
	}
	return m.c.stray
}

// Close destroys the channel's queues and completion queue (not the
// protection domain or the memory regions). Outstanding work is lost.
//
// Close of a nil *MultiChannel returns nil.
func (m *MultiChannel) Close() error {
	if m.zero() {
		return nil // nil, or a zero MultiChannel
	}
	return m.c.close()
}

// Fail moves every queue of the channel to the error state and polls until
// each outstanding work request has completed with a flush error (or, for
// the receives of a DC channel, which sit in shared receive queues that an
// error state does not flush, destroys the queues). When it returns, the
// device writes no buffer of any work request posted before. The channel
// then refuses new work with ErrFailed: close it and build a new one. It is
// what a blocking call or scope does when its context ends; call it after
// a Pending.Wait gave up, before reusing that request's buffers.
func (m *MultiChannel) Fail() error {
	if m.zero() {
		return errZeroChannel
	}
	return m.c.fail()
}

// ---- raw level ----

// Pending is a work request posted by a raw Post call (or inside a scope).
// Its completion is recorded when the channel polls it (Poll, or any
// waiting call). After completion the record is kept until as many
// requests as the channel's queues hold (and at least 256) completed after
// it; a Pending asked later reports ErrStale (Poll, Wait) and that it is
// done (Done).
type Pending struct {
	c    *core
	wrid uint64
}

// Done reports whether the request has completed, without polling. A
// request whose record was reused (Poll and Wait report ErrStale) has
// completed: Done reports true for it, and Result finds no result. So
// does a request still outstanding when the channel was closed (or its
// queue pairs were, under it): it never completes (Poll reports
// ctx.ErrClosed), but its queue pair is destroyed and its buffers are the
// caller's again. The Pending of a refused post names no request: Done
// reports false.
func (p Pending) Done() bool {
	s := p.c.slotOf(p.wrid)
	if s == nil {
		// Reused only once completed, or no request at all.
		return p.c != nil && p.wrid != 0
	}
	return s.state == slotDone || s.state == slotFailed || p.c.closed || p.c.under.Load()
}

// Poll polls the channel once (unless the request has completed already)
// and reports whether the request has completed, with its error. A request
// still outstanding when the channel was closed never completes: Poll then
// reports an error wrapping ctx.ErrClosed. Nor does one whose completion
// queue is in error (overrun or corrupt, which delivers nothing more):
// Poll then reports the queue's error (errors.Is with monocq.ErrOverrun,
// for one), and the request's buffers stay the device's until Fail, as a
// wait on it would call.
func (p Pending) Poll() (bool, error) {
	if p.c == nil || p.wrid == 0 {
		return false, errNoRequest
	}
	if !p.Done() {
		p.c.poll()
		if p.c.dciFailedNow() {
			p.c.failDCI()
		}
	}
	s := p.c.slotOf(p.wrid)
	switch {
	case s == nil:
		return false, ErrStale
	case s.state == slotFailed:
		return true, s.err()
	case s.state != slotDone && p.c.shut():
		// Its completion will never be polled.
		return false, fmt.Errorf("channel: poll work request %#x: %w", p.wrid, closedError{under: p.c.closedUnder})
	case s.state != slotDone:
		return false, p.c.ringErr(p.wrid)
	}
	return true, nil
}

// ringErr is Poll's error for work request wrid, not completed: the
// completion queue's error when it is in error (it delivers nothing
// more), else nil. Out of line: Poll of a completed request stays small.
//
//go:noinline
func (c *core) ringErr(wrid uint64) error {
	if err := c.poller.CQ().Err(); err != nil {
		return fmt.Errorf("channel: poll work request %#x: %w", wrid, &cqError{err: err})
	}
	return nil
}

// Wait polls until the request has completed and returns its error.
// When c ends first it returns an error wrapping c.Err() (errors.Is with
// context.Canceled or context.DeadlineExceeded) and the request stays
// outstanding: the device owns its buffers until it completes, so do not
// reuse them before Done reports true, or call MultiChannel.Fail, which
// flushes every outstanding request of the channel.
func (p Pending) Wait(c context.Context) error {
	if p.c == nil || p.wrid == 0 {
		return errNoRequest
	}
	s, err := p.c.wait(c, p.wrid)
	if err != nil {
		if c.Err() != nil && errors.Is(err, c.Err()) {
			return fmt.Errorf("channel: wait for work request %#x: %w (still outstanding)", p.wrid, err)
		}
		if errors.As(err, new(closedError)) {
			return fmt.Errorf("channel: wait for work request %#x: %w", p.wrid, err)
		}
		return err
	}
	if s.state == slotFailed {
		err := s.err()
		if p.c.eventMayExplain() {
			// An event that ends the channel may be why.
			if eerr := p.c.heldEventErr(); eerr != nil {
				return errors.Join(err, p.c.cancel("wait", eerr))
			}
		}
		return err
	}
	return nil
}

// Result returns the result of a completed request (ok false while it is
// outstanding or when its record was reused).
func (p Pending) Result() (r Result, ok bool) {
	s := p.c.slotOf(p.wrid)
	if s == nil || (s.state != slotDone && s.state != slotFailed) {
		return Result{}, false
	}
	return s.result(), true
}

// errNoRequest is what the Pending of a refused post (returned with the
// post's error) reports: it names no work request.
var errNoRequest = fmt.Errorf("channel: the Pending of a refused post names no work request: %w", ctx.ErrInvalidArgument)

// WRID returns the work request id the request was posted with.
func (p Pending) WRID() uint64 { return p.wrid }

// Poll processes the completions that have arrived (one batch) and returns
// how many there were.
func (m *MultiChannel) Poll() int {
	if m.zero() {
		return 0
	}
	n := m.c.poll()
	if m.c.dciFailedNow() {
		m.c.failDCI()
	}
	return n
}

// PostSend posts a SEND without waiting. A full send queue is an error
// (wrapping wqebuilder.ErrQueueFull): poll and post again. So is a send
// past the sends' share of the completion queue (what it holds less one,
// less the receives the depths allow), or while the work outstanding
// fills it: one more could overrun it.
func (m *MultiChannel) PostSend(r SendRequest) (Pending, error) {
	if m.zero() {
		return Pending{}, wrap(r.Peer, OpSend, errZeroChannel)
	}
	seq, err := m.c.postSend(&r)
	if err != nil {
		return Pending{}, wrap(r.Peer, OpSend, err)
	}
	return Pending{m.c, seq}, nil
}

// PostReceive posts a receive without waiting. A full receive queue is an
// error (wrapping transport.ErrReceiveQueueFull), and so is a receive past
// the receives' share of the completion queue (what it holds less one,
// less the sends the depths allow), or while the work outstanding fills
// it.
func (m *MultiChannel) PostReceive(r RecvRequest) (Pending, error) {
	if m.zero() {
		return Pending{}, wrap(r.Peer, OpRecv, errZeroChannel)
	}
	seq, err := m.c.postRecv(&r)
	if err != nil {
		return Pending{}, wrap(r.Peer, OpRecv, err)
	}
	return Pending{m.c, seq}, nil
}

// PostWrite posts an RDMA WRITE without waiting, refused as PostSend is.
func (m *MultiChannel) PostWrite(r WriteRequest) (Pending, error) {
	if m.zero() {
		return Pending{}, wrap(r.Peer, OpWrite, errZeroChannel)
	}
	seq, err := m.c.postWrite(&r)
	if err != nil {
		return Pending{}, wrap(r.Peer, OpWrite, err)
	}
	return Pending{m.c, seq}, nil
}

// PostRead posts an RDMA READ without waiting, refused as PostSend is.
func (m *MultiChannel) PostRead(r ReadRequest) (Pending, error) {
	if m.zero() {
		return Pending{}, wrap(r.Peer, OpRead, errZeroChannel)
	}
	seq, err := m.c.postRead(&r)
	if err != nil {
		return Pending{}, wrap(r.Peer, OpRead, err)
	}
	return Pending{m.c, seq}, nil
}

// PostCompareSwap posts an atomic compare-and-swap without waiting; the
// old value is in r.Result once it completed. It is refused as PostSend
// is.
func (m *MultiChannel) PostCompareSwap(r CompareSwapRequest) (Pending, error) {
	if m.zero() {
		return Pending{}, wrap(r.Peer, OpCompareSwap, errZeroChannel)
	}
	seq, err := m.c.postCompareSwap(&r)
	if err != nil {
		return Pending{}, wrap(r.Peer, OpCompareSwap, err)
	}
	return Pending{m.c, seq}, nil
}

// PostFetchAdd posts an atomic fetch-and-add without waiting; the old value
// is in r.Result once it completed. It is refused as PostSend is.
func (m *MultiChannel) PostFetchAdd(r FetchAddRequest) (Pending, error) {
	if m.zero() {
		return Pending{}, wrap(r.Peer, OpFetchAdd, errZeroChannel)
	}
	seq, err := m.c.postFetchAdd(&r)
	if err != nil {
		return Pending{}, wrap(r.Peer, OpFetchAdd, err)
	}
	return Pending{m.c, seq}, nil
}

// ---- blocking level ----
//
// Each blocking call takes a context.Context first (context.Background()
// when nothing cancels it). See the package documentation for what an
// ended context does.

// start refuses a blocking call op on a zero channel, and one whose
// context c has ended (see ended).
func (m *MultiChannel) start(c context.Context, op string) error {
	if m.zero() {
		return fmt.Errorf("channel: %s: %w", op, errZeroChannel)
	}
	return ended(c, op)
}

// CompareSwap runs an atomic compare-and-swap at the peer and waits
// until the old value is in r.Result, or until c ends.
func (m *MultiChannel) CompareSwap(c context.Context, r CompareSwapRequest) error {
	if err := m.start(c, "compare-and-swap"); err != nil {
		return err
	}
	m.c.startBatch("compare-and-swap", nil)
	_, err := m.c.postAtomic(c, r.Peer, &r, nil)
	return m.c.finishBatch(c, err)
}

// FetchAdd runs an atomic fetch-and-add at the peer and waits until
// the old value is in r.Result, or until c ends.
func (m *MultiChannel) FetchAdd(c context.Context, r FetchAddRequest) error {
	if err := m.start(c, "fetch-and-add"); err != nil {
		return err
	}
	m.c.startBatch("fetch-and-add", nil)
	_, err := m.c.postAtomic(c, r.Peer, nil, &r)
	return m.c.finishBatch(c, err)
}

// Send sends and waits for the completion, or until c ends.
func (m *MultiChannel) Send(c context.Context, r SendRequest) error {
	if err := m.start(c, "send"); err != nil {
		return err
	}
	m.c.startBatch("send", nil)
	_, err := m.c.post(c, OpSend, r.Peer, &r, nil, nil, nil)
	return m.c.finishBatch(c, err)
}

// Receive posts a receive and waits until a message arrived in it,
// or until c ends.
func (m *MultiChannel) Receive(c context.Context, r RecvRequest) (Result, error) {
	if err := m.start(c, "receive"); err != nil {
		return Result{Peer: r.Peer, Op: OpRecv, Err: err}, err
	}
	m.c.startBatch("receive", nil)
	wrid, err := m.c.post(c, OpRecv, r.Peer, nil, &r, nil, nil)
	err = m.c.finishBatch(c, err)
	if s := m.c.slotOf(wrid); err == nil && s != nil {
		return s.result(), nil
	}
	return Result{Peer: r.Peer, Op: OpRecv, Err: err}, err
}

// Write writes and waits for the completion, or until c ends.
func (m *MultiChannel) Write(c context.Context, r WriteRequest) error {
	if err := m.start(c, "write"); err != nil {
		return err
	}
	m.c.startBatch("write", nil)
	_, err := m.c.post(c, OpWrite, r.Peer, nil, nil, &r, nil)
	return m.c.finishBatch(c, err)
}

// Read reads and waits until the data is in the local buffers, or
// until c ends.
func (m *MultiChannel) Read(c context.Context, r ReadRequest) error {
	if err := m.start(c, "read"); err != nil {
		return err
	}
	m.c.startBatch("read", nil)
	_, err := m.c.post(c, OpRead, r.Peer, nil, nil, nil, &r)
	return m.c.finishBatch(c, err)
}

// ScatterSend sends reqs[i] to reqs[i].Peer for every i and waits
// for all of them (or until c ends). A refused post stops the posting;
// whatever was posted is still waited for. The errors of every failed
// request are joined.
func (m *MultiChannel) ScatterSend(c context.Context, reqs []SendRequest) error {
	if err := m.start(c, "scatter send"); err != nil {
		return err
	}
	b := m.c.startBatch("scatter send", nil)
	var err error
	for i := range reqs {
		b.item = int32(i)
		if _, err = m.c.post(c, OpSend, reqs[i].Peer, &reqs[i], nil, nil, nil); err != nil {
			break
		}
	}
	return m.c.finishBatch(c, err)
}

// ScatterWrite writes every request to its peer and waits for all
// (or until c ends).
func (m *MultiChannel) ScatterWrite(c context.Context, reqs []WriteRequest) error {
	if err := m.start(c, "scatter write"); err != nil {
		return err
	}
	b := m.c.startBatch("scatter write", nil)
	var err error
	for i := range reqs {
		b.item = int32(i)
		if _, err = m.c.post(c, OpWrite, reqs[i].Peer, nil, nil, &reqs[i], nil); err != nil {
			break
		}
	}
	return m.c.finishBatch(c, err)
}

// GatherReceive posts every receive and waits until each has
// received a message (or until c ends). When results is not nil (it must
// then be at least as long as reqs) results[i] receives the outcome of
// reqs[i]: that of its completion, or, for a request that was not posted
// or did not complete before the call returned, the call's error (as
// Receive returns it).
func (m *MultiChannel) GatherReceive(c context.Context, reqs []RecvRequest, results []Result) error {
	if results != nil && len(results) < len(reqs) {
		return fmt.Errorf("channel: gather receive: %d results for %d requests: %w", len(results), len(reqs), ctx.ErrInvalidArgument)
	}
	if results != nil {
		// A result still zero when the call returns is of a request
		// that did not complete (b.complete sets Op).
		clear(results[:len(reqs)])
	}
	if err := m.start(c, "gather receive"); err != nil {
		notCompleted(reqs, results, err)
		return err
	}
	b := m.c.startBatch("gather receive", results)
	var err error
	for i := range reqs {
		b.item = int32(i)
		if _, err = m.c.post(c, OpRecv, reqs[i].Peer, nil, &reqs[i], nil, nil); err != nil {
			break
		}
	}
	err = m.c.finishBatch(c, err)
	if err != nil {
		notCompleted(reqs, results, err)
	}
	return err
}

// notCompleted gives each request of a gather receive that has no result
// (results[i].Op is 0: not posted, or not completed) the call's error.
func notCompleted(reqs []RecvRequest, results []Result, err error) {
	for i := range results[:min(len(results), len(reqs))] {
		if results[i].Op == 0 {
			results[i] = Result{Peer: reqs[i].Peer, Op: OpRecv, Err: err}
		}
	}
}

// GatherRead reads from every peer named in reqs and waits for all
// (or until c ends).
func (m *MultiChannel) GatherRead(c context.Context, reqs []ReadRequest) error {
	if err := m.start(c, "gather read"); err != nil {
		return err
	}
	b := m.c.startBatch("gather read", nil)
	var err error
	for i := range reqs {
		b.item = int32(i)
		if _, err = m.c.post(c, OpRead, reqs[i].Peer, nil, nil, nil, &reqs[i]); err != nil {
			break
		}
	}
	return m.c.finishBatch(c, err)
}

// MulticastSend sends the same message (r's buffers and immediate
// data; r.Peer is ignored) to every peer in peers and waits for all (or
// until c ends).
func (m *MultiChannel) MulticastSend(c context.Context, peers []int, r SendRequest) error {
	if err := m.start(c, "multicast send"); err != nil {
		return err
	}
	b := m.c.startBatch("multicast send", nil)
	var err error
	for i, p := range peers {
		b.item = int32(i)
		r.Peer = p
		if _, err = m.c.post(c, OpSend, p, &r, nil, nil, nil); err != nil {
			break
		}
	}
	return m.c.finishBatch(c, err)
}
