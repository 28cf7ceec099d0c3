package ctx_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/sim"
)

// eventLog collects the events a subscriber receives.
type eventLog struct {
	mu  sync.Mutex
	evs []ctx.AsyncEvent
}

func (l *eventLog) add(ev ctx.AsyncEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, ev)
}

func (l *eventLog) types() []ctx.AsyncEventType {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []ctx.AsyncEventType
	for _, ev := range l.evs {
		out = append(out, ev.Type)
	}
	return out
}

// TestEventRouterRoutes: each event of the software HCA reaches the
// subscribers that name its QP, CQ, port or the device, in order, and no
// other; a cancelled subscription gets nothing more.
func TestEventRouterRoutes(t *testing.T) {
	f := sim.New(sim.Options{})
	defer f.Close()
	c, err := f.Open("sim0")
	require.NoError(t, err)
	defer c.Close()
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8})
	require.NoError(t, err)
	cq2, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8})
	require.NoError(t, err)
	qp, err := pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 4, RecvDepth: 4}})
	require.NoError(t, err)

	r, err := c.EventRouter()
	require.NoError(t, err)
	r2, err := c.EventRouter()
	require.NoError(t, err)
	require.Same(t, r, r2, "one router per Context")
	_, err = r.Subscribe(ctx.EventFilter{}, nil)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)

	var onQP, onCQ, onPort, onDevice, all eventLog
	subQP, err := r.Subscribe(ctx.EventFilter{QPNs: []uint32{qp.QPN()}}, onQP.add)
	require.NoError(t, err)
	_, err = r.Subscribe(ctx.EventFilter{CQNs: []uint32{cq2.CQN()}}, onCQ.add)
	require.NoError(t, err)
	_, err = r.Subscribe(ctx.EventFilter{Ports: []uint8{1}}, onPort.add)
	require.NoError(t, err)
	_, err = r.Subscribe(ctx.EventFilter{Device: true}, onDevice.add)
	require.NoError(t, err)
	_, err = r.Subscribe(ctx.EventFilter{All: true}, all.add)
	require.NoError(t, err)

	require.NoError(t, f.FailQP(qp.QPN()))
	require.NoError(t, f.FailCQ(cq2.CQN()))
	require.NoError(t, f.SetPortState("sim0", 1, false))
	require.NoError(t, f.SetPortState("sim0", 1, true))
	require.NoError(t, f.FailDevice("sim0"))
	want := []ctx.AsyncEventType{ctx.EventQPFatal, ctx.EventCQError, ctx.EventPortError, ctx.EventPortActive, ctx.EventDeviceFatal}
	require.Eventually(t, func() bool { return len(all.types()) == len(want) }, 5*time.Second, time.Millisecond)
	require.Equal(t, want, all.types())
	require.Equal(t, []ctx.AsyncEventType{ctx.EventQPFatal}, onQP.types())
	require.Equal(t, []ctx.AsyncEventType{ctx.EventCQError}, onCQ.types())
	require.Equal(t, []ctx.AsyncEventType{ctx.EventPortError, ctx.EventPortActive}, onPort.types())
	require.Equal(t, []ctx.AsyncEventType{ctx.EventDeviceFatal}, onDevice.types())
	_, ok, err := provider.ReadAsyncEvent(c)
	require.NoError(t, err)
	require.False(t, ok, "the router consumed every event")

	subQP.Cancel()
	subQP.Cancel()
	require.NoError(t, f.RecoverDevice("sim0"))
	require.NoError(t, f.FailQP(qp.QPN())) // in error already: no event
	require.NoError(t, f.SetPortState("sim0", 1, false))
	require.Eventually(t, func() bool { return len(all.types()) == len(want)+1 }, 5*time.Second, time.Millisecond)
	require.Equal(t, []ctx.AsyncEventType{ctx.EventQPFatal}, onQP.types())
	require.NoError(t, r.Err())

	require.NoError(t, c.Close())
	select {
	case <-r.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the router did not stop with its Context")
	}
	_, err = c.EventRouter()
	require.ErrorIs(t, err, ctx.ErrClosed)
}

// TestEventRouterUnrouted counts the events no subscriber selected.
func TestEventRouterUnrouted(t *testing.T) {
	f := sim.New(sim.Options{})
	defer f.Close()
	c, err := f.Open("sim0")
	require.NoError(t, err)
	defer c.Close()
	r, err := c.EventRouter()
	require.NoError(t, err)
	var l eventLog
	_, err = r.Subscribe(ctx.EventFilter{Ports: []uint8{2}}, l.add)
	require.NoError(t, err)
	require.NoError(t, f.SetPortState("", 1, false))
	require.Eventually(t, func() bool { return r.Unrouted() == 1 }, 5*time.Second, time.Millisecond)
	require.Empty(t, l.types())
}

// EventRouter of a nil or zero Context (not made by Open) is refused with
// ErrInvalidArgument, as its other calls that reach the device are; it
// panicked on the nil tree, after storing a router for the Context.
func TestEventRouterOfZeroContext(t *testing.T) {
	var zero ctx.Context
	for name, c := range map[string]*ctx.Context{"nil": nil, "zero": &zero} {
		r, err := c.EventRouter()
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
		var oe *ctx.OpError
		require.ErrorAs(t, err, &oe, name)
		require.Equal(t, "event router", oe.Op, name)
		require.Nil(t, r, name)
	}
}

// Subscribe on the router of a closed Context, which reads no more
// events, is refused with ErrClosed, as Flush is; it returned a
// subscription that was never called.
func TestSubscribeAfterContextClose(t *testing.T) {
	_, c := openFake(t)
	r, err := c.EventRouter()
	require.NoError(t, err)
	require.NoError(t, c.Close())
	<-r.Done()
	s, err := r.Subscribe(ctx.EventFilter{All: true}, func(ctx.AsyncEvent) {})
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.Nil(t, s)
	require.ErrorIs(t, r.Flush(), ctx.ErrClosed)
}

// TestZeroEventRouter: an EventRouter or EventSubscription not made by
// this package (a zero value) routes nothing: Flush and Subscribe refuse
// the router with ErrInvalidArgument, its Done channel is closed (it never
// runs), and Cancel of a zero or nil subscription does nothing. Flush and
// Cancel panicked, Done blocked its receiver for good, and Subscribe
// returned a subscription that was never called.
func TestZeroEventRouter(t *testing.T) {
	var r ctx.EventRouter
	require.NotPanics(t, func() {
		require.ErrorIs(t, r.Flush(), ctx.ErrInvalidArgument)
		s, err := r.Subscribe(ctx.EventFilter{All: true}, func(ctx.AsyncEvent) {})
		require.ErrorIs(t, err, ctx.ErrInvalidArgument)
		require.Nil(t, s)
		select {
		case <-r.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the Done channel of a zero router is not closed")
		}
		require.NoError(t, r.Err())
		require.Zero(t, r.Unrouted())
		new(ctx.EventSubscription).Cancel()
		(*ctx.EventSubscription)(nil).Cancel()
	})
}
