package channel_test

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// bg is the context of calls that need no deadline.
var bg = context.Background()

// events collects what a channel's Options.OnEvent reports.
type events struct {
	mu  sync.Mutex
	evs []ctx.AsyncEvent
}

func (e *events) on(ev ctx.AsyncEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

func (e *events) types() []ctx.AsyncEventType {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []ctx.AsyncEventType
	for _, ev := range e.evs {
		out = append(out, ev.Type)
	}
	return out
}

// wait waits until n events were reported and returns their types.
func (e *events) wait(t *testing.T, n int) []ctx.AsyncEventType {
	t.Helper()
	require.Eventually(t, func() bool { return len(e.types()) >= n }, 5*time.Second, time.Millisecond, "events so far: %v", e.types())
	return e.types()
}

// requireEventFailure checks the error of work a channel failed because of
// an event of type typ.
func requireEventFailure(t *testing.T, err error, typ ctx.AsyncEventType) {
	t.Helper()
	require.ErrorIs(t, err, channel.ErrAsyncEvent)
	require.ErrorIs(t, err, channel.ErrFailed)
	var ee *channel.EventError
	require.True(t, errors.As(err, &ee), "%v", err)
	require.Equal(t, typ, ee.Event.Type)
	require.Contains(t, err.Error(), typ.String())
}

// exchange checks that a→b RDMA WRITE and a SEND b→a work on a connected
// pair, and that the regions the peers shared carry the MRs' keys.
func exchange(t *testing.T, a, b *host, ca, cb *channel.Channel, msg string) {
	t.Helper()
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	require.Equal(t, b.mr.RKey(), region.RemoteKey, "the peer's region is its MR, same key")
	copy(a.bytes()[0:], msg)
	require.NoError(t, ca.Write(bg, channel.WriteRequest{Local: a.sge(0, len(msg)), Remote: channel.At(region, 4096)}))
	require.Equal(t, msg, string(b.bytes()[4096:4096+len(msg)]))
	recv, err := ca.PostReceive(channel.RecvRequest{Local: a.sge(8192, 64)})
	require.NoError(t, err)
	copy(b.bytes()[100:], msg)
	require.NoError(t, cb.Send(bg, channel.SendRequest{Local: b.sge(100, len(msg))}))
	require.NoError(t, recv.Wait(bg))
	require.Equal(t, msg, string(a.bytes()[8192:8192+len(msg)]))
}

// pairWith is pair with options of each side.
func pairWith(t *testing.T, a, b *host, optsA, optsB channel.Options) (*channel.Channel, *channel.Channel) {
	t.Helper()
	pa, err := channel.New(a.pd, optsA)
	require.NoError(t, err)
	pb, err := channel.New(b.pd, optsB)
	require.NoError(t, err)
	require.NoError(t, pa.Share(a.mr))
	require.NoError(t, pb.Share(b.mr))
	ca, err := pa.Handshake(wire(t, pb.Endpoint()))
	require.NoError(t, err)
	cb, err := pb.Handshake(wire(t, pa.Endpoint()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = ca.Close(); _ = cb.Close() })
	return ca, cb
}

// reestablish rebuilds both channels and handshakes them again.
func reestablish(t *testing.T, ca, cb *channel.Channel) (*channel.Channel, *channel.Channel) {
	t.Helper()
	pa, err := ca.Reestablish()
	require.NoError(t, err)
	pb, err := cb.Reestablish()
	require.NoError(t, err)
	na, err := pa.Handshake(wire(t, pb.Endpoint()))
	require.NoError(t, err)
	nb, err := pb.Handshake(wire(t, pa.Endpoint()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = na.Close(); _ = nb.Close() })
	return na, nb
}

// TestChannelPortFlap: the port of one side goes down and up. That side
// reports PORT_ERR then PORT_ACTIVE, and its pending receive fails naming
// the event; the other side's write is never answered and fails with
// RETRY_EXC_ERR. Both reestablish on the same memory regions (the same
// keys) and traffic flows again.
func TestChannelPortFlap(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	var evA, evB events
	ca, cb := pairWith(t, a, b, channel.Options{OnEvent: evA.on}, channel.Options{OnEvent: evB.on})
	exchange(t, a, b, ca, cb, "before the flap")
	keyA, keyB := a.mr.RKey(), b.mr.RKey()

	pending, err := cb.PostReceive(channel.RecvRequest{Local: b.sge(0, 64)})
	require.NoError(t, err)
	require.NoError(t, f.SetPortState("sim1", 1, false))
	require.Equal(t, []ctx.AsyncEventType{ctx.EventPortError}, evB.wait(t, 1))
	err = pending.Wait(bg)
	requireEventFailure(t, err, ctx.EventPortError)
	require.Contains(t, err.Error(), "port=1")
	requireEventFailure(t, cb.Err(), ctx.EventPortError)
	require.Zero(t, cb.Outstanding(), "the receive was flushed")
	_, err = cb.PostReceive(channel.RecvRequest{Local: b.sge(0, 64)})
	require.ErrorIs(t, err, channel.ErrFailed, "a failed channel takes no work")

	// The side whose port stayed up: its requests go unanswered.
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	err = ca.Write(bg, channel.WriteRequest{Local: a.sge(0, 8), Remote: channel.At(region, 0)})
	require.ErrorIs(t, err, monocq.ErrRetryExceeded)
	require.Empty(t, evA.types(), "sim0's port did not change")

	require.NoError(t, f.SetPortState("sim1", 1, true))
	require.Equal(t, []ctx.AsyncEventType{ctx.EventPortError, ctx.EventPortActive}, evB.wait(t, 2))

	na, nb := reestablish(t, ca, cb)
	require.Equal(t, keyA, a.mr.RKey())
	require.Equal(t, keyB, b.mr.RKey())
	require.NotEqual(t, ca.QP(0).QPN(), na.QP(0).QPN(), "new queue pairs")
	exchange(t, a, b, na, nb, "after the flap")
	require.NoError(t, na.Err())
	require.NoError(t, nb.Err())
}

// TestChannelQPFatal: QP_FATAL on a channel's queue pair fails its
// pending work; the channel is reestablished.
func TestChannelQPFatal(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	var evA events
	ca, cb := pairWith(t, a, b, channel.Options{OnEvent: evA.on}, channel.Options{})
	pending, err := ca.PostReceive(channel.RecvRequest{Local: a.sge(0, 64)})
	require.NoError(t, err)
	require.NoError(t, f.FailQP(ca.QP(0).QPN()))
	requireEventFailure(t, pending.Wait(bg), ctx.EventQPFatal)
	require.Equal(t, []ctx.AsyncEventType{ctx.EventQPFatal}, evA.wait(t, 1))
	na, nb := reestablish(t, ca, cb)
	exchange(t, a, b, na, nb, "after QP fatal")
}

// TestChannelCQError: CQ_ERR on the channel's completion queue fails a
// blocking call waiting on it.
func TestChannelCQError(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	var evA events
	ca, cb := pairWith(t, a, b, channel.Options{OnEvent: evA.on}, channel.Options{})
	require.NoError(t, f.FailCQ(ca.CompletionQueue().CQN()))
	_, err := ca.Receive(bg, channel.RecvRequest{Local: a.sge(0, 64)})
	requireEventFailure(t, err, ctx.EventCQError)
	require.Contains(t, err.Error(), "receive")
	require.Equal(t, ctx.EventCQError, evA.wait(t, 1)[0])
	na, nb := reestablish(t, ca, cb)
	exchange(t, a, b, na, nb, "after CQ error")
}

// TestChannelDeviceFatal: DEVICE_FATAL fails the pending work; the
// device refuses to build a new channel (EIO) until it is opened again.
func TestChannelDeviceFatal(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	var evA events
	ca, _ := pairWith(t, a, b, channel.Options{OnEvent: evA.on}, channel.Options{})
	pending, err := ca.PostReceive(channel.RecvRequest{Local: a.sge(0, 64)})
	require.NoError(t, err)
	require.NoError(t, f.FailDevice("sim0"))
	requireEventFailure(t, pending.Wait(bg), ctx.EventDeviceFatal)
	require.Equal(t, []ctx.AsyncEventType{ctx.EventDeviceFatal}, evA.wait(t, 1))
	_, err = ca.Reestablish()
	require.ErrorIs(t, err, syscall.EIO)
}

// TestChannelWithoutOnEventReadsNoEvent: a channel without OnEvent leaves
// the context's events unread and keeps working.
func TestChannelWithoutOnEventReadsNoEvent(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, cb := pair(t, a, b, channel.Options{})
	require.NoError(t, f.SetPortState("sim0", 1, false))
	require.NoError(t, f.SetPortState("sim0", 1, true))
	ev, ok, err := provider.ReadAsyncEvent(a.dev)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, ctx.EventPortError, ev.Type)
	require.NoError(t, ca.Err())
	exchange(t, a, b, ca, cb, "no watch")
}

// TestChannelDCEvents: a DC channel watches its initiator and targets: a
// QP_FATAL on the DC initiator fails a blocking write naming the event,
// and the reestablished channel works.
func TestChannelDCEvents(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	var evA events
	opts := channel.Options{Transport: endpoint.TransportDC, OnEvent: evA.on}
	ca, cb := pairWith(t, a, b, opts, channel.Options{Transport: endpoint.TransportDC})
	exchange(t, a, b, ca, cb, "DC before")
	require.NoError(t, f.FailQP(ca.DCI().QPN()))
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	err = ca.Write(bg, channel.WriteRequest{Local: a.sge(0, 8), Remote: channel.At(region, 0)})
	requireEventFailure(t, err, ctx.EventQPFatal)
	require.Equal(t, ctx.EventQPFatal, evA.wait(t, 1)[0])
	na, nb := reestablish(t, ca, cb)
	exchange(t, a, b, na, nb, "DC after")
}

// TestChannelDCEventsWithReceive: QP_FATAL on the DC initiator of a
// channel that has a receive outstanding: the failed write still names the
// event, though failing the channel destroyed its queues (the receive sits
// in a shared receive queue, which no error state flushes), and the
// receive completes flushed.
func TestChannelDCEventsWithReceive(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	var evA events
	opts := channel.Options{Transport: endpoint.TransportDC, OnEvent: evA.on}
	ca, cb := pairWith(t, a, b, opts, channel.Options{Transport: endpoint.TransportDC})
	exchange(t, a, b, ca, cb, "DC before")
	recv, err := ca.PostReceive(channel.RecvRequest{Local: a.sge(8192, 64)})
	require.NoError(t, err)
	require.NoError(t, f.FailQP(ca.DCI().QPN()))
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	err = ca.Write(bg, channel.WriteRequest{Local: a.sge(0, 8), Remote: channel.At(region, 0)})
	requireEventFailure(t, err, ctx.EventQPFatal)
	require.ErrorIs(t, recv.Wait(bg), monocq.ErrFlushed)
	require.Equal(t, ctx.EventQPFatal, evA.wait(t, 1)[0])
	na, nb := reestablish(t, ca, cb)
	exchange(t, a, b, na, nb, "DC after")
}

// TestOwnFailNotExplainedByLaterEvent: the flushes of the user's own Fail
// are the user's doing, on DC as on RC: an event that arrives afterwards
// (the port going down) is not reported as their cause.
func TestOwnFailNotExplainedByLaterEvent(t *testing.T) {
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		t.Run(tr.String(), func(t *testing.T) {
			f := newFabric(t, 2)
			a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
			var evA events
			ca, cb := pairWith(t, a, b, channel.Options{Transport: tr, OnEvent: evA.on}, channel.Options{Transport: tr})
			require.NoError(t, cb.Close())
			send, err := ca.PostSend(channel.SendRequest{Local: a.sge(1024, 8)})
			require.NoError(t, err)
			require.NoError(t, ca.Fail())
			require.True(t, send.Done())
			require.NoError(t, f.SetPortState("sim0", 1, false))
			require.Equal(t, ctx.EventPortError, evA.wait(t, 1)[0])
			err = send.Wait(bg)
			require.ErrorIs(t, err, monocq.ErrFlushed)
			require.NotErrorIs(t, err, channel.ErrAsyncEvent, "the user's Fail flushed it")
		})
	}
}

// TestRoomWaitEventDropsFlushes: an event that ends the channel and
// flushes nothing itself (the port going down) while a blocking call waits
// for room in its full queue fails the call with the event's error, as it
// does during the wait for completions: the flushes of the call's earlier
// requests, which the channel's failure caused, are not among the call's
// errors either way.
func TestRoomWaitEventDropsFlushes(t *testing.T) {
	for _, posted := range []string{"waiting for room", "waiting for completions"} {
		t.Run(posted, func(t *testing.T) {
			f := newFabric(t, 2)
			a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
			var evA events
			ca, _ := pairWith(t, a, b, channel.Options{OnEvent: evA.on, RecvDepth: 4}, channel.Options{})
			n := 4 // as many receives as the queue holds: all posted
			if posted == "waiting for room" {
				n = 8 // the fifth waits for room
			}
			reqs := make([]channel.RecvRequest, n)
			for i := range reqs {
				reqs[i] = channel.RecvRequest{Local: a.sge(64*i, 64)}
			}
			go func() {
				time.Sleep(50 * time.Millisecond)
				_ = f.SetPortState("sim0", 1, false)
			}()
			err := ca.GatherReceive(bg, reqs, nil)
			requireEventFailure(t, err, ctx.EventPortError)
			require.NotErrorIs(t, err, monocq.ErrFlushed, "the failure's own flushes are not the call's errors: %v", err)
			require.Zero(t, ca.Outstanding())
		})
	}
}
