package transport

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/names"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/seam"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
	"github.com/mlx5kit/mlx5kit/internal/transport/qpcore"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// State is the data plane's view of a queue pair.
type State uint32

// States. Only StateReady accepts sends; StateInit and StateReady accept
// receives.
const (
	// StateInit: created, not yet able to send (an RC QP before Connect).
	StateInit State = iota
	// StateReady: in RTS (a DCT: in RTR, receiving).
	StateReady
	// StateError: an error completion was polled or the QP was moved to
	// error; outstanding work requests complete with WR_FLUSH_ERR.
	StateError
	// StateClosed: the QP has been destroyed.
	StateClosed
)

var stateNames = [...]string{"INIT", "READY", "ERROR", "CLOSED"}

// String returns the state's name.
func (s State) String() string { return names.Of(s, stateNames[:], "State") }

// Queue is the data-plane side of one queue pair shared by every
// transport: its send queue (a wqebuilder.SendQueue), its receive queue or
// SRQ, its state, and the completion handling that turns a CQE into a
// Completion and retires the work requests it names. Packages rc, dc and ud
// embed a Queue in their QP types and name it Queue, so one
// monocq.Table[Queue] (or one Poller) serves queue pairs of every transport
// on a CQ.
//
// A Queue is used by one goroutine at a time, its owner: posting, polling
// its CQs and Reset must not run concurrently. Closing is the exception:
// the transport's Close and the ctx objects under it (the QP through
// Handle, its CQs, SRQ, PD, the Context) may be closed from any goroutine,
// also while the owner posts, polls or resets the queue pair. A post then fails with ctx.ErrClosed,
// at Begin or at Finish, neither touches memory that was freed, and the
// Pollers the queue was added to drop it on the owner's goroutine (see
// closer and Poller). Nothing the close writes is read by a post or a
// poll without synchronization: the close sets atomic flags (the QP's
// closed flag, the rings', the Pollers') and leaves the Queue's own
// fields alone; State derives StateClosed from the QP's flag.
type Queue struct {
	// Hot fields first. The first four are laid out as qpcore.Send, which
	// is how package newqp reads them (see the checks below).
	sq    *wqebuilder.SendQueue // nil for a DCT
	state State
	qpn   uint32
	qp    *ctx.QueuePair
	rq    *recvRing // the QP's own receive queue, or an empty one that is always full
	srq   *SharedReceiveQueue
	recv  *recvRing // the ring receive completions go back to: rq, srq's, or nil

	typ       ctx.QPType
	transport string
	dead      *wqebuilder.SendQueue // always full: hands out harmless stages after a refusal
	refusal   error                 // the error of the last refused send post, which dead's Finish returns

	errSend [StateClosed + 1]error // post send refused in each state
	errRecv [StateClosed + 1]error // post receive refused in each state
	errNoRQ error

	unmatched uint64
	// counts is set by EnableCounters; Setup keeps it across a Reset.
	counts *queueCounts
	// closer closes the send queue and receive ring when the QP closes
	// and flags the Pollers the queue was added to; Setup keeps it
	// (and with it that list) across a Reset.
	closer *closer
}

// A *Queue is a *qpcore.Send: its first fields have the types (assigned
// below) and the offsets of qpcore.Send's, and the state values are
// qpcore's. The compiler refuses an index other than 0 into a one-element
// array, so a field moved or a value changed on either side fails the
// build.
var (
	_ = func(q *Queue, s *qpcore.Send) { s.SQ, s.State, s.QPN, s.QP = q.sq, qpcore.State(q.state), q.qpn, q.qp }
	_ = [1]struct{}{}[unsafe.Offsetof(Queue{}.sq)-unsafe.Offsetof(qpcore.Send{}.SQ)]
	_ = [1]struct{}{}[unsafe.Offsetof(Queue{}.state)-unsafe.Offsetof(qpcore.Send{}.State)]
	_ = [1]struct{}{}[unsafe.Offsetof(Queue{}.qpn)-unsafe.Offsetof(qpcore.Send{}.QPN)]
	_ = [1]struct{}{}[unsafe.Offsetof(Queue{}.qp)-unsafe.Offsetof(qpcore.Send{}.QP)]
	_ = [1]struct{}{}[unsafe.Sizeof(State(0))-unsafe.Sizeof(qpcore.State(0))]
	_ = [1]struct{}{}[StateInit-State(qpcore.StateInit)]
	_ = [1]struct{}{}[StateReady-State(qpcore.StateReady)]
	_ = [1]struct{}{}[StateError-State(qpcore.StateError)]
	_ = [1]struct{}{}[StateClosed-State(qpcore.StateClosed)]
)

func init() {
	qpcore.Setup = func(q any, transport string, qp *ctx.QueuePair, srq any) error {
		s, _ := srq.(*SharedReceiveQueue)
		return setup(q.(*Queue), transport, qp, s)
	}
	qpcore.Polling = func(q any) error { return q.(*Queue).polling() }
	seam.PollerClosed = func(poller any) bool {
		p, ok := poller.(*Poller)
		return ok && p.closed
	}
	qpcore.Refusal = func(q any, wrid uint64, flags wqebuilder.Flags) (wqebuilder.CtrlStage, error) {
		return q.(*Queue).refuse(wrid, flags)
	}
	qpcore.RefuseWith = func(q any, wrid uint64, flags wqebuilder.Flags, err error) wqebuilder.CtrlStage {
		return q.(*Queue).refuseWith(wrid, flags, err)
	}
}

// setup builds q over a created queue pair: the send queue from its
// descriptor (with the largest WQE the transport can build within the
// granted limits), its own receive queue, or the SRQ it is attached to.
// The transport packages call it from their constructors (newqp.Setup).
func setup(q *Queue, transport string, qp *ctx.QueuePair, srq *SharedReceiveQueue) error {
	d := provider.QPDescriptor(qp)
	// Setup also rebuilds a queue after its QP went through RESET: the
	// pollers it was added to keep it, and its counters go on. The CQEs
	// the QP left in their rings go first: they name WQE indexes of the
	// rings that now restart at 0. Unmatched counts on too.
	if c := q.closer; c != nil && c.qp == qp && q.qp == qp {
		c.discard(q)
	}
	if q.counts != nil && q.sq != nil {
		q.counts.addSend(q.sq.Counters())
	}
	q.retireRings()
	fresh := Queue{qp: qp, qpn: d.QPN, typ: qp.Type(), transport: transport, srq: srq, state: StateInit,
		closer: q.closer, counts: q.counts, unmatched: q.unmatched}
	if q.qp == qp {
		// A Reset of the same QP. Close, and Handle for a close through
		// the QP, may run on any goroutine meanwhile and read qp, typ and
		// transport, which a Reset does not change: those words are not
		// written again (a store of the same value is still a data race),
		// every other field is set as for a new queue.
		q.sq, q.state, q.qpn, q.rq, q.srq, q.recv = fresh.sq, fresh.state, fresh.qpn, fresh.rq, fresh.srq, fresh.recv
		q.dead, q.refusal = fresh.dead, fresh.refusal
		q.errSend, q.errRecv, q.errNoRQ = fresh.errSend, fresh.errRecv, fresh.errNoRQ
	} else {
		*q = fresh
	}
	for s := State(0); s <= StateClosed; s++ {
		var why error
		switch s {
		case StateInit:
			why = ErrNotConnected
		case StateError:
			why = ErrQPError
		case StateClosed:
			why = ctx.ErrClosed
		}
		if why != nil {
			q.errSend[s] = &wqebuilder.PostError{Transport: transport, Op: "post send", QPN: d.QPN, Err: why}
			if s != StateInit {
				q.errRecv[s] = &wqebuilder.PostError{Transport: transport, Op: "post receive", QPN: d.QPN, Err: why}
			}
		}
	}
	q.errNoRQ = &wqebuilder.PostError{Transport: transport, Op: "post receive", QPN: d.QPN, Err: ErrNoReceiveQueue}
	if d.SQ.WQECnt > 0 {
		l := limitsOf(qp)
		cfg := wqebuilder.Config{
			Buf:           d.SQ.Buf,
			WQECnt:        d.SQ.WQECnt,
			QPN:           d.QPN,
			DBRec:         d.DBRec,
			BlueFlame:     d.BlueFlame,
			BlueFlameSize: d.BlueFlameSize,
			MaxInline:     l.MaxInline,
			MaxSGE:        l.MaxSendSGE,
			MaxWQEBBs:     l.MaxWQEBBs,
			Transport:     transport,
			Memory:        d.Memory,
		}
		if cfg.MaxWQEBBs > cfg.WQECnt {
			return fmt.Errorf("send ring of %d WQEBBs cannot hold a WQE of %d: %w", cfg.WQECnt, cfg.MaxWQEBBs, ctx.ErrInvalidArgument)
		}
		sq, err := wqebuilder.New(cfg)
		if err != nil {
			return err
		}
		q.sq = sq
		if q.counts != nil {
			sq.EnableCounters()
		}
		if q.dead, err = newDeadQueue(d.QPN, transport, func() error { return q.refusal }); err != nil {
			return err
		}
	}
	// A QP without a receive queue of its own gets a ring of no slots that
	// is always full (one posted, none completed), so that the post's
	// check for a free slot refuses it too; recvRefusal says why.
	q.rq = &recvRing{head: 1}
	switch {
	case srq != nil:
		q.recv = srq.ring
	case d.RQ.WQECnt > 0:
		r, err := newRecvRing(d.RQ.Buf, d.DBRec, d.RQ.WQECnt, d.RQ.Stride, d.MaxRecvSGE, false, 0, 0)
		if err != nil {
			return fmt.Errorf("receive queue: %w", err)
		}
		r.errFull = &wqebuilder.PostError{Transport: transport, Op: "post receive", QPN: d.QPN, Err: ErrReceiveQueueFull}
		r.errSGE = &wqebuilder.PostError{Transport: transport, Op: "post receive", QPN: d.QPN, Err: wqebuilder.ErrTooManySGE}
		r.errLength = &wqebuilder.PostError{Transport: transport, Op: "post receive", QPN: d.QPN, Err: wqebuilder.ErrSGETooLong}
		r.errStale = &wqebuilder.PostError{Transport: transport, Op: "post receive", QPN: d.QPN, Err: wqebuilder.ErrStaleStage}
		r.memory = d.Memory
		q.rq, q.recv = r, r
	}
	q.rq.refusal = q.recvRefusal
	closeWithQP(q)
	return nil
}

// retireRings closes the send queue and the own receive ring of a queue
// that setup rebuilds after RESET: a stage begun on them before, or a
// SendQueue kept from before, then fails at Finish with ctx.ErrClosed and
// writes nothing into the rings or the doorbell record, which start again
// at 0. An SRQ's ring is the SRQ's, and stays.
func (q *Queue) retireRings() {
	if q.sq != nil {
		q.sq.Close()
	}
	if r := q.rq; r != nil && r.buf != nil && q.recv == r {
		gone := q.errRecv[StateClosed]
		r.refusal = func() error { return gone }
		r.closed.Store(1)
	}
}

// maxWQEBBs is the size in WQEBBs of the largest WQE a queue pair of type t
// can build with maxSGE data segments or maxInline bytes inline: control
// segment, address vector (UD, DCI), remote address (RC, DCI) and the
// payload, at least the masked 64-bit compare-and-swap with its result
// segment where atomics are allowed (sqsize.KitWQEBBs, the bound the
// providers size the ring's slots for).
func maxWQEBBs(t ctx.QPType, maxSGE, maxInline uint32) uint32 {
	return sqsize.KitWQEBBs(t, maxSGE, maxInline)
}

// newDeadQueue returns a send queue over a private ring that is always
// full: its stages write only to the queue's scratch area and Finish fails
// with refusal's error, the one the refused post returned. A refused post
// hands one out so that a caller who ignores the error still writes
// nothing that matters, and learns why from Finish.
func newDeadQueue(qpn uint32, transport string, refusal func() error) (*wqebuilder.SendQueue, error) {
	const ringSize = 2 * prm.WQEBBSize
	mem := make([]byte, ringSize+2*prm.WQEBBSize)
	base := unsafe.Pointer(unsafe.SliceData(mem))
	ring := unsafe.Add(base, (prm.WQEBBSize-uintptr(base)%prm.WQEBBSize)%prm.WQEBBSize)
	dbrec := unsafe.Add(ring, ringSize)
	sq, err := wqebuilder.New(wqebuilder.Config{
		Buf: ring, WQECnt: 2, QPN: qpn & prm.CtrlQPNMask, DBRec: dbrec,
		BlueFlame: unsafe.Add(dbrec, 8), MaxWQEBBs: 2, Transport: transport, Refusal: refusal,
	})
	if err != nil {
		return nil, err
	}
	// One NOP that is never rung keeps it full; closed, it refuses every
	// WQE with refusal's error even if a caller's Complete retires the
	// NOP (SendQueue hands this queue out once the QP is closed).
	if err := sq.Begin(0, 0).Nop().Finish(); err != nil {
		return nil, err
	}
	sq.Close()
	return sq, nil
}

// refuse is the post of a queue that is not ready (newqp.Refuse): a
// *wqebuilder.PostError wrapping ErrNotConnected, ErrQPError or
// ctx.ErrClosed, and a stage of a private full queue, which writes nothing
// that matters and whose Finish fails with the same error.
func (q *Queue) refuse(wrid uint64, flags wqebuilder.Flags) (wqebuilder.CtrlStage, error) {
	if q.qp == nil {
		// A zero Queue (a zero rc.QP, ud.QP or dc.DCI): refused as
		// its other calls are.
		err := &wqebuilder.PostError{Transport: "transport", Op: "post send", Err: errZeroQueue}
		return q.refuseWith(wrid, flags, err), err
	}
	if q.qp.Closed() {
		q.state = StateClosed
	}
	err := q.errSend[q.state]
	return q.refuseWith(wrid, flags, err), err
}

// refuseWith returns a stage of the private full queue whose Finish
// returns err.
func (q *Queue) refuseWith(wrid uint64, flags wqebuilder.Flags, err error) wqebuilder.CtrlStage {
	q.refusal = err
	if q.dead == nil && q.qp == nil {
		// A zero Queue has no refusal queue of its own until its
		// first refused post.
		dead, derr := newDeadQueue(0, "transport", func() error { return q.refusal })
		if derr != nil {
			panic(fmt.Sprintf("transport: refusal queue of a zero queue pair: %v", derr))
		}
		q.dead = dead
	}
	if q.dead == nil {
		// A queue without a send queue never reaches here from a
		// transport's Post.
		panic("transport: post send on a queue pair without a send queue")
	}
	return q.dead.Begin(wrid, flags)
}

// Handle returns the control-plane queue pair.
func (q *Queue) Handle() *ctx.QueuePair { return q.qp }

// Limits returns what the provider granted the queue pair: the send and
// receive ring sizes, the largest WQE, max SGE and max inline. MaxRecvSGE
// is the scatter entries a receive WQE of the QP's own receive queue may
// carry (0 without one).
func (q *Queue) Limits() Limits {
	if q.qp == nil {
		return Limits{} // a zero Queue
	}
	l := limitsOf(q.qp)
	l.MaxRecvSGE = q.rq.maxSGE
	return l
}

// Fail moves the queue pair to the error state: every outstanding work
// request completes with WR_FLUSH_ERR, and no more may be posted. A DCT has
// no error state (the kernel's mlx5_ib_modify_dct refuses it): Fail refuses
// a DCT with ErrTransport and changes nothing; Close it instead.
func (q *Queue) Fail() error {
	if q.qp == nil {
		return errZeroQueue
	}
	if q.typ == ctx.QPTypeDCT {
		return qpcore.Errorf(q.transport, "move DCT to error", "a DCT has no error state (close it instead): %w", ErrTransport)
	}
	if err := q.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}); err != nil {
		return qpcore.Errorf(q.transport, "move"+q.kind()+" to error", "%w", err)
	}
	q.state = StateError
	return nil
}

// errZeroQueue is the error of a Queue (or a QP of rc, ud or dc) not made
// by its package's constructor.
var errZeroQueue = fmt.Errorf("queue pair: not made by a constructor (rc.New, ud.New, dc.NewDCI, dc.NewDCT): %w", ctx.ErrInvalidArgument)

// kind names a DC queue pair's side in an operation's name (" DCI",
// " DCT"): package dc has both.
func (q *Queue) kind() string {
	if q.typ == ctx.QPTypeDCI || q.typ == ctx.QPTypeDCT {
		return " " + q.typ.String()
	}
	return ""
}

// Close destroys the queue pair (not its SRQ). Work requests the device has
// not completed are lost, with no completion: drain them (Fail, then poll
// the flushes) first if they matter; receives a DCT has not completed stay
// in its SRQ.
//
// Close may be called from any goroutine, also while the owner posts on the
// queue pair and polls its Pollers, as net.Conn.Close may: it closes only
// the control-plane queue pair (Handle), so the owner's posts fail with
// ctx.ErrClosed from then on (a stage begun before fails at Finish), and each
// Poller the queue pair was added to drops it on the owner's goroutine, in
// a later Poll, once no CQE of it is left in the CQ; until then its CQEs
// are handed over as the device wrote them (Remove drops it at once).
// Close is idempotent.
//
// Close of a nil *Queue returns nil.
func (q *Queue) Close() error {
	if q == nil {
		return nil
	}
	if err := q.qp.Close(); err != nil && !errors.Is(err, ctx.ErrClosed) {
		return qpcore.Errorf(q.transport, "close"+q.kind(), "%w", err)
	}
	return nil
}

// QPN returns the queue pair number (for a DCT: the DCT number).
func (q *Queue) QPN() uint32 { return q.qpn }

// State returns the data plane's view of the QP: StateClosed once it (or a
// parent) has been closed, on any goroutine (State reads the QP's atomic
// closed flag and writes nothing), StateError once an error completion was
// polled. A zero Queue (not made by a constructor) is StateClosed; its
// Limits are zero, and Fail and WatchEvents refuse it with
// ctx.ErrInvalidArgument.
func (q *Queue) State() State {
	if q.qp == nil || q.qp.Closed() {
		return StateClosed
	}
	return q.state
}

// SRQ returns the shared receive queue the QP receives from, or nil.
func (q *Queue) SRQ() *SharedReceiveQueue { return q.srq }

// SendQueue returns the send queue (nil for a DCT), for its counters:
// Free, Outstanding, Pending, and to post on directly. Once the QP is
// closed it returns the private queue that refused posts use instead,
// always full: its stages write nothing that matters and their Finish
// returns a *wqebuilder.PostError wrapping ctx.ErrClosed. A Reset (rc)
// replaces it and closes the old one: take it again after a Reset. Counters
// enabled on the send queue itself (wqebuilder.SendQueue.EnableCounters)
// stay with the old one; the queue pair's own counting (EnableCounters)
// outlives the Reset.
func (q *Queue) SendQueue() *wqebuilder.SendQueue {
	if q.sq != nil && q.qp.Closed() {
		q.state = StateClosed
		q.refusal = q.errSend[StateClosed]
		return q.dead
	}
	return q.sq
}

// RingDoorbell publishes the send WQEs finished (with Finish) since the
// last doorbell: one doorbell for a batch. It does nothing on a closed QP.
func (q *Queue) RingDoorbell() {
	if q.sq == nil || q.qp.Closed() {
		return
	}
	q.sq.RingDoorbell()
}

// BeginRecv starts a receive WQE on the QP's own receive queue; add the
// buffers with SGE, then Finish (and RingRecvDoorbell) or FinishDoorbell.
// The stage fails with ErrNoReceiveQueue when the QP has none (it uses an
// SRQ: post there), ErrQPError or ctx.ErrClosed.
//
// BeginRecv, SGE and Finish (or FinishDoorbell) compile into the caller,
// with a call only for the store barrier of FinishDoorbell and, when the
// post cannot go ahead, for the function that says why.
func (q *Queue) BeginRecv(wrid uint64) RecvStage {
	// Not closed or in error, and a free slot (a QP without a receive
	// queue of its own has a ring that is always full).
	r := q.rq
	if q.state > StateReady || r.head-r.tail > r.mask || q.qp.Closed() {
		return r.refuse()
	}
	return r.begin(wrid)
}

// recvRefusal is why a receive post on q cannot go ahead: the QP is closed
// or in error, has no receive queue of its own, or its receive queue is
// full, in that order.
func (q *Queue) recvRefusal() error {
	if q.qp.Closed() {
		q.state = StateClosed
	}
	switch {
	case q.state > StateReady:
		return q.errRecv[q.state]
	case q.rq.buf == nil:
		return q.errNoRQ
	default:
		return q.rq.errFull
	}
}

// PostRecv posts a receive WQE of one buffer (length bytes at addr in the
// region lkey; a zero length posts a WQE without buffers, for RDMA writes
// with immediate and empty messages) and rings the receive doorbell.
//
// It is BeginRecv, SGE and FinishDoorbell, in a closure called once so
// that the whole post compiles into the caller, with a call only for the
// store barrier and, when the post cannot go ahead, for the function that
// says why.
func (q *Queue) PostRecv(wrid uint64, addr uint64, length, lkey uint32) error {
	return func() error {
		return q.BeginRecv(wrid).SGE(addr, length, lkey).FinishDoorbell()
	}()
}

// RingRecvDoorbell publishes the receive WQEs finished since the last
// doorbell. It does nothing on a closed QP or a zero Queue.
func (q *Queue) RingRecvDoorbell() {
	if q.rq == nil || q.rq.buf == nil || q.qp.Closed() {
		return
	}
	q.rq.ringDoorbell()
}

// RecvOutstanding returns the receive WQEs posted on the QP's own receive
// queue and not yet completed (0 for a zero Queue).
func (q *Queue) RecvOutstanding() uint32 {
	if q.rq == nil {
		return 0 // a zero Queue
	}
	return q.rq.posted
}

// Unmatched returns the number of completions that named no outstanding
// work request since the queue pair was created (a Reset keeps counting,
// as the queue pair's counters do).
func (q *Queue) Unmatched() uint64 { return q.unmatched }

// CompleteSend is Complete for the most common CQE of a poll, a successful
// send completion: it fills wc and retires the work requests as Complete
// does and reports true, or does nothing and reports false for any other
// CQE (including one whose wqe_counter names no WQE in flight), which the
// caller then hands to Complete. It compiles into a Poller's loop; Complete
// is a call.
func (q *Queue) CompleteSend(c *monocq.CQE, wc *Completion) bool {
	return func() bool {
		sq := q.sq
		if c.Opcode() != prm.CQEReq || sq == nil {
			return false
		}
		counter := c.WQECounter()
		wrid, ok := sq.Complete(counter)
		if !ok {
			return false
		}
		wc.set(q, c.QPN(), prm.CQEReq, counter)
		wc.setSend(c)
		wc.WRID = wrid
		return true
	}()
}

// CompleteRecv is Complete for the common CQE of a receiver's poll: a
// successful receive (SEND, SEND with immediate or invalidate, RDMA write
// with immediate) into the QP's own receive queue or its SRQ, with no
// payload in the CQE. It reports true having done what Complete does, or
// false having done nothing for any other CQE, as CompleteSend.
func (q *Queue) CompleteRecv(c *monocq.CQE, wc *Completion) bool {
	return func() bool {
		r := q.recv
		op := c.Opcode()
		if op < prm.CQERespWrImm || op > prm.CQERespSendInv || r == nil || c.Format() != prm.CQEFormatNone {
			return false
		}
		counter := c.WQECounter()
		// take's two halves, spelled out: take itself does not inline.
		var wrid uint64
		var ok bool
		if r.srq {
			wrid, ok = r.takeSRQ(counter)
		} else {
			wrid, ok = r.takeRQ(counter)
		}
		if !ok {
			return false
		}
		wc.set(q, c.QPN(), op, counter)
		wc.setRecv(c)
		wc.WRID = wrid
		return true
	}()
}

// Complete decodes c, a CQE of this queue pair, into wc and retires the
// work requests it names: for a send completion the WQE at its wqe_counter
// and every unsignaled WQE before it (wc.WRID is the named WQE's id); for a
// receive completion the receive WQE (from the QP's receive queue or its
// SRQ), copying a payload the device scattered into the CQE to the WQE's
// buffers. An error completion moves the queue to StateError (not for a
// DCT, which outlives a bad request). Complete allocates nothing.
func (q *Queue) Complete(c *monocq.CQE, wc *Completion) {
	wc.decode(q, c)
	switch wc.Opcode {
	case prm.CQEReq, prm.CQEReqErr:
		if q.sq == nil {
			wc.Match = MatchUnexpected
			return
		}
		wrid, ok := q.sq.Complete(wc.WQECounter)
		if !ok {
			wc.Match = MatchUnmatched
			q.unmatched++
			return
		}
		wc.WRID = wrid
	case prm.CQERespSend, prm.CQERespSendImm, prm.CQERespSendInv, prm.CQERespWrImm, prm.CQERespErr:
		r := q.recv
		if r == nil {
			wc.Match = MatchUnexpected
			return
		}
		wrid, ok := r.take(wc.WQECounter)
		if !ok {
			wc.Match = MatchUnmatched
			q.unmatched++
			return
		}
		wc.WRID = wrid
		if c.Format() != prm.CQEFormatNone && wc.Opcode != prm.CQERespErr {
			r.scatterTo(uint32(wc.WQECounter), c.ScatterData())
		}
	default:
		wc.Match = MatchUnexpected
		return
	}
	if (wc.Opcode == prm.CQEReqErr || wc.Opcode == prm.CQERespErr) && q.typ != ctx.QPTypeDCT && q.state < StateError {
		q.state = StateError
	}
}

// Limits are the sizes a provider granted a queue pair (providers round up
// what was asked).
type Limits struct {
	// SendWQEBBs is the size of the send ring in 64-byte basic blocks; a
	// WQE takes one to MaxWQEBBs of them.
	SendWQEBBs uint32
	// MaxWQEBBs is the largest WQE the queue pair builds, in basic blocks:
	// a post needs that many free.
	MaxWQEBBs uint32
	// RecvWQEs is the number of receive WQEs of the QP's own receive queue.
	RecvWQEs uint32
	// MaxSendSGE, MaxRecvSGE and MaxInline bound one WQE.
	MaxSendSGE, MaxRecvSGE, MaxInline uint32
}

// limitsOf returns the limits of qp: the granted ones, within what a WQE
// of the kit can express (rdma-core grants the inline bytes of a 1 KiB
// slot, which can be more than the ds count allows: sqsize.KitMaxInline).
func limitsOf(qp *ctx.QueuePair) Limits {
	d := provider.QPDescriptor(qp)
	l := Limits{SendWQEBBs: d.SQ.WQECnt, RecvWQEs: d.RQ.WQECnt,
		MaxSendSGE: d.MaxSendSGE, MaxRecvSGE: d.MaxRecvSGE, MaxInline: d.MaxInline}
	if d.SQ.WQECnt > 0 {
		l.MaxWQEBBs = maxWQEBBs(qp.Type(), d.MaxSendSGE, d.MaxInline)
		l.MaxSendSGE = min(l.MaxSendSGE, sqsize.KitMaxSGE(qp.Type()))
		l.MaxInline = min(l.MaxInline, sqsize.KitMaxInline(qp.Type()))
	}
	return l
}
