package channel

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/kerrno"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/seam"
	"github.com/mlx5kit/mlx5kit/internal/transport/newqp"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// link is everything that reaches one peer.
type link struct {
	qp     *rc.QP                        // RC: the connected queue pair
	remote *dc.Remote                    // DC: the peer's DCT, reached from the DCI
	dct    *dc.DCT                       // DC: the target this peer sends to
	srq    *transport.SharedReceiveQueue // DC: the receives of dct
	ep     endpoint.Endpoint             // the peer's endpoint (after the handshake)
}

// Slot states.
const (
	slotFree uint8 = iota
	slotPosted
	slotDone
	slotFailed
)

// slot is the completion record of one work request. Its index is in the
// low bits of the work request id, a sequence number in the high bits, so
// a record reused for a later request is told apart.
type slot struct {
	wrid       uint64
	byteCount  uint32
	imm        uint32
	qpn        uint32
	scope      uint32 // the scope it was posted in (0: none)
	batch      uint32 // the blocking call it was posted by (0: none)
	item       int32  // its index in that call's requests
	peer       uint16
	wqeCounter uint16
	op         Op
	state      uint8
	withImm    bool
	syndrome   prm.Syndrome
	vendor     uint8
	cqeOp      prm.CQEOpcode
	sendOp     prm.Opcode
}

// core is the engine shared by Channel and MultiChannel over RC and DC:
// posting with a work request id that names a completion record, polling
// the one CQ every queue of the channel completes on, and waiting.
type core struct {
	transport endpoint.Transport
	links     []link
	dci       *dc.DCI
	poller    *transport.Poller
	notifier  *completion.Notifier
	slots     []slot
	mask      uint64   // len(slots) - 1
	shift     uint     // log2(len(slots)): the index bits of a work request id (shifts use shift&63: no guard)
	free      []uint32 // FIFO of free slot indexes: the least recently completed first
	freeHead  uint64
	freeTail  uint64
	seq       uint64 // sequence number of the next work request
	pending   int    // work requests posted and not completed
	// cqRoom is the CQEs the completion queue holds, less one: pending
	// never exceeds it. sendRoom and recvRoom bound the sends (and
	// writes, reads, atomics) and the receives outstanding: each leaves
	// the other class the work its depths allow, so that receives
	// waiting for a peer never keep a send from being posted, nor sends
	// a receive. pendingRecv counts the receives of pending.
	cqRoom, sendRoom, recvRoom int
	pendingRecv                int

	scope      *Scope // the active scope, nil outside one
	scopeState *Scope // reused by every scope
	scopeID    uint32
	batch      batch // the blocking call in progress (id 0: none)
	batchID    uint32

	timeout time.Duration
	stray   error // the first completion that matched no work request
	failed  bool  // Fail moved the queues to error: no more posts
	// dciFailed: a send of a DC channel completed in error before the
	// channel failed, so its DCI, every peer's, is in the error state
	// (poll then fails the channel).
	dciFailed bool
	// atomics: the device reports atomics (ctx.DeviceAttr.AtomicHCA);
	// without, compare-and-swap and fetch-and-add are refused at post.
	atomics bool

	ctx    *ctx.Context
	pd     *ctx.ProtectionDomain
	cq     *ctx.CompletionQueue
	srqs   []*transport.SharedReceiveQueue
	closed bool
	// under is set, on whichever goroutine closes it, when a queue pair
	// of the channel closes, directly or with a parent (its CQ, PD or
	// Context), which ctx allows from any goroutine while the owner
	// waits: the work outstanding on it will never complete. The owner
	// then closes the channel where a wait finds nothing to poll (see
	// shut); closedUnder records that it did.
	under       atomic.Bool
	closedUnder bool

	// opts (defaults filled) and regions, the regions shared in the
	// handshake, build the channel again (Reestablish); watch is its
	// subscription to async events (Options.OnEvent; nil without).
	opts    Options
	regions []endpoint.RemoteRegion
	watch   *eventWatch
	// port is the local port the queues send from: Handshake asks it
	// whether each peer's endpoint has an address it can use.
	port newqp.Port
}

// peerLink returns the link of peer or nil.
func (c *core) peerLink(peer int) *link {
	if uint(peer) >= uint(len(c.links)) {
		return nil
	}
	return &c.links[peer]
}

// postLink is peerLink for a request: nil also when the channel is closed
// or failed (badPeer says which).
func (c *core) postLink(peer int) *link {
	if c.closed || c.failed {
		return nil
	}
	return c.peerLink(peer)
}

// badPeer is the error of a request postLink found no link for.
func (c *core) badPeer(peer int, op Op) error {
	if c.closed {
		return &PeerError{Peer: peer, Op: op, Err: closedError{under: c.closedUnder}}
	}
	if c.failed {
		return &PeerError{Peer: peer, Op: op, Err: ErrFailed}
	}
	return &PeerError{Peer: peer, Op: op, Err: fmt.Errorf("%w (the channel has %d)", ErrPeer, len(c.links))}
}

// closedError is the cause of a request on a closed channel: it reads
// "channel closed" and wraps ctx.ErrClosed, the error its closed queues
// would give too. under says that the channel closed because its queues
// were closed under it (see shut).
type closedError struct{ under bool }

func (e closedError) Error() string {
	if e.under {
		return "channel closed: its queue pairs were closed under it (directly, or with their CQ, PD or Context)"
	}
	return "channel closed"
}

func (closedError) Unwrap() error { return ctx.ErrClosed }

// watchClose makes the close of qp, on any goroutine, set c.under.
func (c *core) watchClose(qp *ctx.QueuePair) {
	seam.OnClose(qp, func() { c.under.Store(true) })
}

// shut reports whether the channel is closed. When its queue pairs were
// closed under it (c.under) it closes the rest of it first, on the
// owner's goroutine: the work outstanding on a closed queue pair never
// completes, so a wait for it would never end. It is called only where a
// wait found nothing to poll, and by Pending.Poll for a request not done.
//
// It is small enough to inline into the wait loops: the close is
// shutUnder's.
func (c *core) shut() bool {
	if c.under.Load() && !c.closed {
		c.shutUnder()
	}
	return c.closed
}

// shutUnder closes what is left of a channel whose queue pairs were
// closed under it: the other queues, the CQ, the Notifier. It stays out
// of line, so that shut inlines.
//
//go:noinline
func (c *core) shutUnder() {
	_ = c.close()
	c.closedUnder = true
}

// initSlots sizes the completion records for outstanding work requests
// in flight at most: room for all of them plus at least 256 completed ones
// (more when the power-of-two size leaves room), kept readable for their
// Pending until they are reused, oldest first.
func (c *core) initSlots(outstanding uint64) {
	n := uint64(1) << bits.Len64(outstanding+256-1)
	c.slots, c.mask, c.shift = make([]slot, n), n-1, uint(bits.TrailingZeros64(n))
	c.free = make([]uint32, n)
	for i := range c.free {
		c.free[i] = uint32(i)
	}
	c.freeTail = n
	c.seq = 1
}

// nextWRID returns the work request id the next post gets (record takes
// it once the post succeeded).
func (c *core) nextWRID() uint64 {
	return c.seq<<(c.shift&63) | uint64(c.free[c.freeHead&c.mask])
}

// slotOf returns the record of wrid, or nil when it has been reused or
// names no request (0: the Pending of a refused post).
func (c *core) slotOf(wrid uint64) *slot {
	if c == nil || wrid == 0 {
		return nil
	}
	s := &c.slots[wrid&c.mask]
	if s.wrid != wrid {
		return nil
	}
	return s
}

// begin starts a send WQE to peer with the next work request id.
func (c *core) begin(l *link) (wqebuilder.OpStage, error) {
	if c.pending >= c.cqRoom || c.pending-c.pendingRecv >= c.sendRoom {
		return noSendRoom()
	}
	if c.transport == endpoint.TransportDC {
		return c.dci.Post(c.nextWRID(), wqebuilder.Signaled, l.remote)
	}
	return l.qp.Post(c.nextWRID(), wqebuilder.Signaled)
}

// record fills the record of the work request just posted and takes its
// id.
func (c *core) record(peer int, op Op) uint64 {
	wrid := c.nextWRID()
	c.freeHead++
	c.seq++
	s := &c.slots[wrid&c.mask]
	*s = slot{wrid: wrid, peer: uint16(peer), op: op, state: slotPosted}
	if c.scope != nil {
		s.scope = c.scopeID
		c.scope.outstanding++
	}
	if c.batch.id != 0 {
		s.batch, s.item = c.batch.id, c.batch.item
		c.batch.outstanding++
	}
	c.pending++
	if op == OpRecv {
		c.pendingRecv++
	}
	return wrid
}

// release returns a completed record to the free list, behind every other.
func (c *core) release(s *slot) {
	c.free[c.freeTail&c.mask] = uint32(s.wrid & c.mask)
	c.freeTail++
}

// The post functions return the transport's own error (built once per
// queue, so a refused post allocates nothing); callers wrap it in a
// PeerError when they hand it to the user.

// errCQFullSend and errCQFullRecv refuse a post while the work requests
// outstanding fill the completion queue, or their class's share of it
// (core.cqRoom, sendRoom, recvRoom): one more could overrun it. They wrap
// the queue-full errors, so that a blocking post polls for room as it
// does for a full queue.
var (
	errCQFullSend = fmt.Errorf("completion queue room taken by the outstanding work requests: %w", wqebuilder.ErrQueueFull)
	errCQFullRecv = fmt.Errorf("completion queue room taken by the outstanding work requests: %w", transport.ErrReceiveQueueFull)
)

// full reports whether err says a queue had no room: the caller may poll
// and try again.
func full(err error) bool {
	return errors.Is(err, wqebuilder.ErrQueueFull) || errors.Is(err, transport.ErrReceiveQueueFull)
}

// noSendRoom is begin's refusal while the sends' share of the completion
// queue is taken, out of line: a zero stage returned in begin's body cost
// a post about 8 ns.
//
//go:noinline
func noSendRoom() (wqebuilder.OpStage, error) { return wqebuilder.OpStage{}, errCQFullSend }

// beginPeer starts a send WQE to peer, or names the bad peer.
func (c *core) beginPeer(peer int, op Op) (wqebuilder.OpStage, error) {
	l := c.postLink(peer)
	if l == nil {
		return wqebuilder.OpStage{}, c.badPeer(peer, op)
	}
	return c.begin(l)
}

// gather adds the request's local buffers as data segments.
func gather(ds wqebuilder.DataStage, local []SGE) wqebuilder.DataStage {
	for i := range local {
		g := &local[i]
		ds = ds.SGE(g.Addr, g.Length, g.LKey)
	}
	return ds
}

func (c *core) postSend(r *SendRequest) (uint64, error) {
	st, err := c.beginPeer(r.Peer, OpSend)
	if err != nil {
		return 0, err
	}
	var ds wqebuilder.DataStage
	if r.WithImmediate {
		ds = st.SendImm(r.Immediate)
	} else {
		ds = st.Send()
	}
	if err := gather(ds, r.Local).FinishBlueFlame(); err != nil {
		return 0, err
	}
	return c.record(r.Peer, OpSend), nil
}

func (c *core) postWrite(r *WriteRequest) (uint64, error) {
	st, err := c.beginPeer(r.Peer, OpWrite)
	if err != nil {
		return 0, err
	}
	var ds wqebuilder.DataStage
	if r.WithImmediate {
		ds = st.RdmaWriteImm(r.Remote.Addr, r.Remote.RKey, r.Immediate)
	} else {
		ds = st.RdmaWrite(r.Remote.Addr, r.Remote.RKey)
	}
	if err := gather(ds, r.Local).FinishBlueFlame(); err != nil {
		return 0, err
	}
	return c.record(r.Peer, OpWrite), nil
}

func (c *core) postRead(r *ReadRequest) (uint64, error) {
	st, err := c.beginPeer(r.Peer, OpRead)
	if err != nil {
		return 0, err
	}
	ss := st.RdmaRead(r.Remote.Addr, r.Remote.RKey)
	for i := range r.Local {
		g := &r.Local[i]
		ss = ss.SGE(g.Addr, g.Length, g.LKey)
	}
	if err := ss.FinishBlueFlame(); err != nil {
		return 0, err
	}
	return c.record(r.Peer, OpRead), nil
}

// atomicResult checks the local buffer of an atomic: exactly the 8 bytes
// the device writes the old value to.
func atomicResult(g *SGE) error {
	if g.Length != 8 {
		return errAtomicResult
	}
	return nil
}

// errAtomicResult is built once: a refused post allocates nothing.
var errAtomicResult = fmt.Errorf("atomic result buffer must be 8 bytes: %w", ctx.ErrInvalidArgument)

// errNoAtomics refuses an atomic on a device that reports none
// (ctx.DeviceAttr.AtomicHCA false), as libmlx5 refuses it at post with
// EOPNOTSUPP (qp->atomics_enabled): the device would complete it in error.
// Built once, like errAtomicResult.
var errNoAtomics = fmt.Errorf("atomic operations: the device reports none (ctx.DeviceAttr.AtomicHCA): %w",
	kerrno.New("", "", unix.EOPNOTSUPP, ctx.ErrNotSupported))

func (c *core) postCompareSwap(r *CompareSwapRequest) (uint64, error) {
	l := c.postLink(r.Peer)
	if l == nil {
		return 0, c.badPeer(r.Peer, OpCompareSwap)
	}
	if !c.atomics {
		return 0, errNoAtomics
	}
	if err := atomicResult(&r.Result); err != nil {
		return 0, err
	}
	st, err := c.begin(l)
	if err != nil {
		return 0, err
	}
	if err := st.AtomicCS(r.Remote.Addr, r.Remote.RKey, r.Compare, r.Swap).Result(r.Result.Addr, r.Result.LKey).FinishBlueFlame(); err != nil {
		return 0, err
	}
	return c.record(r.Peer, OpCompareSwap), nil
}

func (c *core) postFetchAdd(r *FetchAddRequest) (uint64, error) {
	l := c.postLink(r.Peer)
	if l == nil {
		return 0, c.badPeer(r.Peer, OpFetchAdd)
	}
	if !c.atomics {
		return 0, errNoAtomics
	}
	if err := atomicResult(&r.Result); err != nil {
		return 0, err
	}
	st, err := c.begin(l)
	if err != nil {
		return 0, err
	}
	if err := st.AtomicFA(r.Remote.Addr, r.Remote.RKey, r.Add).Result(r.Result.Addr, r.Result.LKey).FinishBlueFlame(); err != nil {
		return 0, err
	}
	return c.record(r.Peer, OpFetchAdd), nil
}

func (c *core) postRecv(r *RecvRequest) (uint64, error) {
	l := c.postLink(r.Peer)
	if l == nil {
		return 0, c.badPeer(r.Peer, OpRecv)
	}
	if c.pending >= c.cqRoom || c.pendingRecv >= c.recvRoom {
		return 0, errCQFullRecv
	}
	var st transport.RecvStage
	if c.transport == endpoint.TransportDC {
		st = l.srq.BeginRecv(c.nextWRID())
	} else {
		st = l.qp.BeginRecv(c.nextWRID())
	}
	for i := range r.Local {
		g := &r.Local[i]
		st = st.SGE(g.Addr, g.Length, g.LKey)
	}
	if err := st.FinishDoorbell(); err != nil {
		return 0, err
	}
	return c.record(r.Peer, OpRecv), nil
}

// poll processes up to one batch of completions and returns how many it
// found. It allocates only for a failed completion inside a scope.
func (c *core) poll() int {
	return c.poller.Poll(64, func(wc *transport.Completion) {
		c.complete(wc)
	})
}

// eventMayExplain reports whether an asynchronous event may be why work
// failed: while the channel has not failed, or when it failed because its
// DCI did (failDCI), which an event (a fatal error of the DCI) may have
// caused.
func (c *core) eventMayExplain() bool { return !c.failed || c.dciFailed }

// dciFailedNow reports whether the DCI has failed and the channel not yet
// (failDCI is due). The waits look at it after a poll that found
// completions (waiter.progress), not after every poll: the error arrives
// with a completion.
func (c *core) dciFailedNow() bool { return c.dciFailed && !c.failed }

// failDCI fails a DC channel whose DCI is in the error state. An RC queue
// pair's error flushes its receives; a DC channel's receives sit in shared
// receive queues, which no error state flushes, and would wait for good
// for a peer that may be gone. The DCI carries every peer's sends, so its
// error ends the channel as an error of every RC queue pair would (see
// fail): the receives complete flushed, and later posts fail. An error of
// fail itself is kept for Err.
func (c *core) failDCI() {
	// The events the device holds are read first: with DC receives
	// outstanding, fail destroys the queues, which ends the channel's
	// subscription, and an event that caused the DCI's error (QP_FATAL)
	// would no longer reach it to explain the failure (heldEventErr).
	_ = c.heldEventErr()
	if err := c.fail(); err != nil && c.stray == nil {
		c.stray = fmt.Errorf("channel: fail after the DC initiator's error: %w", err)
	}
}

// complete files one completion in its record.
func (c *core) complete(wc *transport.Completion) {
	s := &c.slots[wc.WRID&c.mask]
	if (wc.Match != transport.MatchOK && wc.Match != transport.MatchError) || s.wrid != wc.WRID || s.state != slotPosted {
		c.strayCompletion(wc)
		return
	}
	s.state = slotDone
	s.byteCount = wc.ByteCount
	if wc.Opcode == prm.CQERespSendImm || wc.Opcode == prm.CQERespWrImm {
		s.imm, s.withImm = wc.Immediate, true
	}
	if wc.Opcode == prm.CQEReqErr || wc.Opcode == prm.CQERespErr {
		s.state = slotFailed
		s.syndrome, s.vendor = wc.Syndrome, wc.VendorSyndrome
		s.cqeOp, s.sendOp = wc.Opcode, wc.SendOpcode
		s.qpn, s.wqeCounter = wc.QPN, wc.WQECounter
		if wc.Opcode == prm.CQEReqErr && c.dci != nil && !c.failed {
			// (Not a flush of a channel failed already: that failure
			// is not the DCI's.)
			c.dciFailed = true
		}
	}
	c.filed(s)
}

// filed does the bookkeeping of a record that has just completed.
func (c *core) filed(s *slot) {
	c.pending--
	if s.op == OpRecv {
		c.pendingRecv--
	}
	c.release(s)
	// A request of the blocking call in progress is reported by that
	// call, also inside a scope: the scope counts it, and reports its
	// error only when the call returned first (ErrTimeout).
	inBatch := c.batch.id != 0 && s.batch == c.batch.id
	if c.scope != nil && s.scope == c.scopeID {
		c.scope.outstanding--
		if s.state == slotFailed && !inBatch {
			c.scope.errs = append(c.scope.errs, s.err())
		}
	}
	if inBatch {
		c.batch.complete(s)
	}
}

func (c *core) strayCompletion(wc *transport.Completion) {
	if c.stray != nil {
		return
	}
	if wc.Match == transport.MatchOK || wc.Match == transport.MatchError {
		// Matched by the queue pair, but not posted by the channel (work
		// posted on the QP directly).
		c.stray = fmt.Errorf("channel: completion %v on QP %#x (wr_id %d) matches no work request of the channel: %w",
			wc.Opcode, wc.QPN, wc.WRID, transport.ErrUnmatched)
		return
	}
	c.stray = fmt.Errorf("channel: %w", wc.Err())
}

// err builds the error of a failed record.
func (s *slot) err() error {
	e := &monocq.CompletionError{
		Status:         monocq.StatusOf(s.syndrome),
		Syndrome:       s.syndrome,
		VendorSyndrome: s.vendor,
		CQEOpcode:      s.cqeOp,
		QPN:            s.qpn,
		WQECounter:     s.wqeCounter,
		WRID:           s.wrid,
		HasWRID:        true,
	}
	if s.cqeOp == prm.CQEReqErr {
		e.Opcode = s.sendOp
	}
	return &PeerError{Peer: int(s.peer), Op: s.op, Err: e}
}

// result returns the result of a completed record.
func (s *slot) result() Result {
	r := Result{Peer: int(s.peer), Op: s.op, ByteCount: s.byteCount, Immediate: s.imm, WithImmediate: s.withImm}
	if s.state == slotFailed {
		r.Err = s.err()
	}
	return r
}

// waiter paces a wait: it spins on the CQ, then yields the processor, then
// (with a notifier) sleeps until a completion event; it reports a timeout,
// and the end of the caller's context. The context is looked at through
// its Done channel only: nil for context.Background (nothing to check), and
// a non-blocking receive otherwise, on every empty poll and every
// checkBusy polls that found work; neither allocates.
type waiter struct {
	c         *core
	cx        context.Context
	done      <-chan struct{}
	idle      int
	busy      int
	start     time.Time
	sleeping  bool
	cancelled bool // the wait ended because cx did
}

// newWaiter returns a waiter for a wait bounded by cx.
func newWaiter(c *core, cx context.Context) waiter {
	return waiter{c: c, cx: cx, done: cx.Done()}
}

// checkBusy is how many polls that found completions may pass between two
// looks at the context.
const checkBusy = 64

// ended returns the context's error once it is done (nil before), or the
// error of an async event that ends the channel (Options.OnEvent).
func (w *waiter) ended() error {
	if w.c.watch != nil {
		if err := w.c.eventErr(); err != nil {
			w.cancelled = true
			return err
		}
	}
	if w.done == nil {
		return nil
	}
	select {
	case <-w.done:
		w.cancelled = true
		return contextError(w.cx)
	default:
		return nil
	}
}

// contextError returns the error of cx, which has ended, and with it its
// cause where one was given (context.WithCancelCause; endpoint.WatchConn's
// endpoint.ErrPeerGone): errors.Is matches both.
func contextError(cx context.Context) error {
	err := cx.Err()
	if cause := context.Cause(cx); cause != nil && cause != err {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

const (
	spinPolls  = 64   // empty polls before yielding the processor
	checkEvery = 1024 // empty polls between clock reads
	sleepAfter = 4096 // empty polls before sleeping on the completion channel
	// sleepAfterTime bounds the spin by time as well: on a loaded machine
	// (or under the race detector) 4096 yields can take far longer.
	sleepAfterTime = time.Millisecond
	eventTimeout   = 10 * time.Millisecond
)

// idlePoll is called after a poll found nothing; it returns ErrTimeout
// once no completion has arrived for the channel's timeout.
func (w *waiter) idlePoll() error {
	if w.c.shut() {
		// Closed under the wait (as by a scope's function, or its queues
		// by another goroutine): the CQ will never deliver what is
		// outstanding.
		return closedError{under: w.c.closedUnder}
	}
	if err := w.ended(); err != nil {
		return err
	}
	if err := w.c.poller.CQ().Err(); err != nil {
		// The ring is in error (overrun, corrupt): it delivers nothing
		// more. The wait ends as a cancelled one: the channel fails
		// (cancel, failOnEvent).
		w.cancelled = true
		return &cqError{err: err}
	}
	w.idle++
	if w.idle < spinPolls {
		return nil
	}
	c := w.c
	if w.idle == spinPolls {
		w.start = time.Now()
	}
	// Once the spin is over the wait sleeps on every empty poll: a spin
	// between sleeps would find a late completion first and leave its
	// event unread.
	if !w.sleeping && c.notifier != nil && (w.idle >= sleepAfter ||
		w.idle%spinPolls == 0 && time.Since(w.start) > sleepAfterTime) {
		w.sleeping = true
	}
	sleep := w.sleeping
	if c.timeout > 0 && (sleep || w.idle%checkEvery == 0) {
		if time.Since(w.start) > c.timeout {
			return fmt.Errorf("channel: no completion for %v, %d work requests outstanding: %w", c.timeout, c.pending, ErrTimeout)
		}
	}
	if sleep {
		d := eventTimeout
		if c.timeout > 0 {
			d = min(d, c.timeout-time.Since(w.start)+time.Millisecond)
		}
		var err error
		if w.done != nil {
			// The sleep ends with the caller's context too.
			sc, cancel := context.WithTimeout(w.cx, d)
			err = c.notifier.Wait(sc)
			cancel()
			if cerr := w.ended(); cerr != nil {
				return cerr
			}
		} else {
			err = c.notifier.WaitTimeout(d)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			if c.shut() {
				// Woken by the close of the CQ under the channel (with
				// its Context): end as a polling wait does.
				return closedError{under: c.closedUnder}
			}
			return fmt.Errorf("channel: wait for a completion event: %w", err)
		}
		return nil
	}
	c.pause()
	return nil
}

// pause gives the processor away after an empty poll: on the software HCA
// the polling goroutine runs a round of the model itself (Context.Idle);
// on the emulated device it runs one and yields; on a NIC it yields.
func (c *core) pause() {
	c.ctx.Idle()
	if c.ctx.Kind() != ctx.KindSoftware {
		// On a NIC Idle returns at once; on the emulated device it ran
		// a round unless the model's lock was busy.
		runtime.Gosched()
	}
}

// progress is called after a poll found completions; it returns the
// context's error once it is done (looked at every checkBusy calls).
func (w *waiter) progress() error {
	w.idle, w.sleeping = 0, false
	if w.c.dciFailedNow() {
		w.c.failDCI()
	}
	if w.done == nil {
		return nil
	}
	w.busy++
	if w.busy%checkBusy != 0 {
		return nil
	}
	return w.ended()
}

// wait waits until the work request wrid has completed and returns its
// record (nil with ErrStale when the record was reused). When cx ends
// first it returns cx's error and the request stays outstanding.
func (c *core) wait(cx context.Context, wrid uint64) (*slot, error) {
	w := newWaiter(c, cx)
	for {
		s := c.slotOf(wrid)
		if s == nil {
			return nil, ErrStale
		}
		if s.state == slotDone || s.state == slotFailed {
			return s, nil
		}
		if c.poll() > 0 {
			if err := w.progress(); err != nil {
				return nil, c.failOnEvent("wait", err)
			}
			continue
		}
		if c.shut() {
			return nil, closedError{under: c.closedUnder}
		}
		if err := w.idlePoll(); err != nil {
			return nil, c.failOnEvent("wait", err)
		}
	}
}

// batch is the bookkeeping of one blocking call: its name, how many of its
// requests are outstanding, the errors of those that failed, and where to
// put each request's result.
type batch struct {
	id          uint32
	item        int32 // index of the request being posted
	outstanding int
	op          string // the call, for errors: "send", "gather receive", …
	errs        []error
	results     []Result
}

func (b *batch) complete(s *slot) {
	b.outstanding--
	var r Result
	if b.results != nil || s.state == slotFailed {
		r = s.result()
	}
	if s.state == slotFailed {
		b.errs = append(b.errs, r.Err)
	}
	if b.results != nil && int(s.item) < len(b.results) {
		b.results[s.item] = r
	}
}

// ended returns the error of a call whose context cx has ended before it
// posted anything (nil while cx is live): the call then posts nothing.
func ended(cx context.Context, op string) error {
	if cx.Done() == nil {
		return nil
	}
	if cx.Err() != nil {
		return fmt.Errorf("channel: %s: %w (nothing posted)", op, contextError(cx))
	}
	return nil
}

// startBatch begins the blocking call op whose results (when not nil)
// receive each request's outcome by index.
func (c *core) startBatch(op string, results []Result) *batch {
	c.batchID++
	if c.batchID == 0 {
		c.batchID = 1
	}
	b := &c.batch
	b.id, b.item, b.outstanding, b.op, b.errs, b.results = c.batchID, 0, 0, op, b.errs[:0], results
	return b
}

// finishBatch waits until every request of the blocking call completed and
// returns the post error, the errors of failed requests and the wait
// error, joined. When cx ends first, the channel fails (see cancel) and
// the error wraps cx's.
func (c *core) finishBatch(cx context.Context, perr error) error {
	b := &c.batch
	w := newWaiter(c, cx)
	var werr error
	for b.outstanding > 0 {
		if c.poll() > 0 {
			if werr = w.progress(); werr != nil {
				break
			}
			continue
		}
		if werr = w.idlePoll(); werr != nil {
			break
		}
	}
	if w.cancelled {
		werr = c.cancel(b.op, werr)
	} else if len(b.errs) > 0 && c.eventMayExplain() {
		// Work failed: an event that ends the channel may be why.
		if eerr := c.heldEventErr(); eerr != nil {
			werr = c.cancel(b.op, eerr)
		}
	}
	b.id, b.results = 0, nil
	if perr == nil && werr == nil && len(b.errs) == 0 {
		return nil
	}
	all := make([]error, 0, len(b.errs)+2)
	all = append(all, perr)
	all = append(all, b.errs...)
	all = append(all, werr)
	clear(b.errs)
	return errors.Join(all...)
}

// cancel ends a wait that cx cut short (cause is cx's error): the device
// may still write into the buffers of the outstanding work requests (a
// receive, an RDMA READ, an atomic's result) until each has completed, so
// the channel fails (see fail) before the call returns, and no buffer of
// the call is written after. The error names op and wraps cause and
// ErrFailed. The flushes the failure causes are left out of the errors of
// the blocking call and of the scope in progress (see dropFlushes): they
// report the failure itself.
func (c *core) cancel(op string, cause error) error {
	keptBatch, keptScope := len(c.batch.errs), 0
	if c.scope != nil {
		keptScope = len(c.scope.errs)
	}
	ferr := c.fail()
	c.batch.errs = dropFlushes(c.batch.errs, keptBatch)
	if c.scope != nil {
		c.scope.errs = dropFlushes(c.scope.errs, keptScope)
	}
	if ferr != nil {
		return fmt.Errorf("channel: %s: %w (%w: %w)", op, cause, ErrFailed, ferr)
	}
	return fmt.Errorf("channel: %s: %w (the outstanding work requests were flushed: %w)", op, cause, ErrFailed)
}

// dropFlushes removes from errs[kept:], the errors of the requests that
// completed while the channel failed, the flushes the failure caused
// (monocq.ErrFlushed), and returns what is left: a request that failed
// for its own reason meanwhile (its error CQE arriving while fail polled)
// keeps its error.
func dropFlushes(errs []error, kept int) []error {
	n := kept
	for _, err := range errs[kept:] {
		if !errors.Is(err, monocq.ErrFlushed) {
			errs[n] = err
			n++
		}
	}
	clear(errs[n:])
	return errs[:n]
}

// flushLimit bounds how long fail polls for the flush completions; queues
// still holding work after it are destroyed.
const flushLimit = 2 * time.Second

// fail moves every queue of the channel to the error state, so the device
// flushes each outstanding work request with a completion
// (WR_FLUSH_ERR), and polls until all of them have arrived. A DC channel's
// receives sit in shared receive queues, which an error state does not
// flush: when any is outstanding (or a flush has not arrived within
// flushLimit) fail destroys the channel's queues, which ends the device's
// access to their buffers just the same. Either way no buffer of a work
// request outstanding before is written after fail returns; the channel
// refuses new work with ErrFailed (ctx.ErrClosed once destroyed). Calling it
// again only polls what is left. A queue pair closed under the channel
// (see shut) flushes nothing: fail then closes the rest of the channel at
// once rather than wait flushLimit for flushes that never come.
func (c *core) fail() error {
	if c.shut() {
		return nil
	}
	var errs []error
	if !c.failed {
		c.failed = true
		if c.dci != nil {
			errs = append(errs, c.dci.Fail())
		}
		for i := range c.links {
			if q := c.links[i].qp; q != nil {
				errs = append(errs, q.Fail())
			}
		}
	}
	deadline := time.Now().Add(flushLimit)
	for c.pending > c.unflushable() {
		if c.poll() > 0 {
			continue
		}
		if time.Now().After(deadline) || c.poller.CQ().Err() != nil || c.under.Load() {
			// (A CQ in error delivers no flush, nor does a queue pair
			// closed under the channel: no wait for one.)
			break
		}
		c.pause()
	}
	if c.pending > 0 {
		if c.under.Load() {
			c.closedUnder = true
		}
		errs = append(errs, c.close())
		// The queues are gone, and their work with them: record what was
		// still outstanding as flushed, as the device would have.
		for i := range c.slots {
			if s := &c.slots[i]; s.state == slotPosted {
				s.state, s.syndrome, s.cqeOp = slotFailed, prm.SyndromeWRFlush, prm.CQEReqErr
				s.sendOp, s.qpn = sendOpcodes[s.op], c.queueNumber(s)
				if s.op == OpRecv {
					s.cqeOp = prm.CQERespErr
				}
				c.filed(s)
			}
		}
	}
	return errors.Join(errs...)
}

// sendOpcodes are the WQE opcodes of the kinds of send work request
// (without immediate data), which fail names in the flushes it records.
var sendOpcodes = [...]prm.Opcode{OpSend: prm.OpSend, OpWrite: prm.OpRdmaWrite, OpRead: prm.OpRdmaRead,
	OpCompareSwap: prm.OpAtomicCS, OpFetchAdd: prm.OpAtomicFA}

// queueNumber returns the number of the queue the request of record s
// was posted on: its peer's RC queue pair, or the DC initiator (sends) or
// the peer's DC target (receives).
func (c *core) queueNumber(s *slot) uint32 {
	l := c.peerLink(int(s.peer))
	switch {
	case l == nil:
		return 0
	case l.qp != nil:
		return l.qp.QPN()
	case s.op == OpRecv && l.dct != nil:
		return l.dct.QPN()
	case s.op != OpRecv && c.dci != nil:
		return c.dci.QPN()
	}
	return 0
}

// unflushable counts the outstanding work requests an error state does not
// flush: the receives of a DC channel (in its shared receive queues).
func (c *core) unflushable() int {
	if c.transport != endpoint.TransportDC {
		return 0
	}
	n := 0
	for i := range c.slots {
		if s := &c.slots[i]; s.state == slotPosted && s.op == OpRecv {
			n++
		}
	}
	return n
}

// makeRoom is called after a post found its queue full: it polls, and
// paces the retries with w. It returns an error at the timeout or when
// w's context ends.
func (c *core) makeRoom(w *waiter) error {
	if c.poll() > 0 {
		return w.progress()
	}
	return w.idlePoll()
}

// roomFailed returns the error of a post whose wait for room in its full
// queue (refusal, the queue's) ended with werr. When werr ends the
// channel (failOnEvent), the flushes of the blocking call's or the
// scope's earlier requests that the failure caused are dropped from their
// errors (see cancel), as they are when the wait for completions ends the
// channel.
func (c *core) roomFailed(op Op, refusal, werr error) error {
	return c.failOnEvent(op.String(), errors.Join(refusal, werr))
}

// post posts one request of any kind, polling for room while its queue is
// full (until cx ends). It returns the error of any other failure wrapped
// in a PeerError.
func (c *core) post(cx context.Context, op Op, peer int, send *SendRequest, recv *RecvRequest, write *WriteRequest, read *ReadRequest) (uint64, error) {
	var w waiter
	for {
		var seq uint64
		var err error
		switch op {
		case OpSend:
			seq, err = c.postSend(send)
		case OpRecv:
			seq, err = c.postRecv(recv)
		case OpWrite:
			seq, err = c.postWrite(write)
		default:
			seq, err = c.postRead(read)
		}
		if err == nil {
			return seq, nil
		}
		if !full(err) {
			return 0, wrap(peer, op, err)
		}
		if w.c == nil {
			w = newWaiter(c, cx)
		}
		if werr := c.makeRoom(&w); werr != nil {
			return 0, wrap(peer, op, c.roomFailed(op, err, werr))
		}
	}
}

// postAtomic posts one compare-and-swap (cas) or fetch-and-add (faa),
// polling for room while the send queue is full, like post.
func (c *core) postAtomic(cx context.Context, peer int, cas *CompareSwapRequest, faa *FetchAddRequest) (uint64, error) {
	op := OpFetchAdd
	if cas != nil {
		op = OpCompareSwap
	}
	var w waiter
	for {
		var seq uint64
		var err error
		if cas != nil {
			seq, err = c.postCompareSwap(cas)
		} else {
			seq, err = c.postFetchAdd(faa)
		}
		if err == nil {
			return seq, nil
		}
		if !full(err) {
			return 0, wrap(peer, op, err)
		}
		if w.c == nil {
			w = newWaiter(c, cx)
		}
		if werr := c.makeRoom(&w); werr != nil {
			return 0, wrap(peer, op, c.roomFailed(op, err, werr))
		}
	}
}

// wrap puts a post error in a PeerError unless it is one already.
func wrap(peer int, op Op, err error) error {
	if _, ok := err.(*PeerError); ok {
		return err
	}
	return &PeerError{Peer: peer, Op: op, Err: err}
}
