package sim

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// readEvents drains a context's async events.
// anyQPN is requireEvent's qpn for an event whose QPN is not checked.
const anyQPN = ^uint32(0)

// requireEvent requires the next async event of c to be of type typ, for
// the QP qpn (unless anyQPN).
func requireEvent(t *testing.T, c *ctx.Context, typ ctx.AsyncEventType, qpn uint32) {
	t.Helper()
	ev, ok, err := provider.ReadAsyncEvent(c)
	require.NoError(t, err)
	require.True(t, ok, "no %v event", typ)
	require.Equal(t, typ, ev.Type)
	if qpn != anyQPN {
		require.Equal(t, qpn, ev.QPN)
	}
}

func readEvents(t *testing.T, c *ctx.Context) []ctx.AsyncEvent {
	t.Helper()
	var out []ctx.AsyncEvent
	for {
		ev, ok, err := provider.ReadAsyncEvent(c)
		require.NoError(t, err)
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

// TestSRQLimitEvent: an armed SRQ limit raises SRQ_LIMIT_REACHED once, when
// the posted WQEs left drop below it, and reads back 0 afterwards; no
// event while it holds, none once disarmed, none after it fired until
// armed again. Limits at or above the WQE count are refused.
func TestSRQLimitEvent(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 7, 1) // 8 WQEs
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
	e.connectRC(a, b, 7, 1)

	err := srq.srq.ArmLimit(8)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	n, err := srq.srq.Limit()
	require.NoError(t, err)
	require.Zero(t, n, "a refused limit changes nothing")

	for k := range 4 {
		srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(k*64)))
	}
	require.NoError(t, srq.srq.ArmLimit(3))
	n, err = srq.srq.Limit()
	require.NoError(t, err)
	require.Equal(t, uint32(3), n)

	send := func() {
		a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte{1}))
		e.run()
		require.Len(t, b.rcq.drain(), 1)
		require.Len(t, a.scq.drain(), 1)
	}
	send() // 3 left: not below the limit
	require.Empty(t, readEvents(t, e.c2))
	send() // 2 left
	require.Equal(t, []ctx.AsyncEvent{{Type: ctx.EventSRQLimitReached, SRQN: srq.srq.SRQN()}}, readEvents(t, e.c2))
	require.Empty(t, readEvents(t, e.c), "the event is the SRQ's device's")
	n, err = srq.srq.Limit()
	require.NoError(t, err)
	require.Zero(t, n, "the limit disarms as it fires")
	send() // 1 left, disarmed
	require.Empty(t, readEvents(t, e.c2))

	// Armed again, then disarmed with 0: no event.
	require.NoError(t, srq.srq.ArmLimit(2))
	require.NoError(t, srq.srq.ArmLimit(0))
	srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(4*64)))
	send()
	require.Empty(t, readEvents(t, e.c2))

	require.NoError(t, srq.srq.Close())
	require.ErrorIs(t, srq.srq.ArmLimit(1), ctx.ErrClosed)
}

// TestLastWQEReachedEvent: a QP attached to an SRQ that enters the error
// state, by a modify or by a fatal error, raises QP_LAST_WQE_REACHED
// naming it (after the QP_FATAL of a fatal error); a QP with its own
// receive ring raises none.
func TestLastWQEReachedEvent(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 7, 1)
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
	b2 := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
	plain := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	e.connectRC(a, b, 7, 1)
	for _, q := range []*testQP{b2, plain} {
		require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
	}

	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}))
	require.NoError(t, plain.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}))
	e.run()
	require.Equal(t, []ctx.AsyncEvent{{Type: ctx.EventQPLastWQEReached, QPN: b.qp.QPN()}}, readEvents(t, e.c2))
	// Already in error: no second event.
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}))
	require.Empty(t, readEvents(t, e.c2))

	e.f.mu.Lock()
	q := e.f.qps[b2.qp.QPN()]
	e.f.qpFatal(q, "test")
	e.f.mu.Unlock()
	got := readEvents(t, e.c2)
	require.Len(t, got, 2)
	require.Equal(t, ctx.EventQPFatal, got[0].Type)
	require.Equal(t, ctx.AsyncEvent{Type: ctx.EventQPLastWQEReached, QPN: b2.qp.QPN()}, got[1])
}

// TestSubscribeAsyncEvents: a subscribed device's events go to the
// subscriber and not to its queue; unsubscribing restores the queue.
func TestSubscribeAsyncEvents(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 7, 1)
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
	b2 := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
	for _, q := range []*testQP{b, b2} {
		require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
	}
	dev := provider.DeviceOf(e.c2)
	var got []ctx.AsyncEvent
	require.True(t, simadopt.SubscribeAsyncEvents(dev, func(ev ctx.AsyncEvent) { got = append(got, ev) }))
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}))
	require.Equal(t, []ctx.AsyncEvent{{Type: ctx.EventQPLastWQEReached, QPN: b.qp.QPN()}}, got)
	require.Empty(t, readEvents(t, e.c2))

	require.True(t, simadopt.SubscribeAsyncEvents(dev, nil))
	require.NoError(t, b2.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}))
	require.Len(t, got, 1)
	require.Equal(t, []ctx.AsyncEvent{{Type: ctx.EventQPLastWQEReached, QPN: b2.qp.QPN()}}, readEvents(t, e.c2))

	require.False(t, simadopt.SubscribeAsyncEvents(nil, nil), "not a device of the model")
}

// TestAsyncEventsBounded: a device keeps at most maxQueuedEvents async
// events unread; those past it are dropped and counted (LostEvents), the
// oldest kept, and once read there is room again. Before, a peer that
// kept raising events (requests to a DCT with a wrong key over a link)
// grew a process that read none without bound.
func TestAsyncEventsBounded(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 16, 1)
	dct := e.dct(e.pd2, srq, 0xfeed)
	d := e.f.qpByNum(dct.qp.QPN()).dev
	const extra = 100
	e.f.mu.Lock()
	for i := range maxQueuedEvents + extra {
		d.postEvent(ctx.AsyncEvent{Type: ctx.EventQPAccessError, QPN: uint32(i)})
	}
	e.f.mu.Unlock()
	require.Equal(t, uint64(extra), e.f.Stats().LostEvents)
	evs := readEvents(t, e.c2)
	require.Len(t, evs, maxQueuedEvents)
	require.Equal(t, uint32(0), evs[0].QPN, "the oldest kept")
	require.Equal(t, uint32(maxQueuedEvents-1), evs[len(evs)-1].QPN)
	e.f.mu.Lock()
	d.postEvent(ctx.AsyncEvent{Type: ctx.EventQPAccessError, QPN: 7})
	e.f.mu.Unlock()
	evs = readEvents(t, e.c2)
	require.Len(t, evs, 1)
	require.Equal(t, uint64(extra), e.f.Stats().LostEvents)
}

// TestDeviceFatalRaisesNoLastWQEReached: a fatal device error moves every
// QP of the HCA to error, a QP on an SRQ too, but raises DEVICE_FATAL
// alone: the firmware is gone, and mlx5_ib's handling of the internal
// error (mlx5_ib_handle_internal_error) only runs the CQs' completion
// handlers; no QP event reaches the program. The model used to raise
// QP_LAST_WQE_REACHED for each such QP, before DEVICE_FATAL.
func TestDeviceFatalRaisesNoLastWQEReached(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 7, 1)
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
	require.NoError(t, e.f.FailDevice("sim1"))
	evs := readEvents(t, e.c2)
	require.Len(t, evs, 1, "%v", evs)
	require.Equal(t, ctx.EventDeviceFatal, evs[0].Type)
	require.Equal(t, ctx.QPStateError, qpState(t, b))
	// The move to error the program then asks for (allowed while the
	// device is failed) raises nothing either: the QP is in error.
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}))
	require.Empty(t, readEvents(t, e.c2))
}

// TestDestroyTakesUnreadEvents: destroying a QP, SRQ or CQ takes its
// unread async events out of the device's queue, as the kernel's
// ib_uverbs_release_uevent takes them out of the async event file when
// ibv_destroy_qp, _srq or _cq runs: a program never reads an event of an
// object it destroyed (whose number a new object may have by then). The
// events of other objects stay, in order. The model used to keep them.
func TestDestroyTakesUnreadEvents(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 7, 1)
	keep := e.newSRQ(e.pd2, 7, 1)
	cq := e.newCQ(e.c2, 8, prm.CQE64Size)
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
	b2 := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
	for _, q := range []*testQP{b, b2} {
		require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
	}
	e.f.mu.Lock()
	d := e.f.qpByNum(b.qp.QPN()).dev
	d.postEvent(ctx.AsyncEvent{Type: ctx.EventSRQLimitReached, SRQN: srq.srq.SRQN()})
	d.postEvent(ctx.AsyncEvent{Type: ctx.EventSRQLimitReached, SRQN: keep.srq.SRQN()})
	d.postEvent(ctx.AsyncEvent{Type: ctx.EventCQError, CQN: cq.cq.CQN()})
	e.f.mu.Unlock()
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}))
	require.NoError(t, b2.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}))

	require.NoError(t, b.qp.Close())
	require.NoError(t, cq.cq.Close())
	require.NoError(t, b2.qp.Close())
	require.NoError(t, srq.srq.Close())
	require.Equal(t, []ctx.AsyncEvent{{Type: ctx.EventSRQLimitReached, SRQN: keep.srq.SRQN()}}, readEvents(t, e.c2))

	// With every event taken, the descriptor is not readable.
	e.f.mu.Lock()
	d.postEvent(ctx.AsyncEvent{Type: ctx.EventSRQLimitReached, SRQN: keep.srq.SRQN()})
	e.f.mu.Unlock()
	require.NoError(t, keep.srq.Close())
	n, err := unix.Read(d.evfd, make([]byte, 8))
	require.ErrorIs(t, err, unix.EAGAIN, "read %d", n)
	require.Empty(t, readEvents(t, e.c2))
}

// TestDCIOnSRQRaisesNoLastWQEReached: a DCI created on an SRQ through the
// provider (ctx.ProtectionDomain.CreateQueuePair, as create_dci takes one)
// receives nothing through it and raises no QP_LAST_WQE_REACHED when it
// enters error, as the emulated kernel's DCI on an SRQ raises none
// (docs/hardware.md, "Async events on the emulated kernel"). It used to
// raise one.
func TestDCIOnSRQRaisesNoLastWQEReached(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 7, 1)
	dci := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeDCI, srq: srq})
	require.NoError(t, dci.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1}))
	require.NoError(t, dci.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}))
	require.Empty(t, readEvents(t, e.c2))
}

// TestSRQLimitAfterDeviceFatal: after a fatal device error, arming and
// querying the SRQ limit fail with EIO, as every verb but those that
// destroy does: mlx5_ib_modify_srq's ARM_RQ and mlx5_ib_query_srq's
// QUERY_SRQ are commands the device in internal error refuses
// (mlx5_internal_err_ret_value). Closing the SRQ still works. The model
// used to arm and report the limit as on a live device.
func TestSRQLimitAfterDeviceFatal(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 7, 1)
	require.NoError(t, srq.srq.ArmLimit(2))
	require.NoError(t, e.f.FailDevice("sim1"))
	err := srq.srq.ArmLimit(3)
	require.ErrorIs(t, err, unix.EIO)
	require.Contains(t, err.Error(), "fatal device error")
	_, err = srq.srq.Limit()
	require.ErrorIs(t, err, unix.EIO)
	require.NoError(t, srq.srq.Close(), "destroying still works")
}
