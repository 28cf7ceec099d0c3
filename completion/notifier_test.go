package completion_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

type eventCQ struct {
	fabric *sim.Fabric
	cq     *ctx.CompletionQueue
	poll   *monocq.CQ
}

func newEventCQ(t *testing.T, depth uint32, events bool) eventCQ {
	t.Helper()
	f := sim.New(sim.Options{Mode: sim.Engine, IdleSleep: 50 * time.Microsecond})
	c, err := f.Open("")
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(); _ = f.Close() })
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: depth, EventChannel: events})
	require.NoError(t, err)
	d := provider.CQDescriptor(cq)
	p, err := monocq.New(monocq.Config{Buf: d.Buf, CQECnt: d.CQECnt, CQESize: d.CQESize, DBRec: d.DBRec, UAR: d.UAR, CQN: d.CQN})
	require.NoError(t, err)
	return eventCQ{fabric: f, cq: cq, poll: p}
}

// reqCQE is a requester CQE image for QPN qpn with wqe_counter counter.
func reqCQE(qpn uint32, counter uint16) [64]byte {
	var c [64]byte
	binary.BigEndian.PutUint32(c[56:], uint32(prm.OpSend)<<24|qpn)
	binary.BigEndian.PutUint16(c[60:], counter)
	c[63] = uint8(prm.CQEReq) << 4
	return c
}

func TestNotifierNeedsEventChannel(t *testing.T) {
	e := newEventCQ(t, 8, false)
	_, err := completion.NewNotifier(e.cq, e.poll)
	require.ErrorIs(t, err, completion.ErrNoEventChannel)
	_, err = completion.NewNotifier(nil, e.poll)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)

	// A CQ of another device with the same number: another ring, refused
	// (its events would never come for the ring polled).
	other := newEventCQ(t, 8, true)
	require.Equal(t, other.cq.CQN(), e.poll.CQN(), "each fabric numbers its CQs from the same start")
	_, err = completion.NewNotifier(other.cq, e.poll)
	require.ErrorIs(t, err, completion.ErrMismatch)
	// A CQ of the same device with another number.
	third, err := e.cq.Context().CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8, EventChannel: true})
	require.NoError(t, err)
	_, err = completion.NewNotifier(third, e.poll)
	require.ErrorIs(t, err, completion.ErrMismatch)
}

func TestNotifierTimeoutAndCancel(t *testing.T) {
	e := newEventCQ(t, 8, true)
	n, err := completion.NewNotifier(e.cq, e.poll)
	require.NoError(t, err)
	defer n.Close()

	start := time.Now()
	err = n.WaitTimeout(30 * time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)

	c, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	err = n.Wait(c)
	require.ErrorIs(t, err, context.Canceled)

	// A context already done fails at once.
	err = n.Wait(c)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, n.Events())
	require.Equal(t, uint64(2), n.Sleeps(), "the timeout and the cancellation slept; the done context did not")
}

func TestNotifierWakesOnCompletion(t *testing.T) {
	e := newEventCQ(t, 8, true)
	n, err := completion.NewNotifier(e.cq, e.poll)
	require.NoError(t, err)
	defer n.Close()

	for round := range 5 {
		go func() {
			time.Sleep(5 * time.Millisecond)
			_ = e.fabric.InjectCQE(e.cq.CQN(), reqCQE(0x100, uint16(round)))
		}()
		require.NoError(t, n.WaitTimeout(5*time.Second), "round %d", round)
		var seen []uint16
		e.poll.Poll(8, func(c *monocq.CQE) { seen = append(seen, c.WQECounter()) })
		require.Equal(t, []uint16{uint16(round)}, seen)
	}
	require.NotZero(t, n.Events(), "at least one wake-up came from an event")
	require.GreaterOrEqual(t, n.Sleeps(), n.Events(), "every event consumed ended a sleep")
	require.NoError(t, n.Close())
	require.NoError(t, n.Close())
}

func TestNotifierReadyCQEReturnsAtOnce(t *testing.T) {
	e := newEventCQ(t, 8, true)
	n, err := completion.NewNotifier(e.cq, e.poll)
	require.NoError(t, err)
	defer n.Close()
	require.NoError(t, e.fabric.InjectCQE(e.cq.CQN(), reqCQE(0x100, 1)))
	require.NoError(t, n.WaitTimeout(time.Second))
	require.Equal(t, 1, e.poll.Ready(8))
}

// TestEventAndBusyPollSeeTheSame feeds the same stream of completions, with
// pauses, to two CQs: one drained by a busy-polling loop and one by the
// event iterator, and compares what each consumer saw.
func TestEventAndBusyPollSeeTheSame(t *testing.T) {
	const total = 300
	// Rings larger than the stream: injecting into a full CQ would move it
	// to error, as a device does on overrun.
	busy := newEventCQ(t, 512, false)
	ev := newEventCQ(t, 512, true)
	n, err := completion.NewNotifier(ev.cq, ev.poll)
	require.NoError(t, err)
	defer n.Close()

	type rec struct {
		qpn     uint32
		counter uint16
		failed  bool
		synd    prm.Syndrome
	}
	stream := make([][64]byte, total)
	for i := range stream {
		stream[i] = reqCQE(0x100+uint32(i%3), uint16(i))
		if i%37 == 5 {
			stream[i][55] = uint8(prm.SyndromeRemoteAccess)
			stream[i][63] = uint8(prm.CQEReqErr) << 4
		}
	}
	feed := func(e eventCQ) {
		for i := 0; i < total; {
			if err := e.fabric.InjectCQE(e.cq.CQN(), stream[i]); err != nil {
				panic(err)
			}
			i++
			if i%25 == 0 {
				time.Sleep(2 * time.Millisecond)
			}
		}
	}
	// Both consumers run while the streams are fed, so the event consumer
	// really sleeps through the pauses.
	var gotEvent []rec
	var iterErr error
	evDone := make(chan struct{})
	go func() {
		defer close(evDone)
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for cqe, err := range completion.Completions(c, n, ev.poll) {
			if cqe == nil {
				iterErr = err
				return
			}
			r := rec{qpn: cqe.QPN(), counter: cqe.WQECounter()}
			if err != nil {
				var ce *monocq.CompletionError
				if errors.As(err, &ce) {
					r.failed, r.synd = true, ce.Syndrome
				}
			}
			gotEvent = append(gotEvent, r)
			if len(gotEvent) == total {
				return
			}
		}
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); feed(busy) }()
	go func() { defer wg.Done(); feed(ev) }()

	var gotBusy []rec
	deadline := time.Now().Add(20 * time.Second)
	for len(gotBusy) < total && time.Now().Before(deadline) {
		busy.poll.Poll(8, func(c *monocq.CQE) {
			r := rec{qpn: c.QPN(), counter: c.WQECounter()}
			if err := c.Err(); err != nil {
				r.failed, r.synd = true, c.Syndrome()
			}
			gotBusy = append(gotBusy, r)
		})
	}
	<-evDone
	require.NoError(t, iterErr)
	wg.Wait()
	require.Len(t, gotBusy, total)
	require.Equal(t, gotBusy, gotEvent)
	failures := 0
	for i, r := range gotEvent {
		require.Equal(t, uint16(i), r.counter)
		if r.failed {
			failures++
			require.Equal(t, prm.SyndromeRemoteAccess, r.synd)
		}
	}
	require.Equal(t, (total-5+36)/37, failures)
	require.NotZero(t, n.Events(), "the event consumer slept at least once")
	t.Logf("events consumed: %d for %d completions", n.Events(), total)
}

func TestCompletionsEndsWithContextError(t *testing.T) {
	e := newEventCQ(t, 8, true)
	n, err := completion.NewNotifier(e.cq, e.poll)
	require.NoError(t, err)
	defer n.Close()
	require.NoError(t, e.fabric.InjectCQE(e.cq.CQN(), reqCQE(0x100, 1)))
	c, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var cqes int
	var last error
	for cqe, err := range completion.Completions(c, n, e.poll) {
		if cqe != nil {
			cqes++
			continue
		}
		last = err
	}
	require.Equal(t, 1, cqes)
	require.ErrorIs(t, last, context.DeadlineExceeded)
}

// rcPair is two connected RC queue pairs on a software HCA in engine mode;
// a's CQ has an event channel, b exposes a registered buffer.
type rcPair struct {
	cqA  *ctx.CompletionQueue
	a, b *rc.QP
	mr   *ctx.MemoryRegion
}

func newRCPair(t *testing.T, sendDepth uint32) rcPair {
	t.Helper()
	f := sim.New(sim.Options{Mode: sim.Engine, IdleSleep: 50 * time.Microsecond})
	dev, err := f.Open("")
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close(); _ = f.Close() })
	pd, err := dev.AllocProtectionDomain()
	require.NoError(t, err)
	cqA, err := dev.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64, EventChannel: true})
	require.NoError(t, err)
	cqB, err := dev.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64})
	require.NoError(t, err)
	a, err := rc.New(pd, cqA, rc.Config{SendDepth: sendDepth, MaxInline: 64})
	require.NoError(t, err)
	b, err := rc.New(pd, cqB, rc.Config{SendDepth: sendDepth, RecvDepth: 8})
	require.NoError(t, err)
	require.NoError(t, a.Connect(b.Endpoint()))
	require.NoError(t, b.Connect(a.Endpoint()))
	buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite)
	require.NoError(t, err)
	return rcPair{cqA: cqA, a: a, b: b, mr: mr}
}

// TestCompletionsRetireWorkRequests runs the event loop the guide shows
// over an transport.Poller: every completion the iterator yields has retired its
// work request, so a send queue of 8 takes 40 signaled writes, each posted
// from the loop body when the previous one completed.
func TestCompletionsRetireWorkRequests(t *testing.T) {
	const depth, total = 8, 40
	p := newRCPair(t, depth)
	poller, err := transport.NewPoller(p.cqA)
	require.NoError(t, err)
	require.NoError(t, poller.Add(p.a))
	n, err := completion.NewNotifier(p.cqA, poller.CQ())
	require.NoError(t, err)
	defer n.Close()

	post := func(i int) error {
		st, err := p.a.Post(uint64(i), wqebuilder.Signaled)
		if err != nil {
			return err
		}
		return st.RdmaWrite(uint64(p.mr.Addr())+uint64(i), p.mr.RKey()).Inline([]byte{byte(i + 1)}).FinishBlueFlame()
	}
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, post(0))
	seen := 0
	for wc, err := range completion.Completions(c, n, poller) {
		require.NoError(t, err)
		require.Equal(t, uint64(seen), wc.WRID)
		require.Same(t, &p.a.Queue, wc.Queue)
		seen++
		if seen == total {
			break
		}
		require.NoError(t, post(seen), "post %d on a send queue of %d", seen, depth)
	}
	require.Equal(t, total, seen)
	for i := range total {
		require.Equal(t, byte(i+1), p.mr.Bytes()[i])
	}
}

// TestCompletionsLeavesTheRestInTheRing: breaking out of the loop leaves
// the completions it did not reach to the next loop.
func TestCompletionsLeavesTheRestInTheRing(t *testing.T) {
	p := newRCPair(t, 8)
	poller, err := transport.NewPoller(p.cqA)
	require.NoError(t, err)
	require.NoError(t, poller.Add(p.a))
	n, err := completion.NewNotifier(p.cqA, poller.CQ())
	require.NoError(t, err)
	defer n.Close()
	for i := range 3 {
		st, err := p.a.Post(uint64(i), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, st.RdmaWrite(uint64(p.mr.Addr()), p.mr.RKey()).Inline([]byte{1}).FinishBlueFlame())
	}
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []uint64
	for round := 0; round < 3; round++ {
		for wc, err := range completion.Completions(c, n, poller) {
			require.NoError(t, err)
			got = append(got, wc.WRID)
			break
		}
	}
	require.Equal(t, []uint64{0, 1, 2}, got)
}

// TestCompletionsRefusesAnotherRing: the poller must poll the Notifier's
// CQ; a closed CQ ends the loop with ctx.ErrClosed.
func TestCompletionsRefusesAnotherRing(t *testing.T) {
	e := newEventCQ(t, 8, true)
	other := newEventCQ(t, 8, true)
	n, err := completion.NewNotifier(e.cq, e.poll)
	require.NoError(t, err)
	defer n.Close()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for cqe, err := range completion.Completions(c, n, other.poll) {
		require.Nil(t, cqe)
		require.ErrorIs(t, err, completion.ErrMismatch)
	}
	require.NoError(t, e.cq.Close())
	for cqe, err := range completion.Completions(c, n, e.poll) {
		require.Nil(t, cqe)
		require.ErrorIs(t, err, ctx.ErrClosed)
	}
}

// TestZeroNotifier: Wait and WaitTimeout on a Notifier not made by
// NewNotifier return an error wrapping ctx.ErrInvalidArgument at once; they
// panicked.
func TestZeroNotifier(t *testing.T) {
	var n completion.Notifier
	require.NotPanics(t, func() {
		require.ErrorIs(t, n.Wait(context.Background()), ctx.ErrInvalidArgument)
		require.ErrorIs(t, n.WaitTimeout(time.Second), ctx.ErrInvalidArgument)
		require.NoError(t, n.Close())
	})
}

// TestWaitReportsCorruptRing: a ring whose poller stopped at a corrupt
// CQE (monocq.ErrCorrupt) never has a CQE ready again; Wait returns its
// error at once instead of sleeping until the context ends, and
// Completions yields it.
func TestWaitReportsCorruptRing(t *testing.T) {
	e := newEventCQ(t, 8, true)
	n, err := completion.NewNotifier(e.cq, e.poll)
	require.NoError(t, err)
	defer n.Close()
	bad := reqCQE(0x100, 1)
	bad[63] |= prm.CQEFormatScatter64 << prm.CQEFormatShift // in a ring of 64-byte CQEs
	require.NoError(t, e.fabric.InjectCQE(e.cq.CQN(), bad))
	start := time.Now()
	err = n.WaitTimeout(5 * time.Second)
	require.ErrorIs(t, err, monocq.ErrCorrupt)
	require.Less(t, time.Since(start), 4*time.Second, "Wait slept on a stopped ring")
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for cqe, err := range completion.Completions(c, n, e.poll) {
		require.Nil(t, cqe)
		require.ErrorIs(t, err, monocq.ErrCorrupt)
	}
}
