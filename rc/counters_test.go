package rc_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// write posts an RDMA write of "ok" from x's side 0, finished by finish.
func write(t *testing.T, x *pair, wrid uint64, flags wqebuilder.Flags, rkey uint32, blueFlame bool) {
	t.Helper()
	s, err := x.qp[0].Post(wrid, flags)
	require.NoError(t, err)
	st := s.RdmaWrite(x.e.Addr(1, dstOff), rkey).Inline([]byte("ok"))
	if blueFlame {
		require.NoError(t, st.FinishBlueFlame())
	} else {
		require.NoError(t, st.Finish())
	}
}

func TestCountersCountPostsDoorbellsCompletionsAndErrors(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 64, RecvDepth: 64, MaxInline: 64})
	e := x.e
	// Before counting is enabled nothing is counted.
	write(t, x, 1, wqebuilder.Signaled, e.RKey(1), true)
	require.Len(t, e.Drain(x.p[0]), 1)
	require.False(t, x.qp[0].Counting())
	require.Equal(t, transport.QueueCounters{}, x.qp[0].Counters())
	require.Equal(t, transport.CQCounters{}, x.p[0].Counters())

	// Enabled after the queues were added to their Pollers.
	x.qp[0].EnableCounters()
	x.qp[1].EnableCounters()
	x.p[0].EnableCounters()
	require.True(t, x.qp[0].Counting())

	// One WQE alone with BlueFlame: copied.
	write(t, x, 2, wqebuilder.Signaled, e.RKey(1), true)
	// A batch of three and one doorbell.
	write(t, x, 3, 0, e.RKey(1), false)
	write(t, x, 4, 0, e.RKey(1), false)
	write(t, x, 5, wqebuilder.Signaled, e.RKey(1), false)
	x.qp[0].RingDoorbell()
	x.qp[0].RingDoorbell() // nothing to publish: not a doorbell
	require.Len(t, e.Drain(x.p[0]), 2)
	// A send into a posted receive, with BlueFlame.
	require.NoError(t, x.qp[1].PostRecv(70, e.Addr(1, 0), 64, e.LKey(1)))
	s, err := x.qp[0].Post(6, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.Send().Inline([]byte("hello")).FinishBlueFlame())
	require.Len(t, e.Drain(x.p[0], x.p[1]), 2)
	// A write with a bad rkey fails, the one after it flushes.
	write(t, x, 7, wqebuilder.Signaled, e.RKey(1)^0xff00, false)
	write(t, x, 8, wqebuilder.Signaled, e.RKey(1), false)
	x.qp[0].RingDoorbell()
	got := e.Drain(x.p[0])
	require.Len(t, got, 2)
	require.Equal(t, prm.SyndromeRemoteAccess, got[0].Syndrome)

	c := x.qp[0].Counters()
	require.Equal(t, uint64(7), c.Posts)
	require.Equal(t, uint64(2), c.BlueFlameCopies)
	require.Equal(t, uint64(2), c.Doorbells)
	require.Equal(t, uint64(5), c.SendCompletions)
	require.Zero(t, c.RecvCompletions)
	require.Equal(t, uint64(2), c.Errors.Total)
	require.Equal(t, uint64(1), c.Errors.Syndrome(prm.SyndromeRemoteAccess))
	require.Equal(t, uint64(1), c.Errors.Syndrome(prm.SyndromeWRFlush))
	require.Zero(t, c.Errors.Other())
	var seen []prm.Syndrome
	for s, n := range c.Errors.All {
		seen = append(seen, s)
		require.Equal(t, uint64(1), n)
	}
	require.Equal(t, []prm.Syndrome{prm.SyndromeWRFlush, prm.SyndromeRemoteAccess}, seen)
	js, err := c.Errors.MarshalJSON()
	require.NoError(t, err)
	require.JSONEq(t, `{"total":2,"WR_FLUSH_ERR":1,"REMOTE_ACCESS_ERR":1}`, string(js))
	require.True(t, c.RetriesCounted, "the model counts retries")

	r := x.qp[1].Counters()
	require.Equal(t, uint64(1), r.RecvCompletions)
	require.Zero(t, r.Posts)

	p := x.p[0].Counters()
	require.Equal(t, uint64(5), p.Completions)
	require.Equal(t, c.Errors, p.Errors)
	require.GreaterOrEqual(t, p.Polls, uint64(3))
	require.GreaterOrEqual(t, p.EmptyPolls, uint64(3), "each drain ends on an empty poll")
	require.Zero(t, p.UnknownQPN)
	// The receiving side's Poller does not count, its queue does.
	require.Equal(t, transport.CQCounters{}, x.p[1].Counters())

	require.Zero(t, testing.AllocsPerRun(100, func() {
		_ = x.qp[0].Counters()
		_ = x.p[0].Counters()
	}))
}

func TestCountersOutliveReset(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 64, RecvDepth: 64, MaxInline: 64})
	x.qp[0].EnableCounters()
	write(t, x, 1, wqebuilder.Signaled, x.e.RKey(1), true)
	require.Len(t, x.e.Drain(x.p[0]), 1)
	require.NoError(t, x.qp[0].Reset())
	require.NoError(t, x.qp[1].Reset())
	require.NoError(t, x.qp[0].Connect(x.qp[1].Endpoint()))
	require.NoError(t, x.qp[1].Connect(x.qp[0].Endpoint()))
	write(t, x, 2, wqebuilder.Signaled, x.e.RKey(1), true)
	require.Len(t, x.e.Drain(x.p[0]), 1)
	c := x.qp[0].Counters()
	require.Equal(t, uint64(2), c.Posts)
	require.Equal(t, uint64(2), c.BlueFlameCopies)
	require.Equal(t, uint64(2), c.SendCompletions)
}

func TestCountersRetries(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 64, RNRRetry: 3, MinRNRTimer: 1})
	x.qp[0].EnableCounters()
	s, err := x.qp[0].Post(1, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.Send().Inline([]byte("no receive posted")).FinishBlueFlame())
	requireSyndrome(t, x.e.One(x.p[0]), prm.CQEReqErr, prm.SyndromeRNRRetryExc)
	c := x.qp[0].Counters()
	require.True(t, c.RetriesCounted)
	require.Equal(t, x.e.Fabric.Stats().RNRNaks, c.RNRRetries)
	require.Equal(t, uint64(3), c.RNRRetries, "rnr_retry 3")
	require.Zero(t, c.TransportRetries)
	require.Equal(t, uint64(1), c.Errors.Syndrome(prm.SyndromeRNRRetryExc))

	y := newPair(t, rc.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 64, Timeout: 1, RetryCount: 2})
	y.qp[0].EnableCounters()
	require.NoError(t, y.qp[1].Close())
	write(t, y, 1, wqebuilder.Signaled, y.e.RKey(1), true)
	requireSyndrome(t, y.e.One(y.p[0]), prm.CQEReqErr, prm.SyndromeTransportRetryExc)
	c = y.qp[0].Counters()
	require.NotZero(t, c.TransportRetries)
	require.Equal(t, y.e.Fabric.Stats().Retries, c.TransportRetries)
	require.Zero(t, c.RNRRetries)
}

func TestPostAndPollWhileCountingAllocateNothing(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 64, RecvDepth: 64, MaxInline: 64})
	x.qp[0].EnableCounters()
	x.p[0].EnableCounters()
	n := 0
	round := func() {
		s, _ := x.qp[0].Post(1, wqebuilder.Signaled)
		_ = s.RdmaWrite(x.e.Addr(1, dstOff), x.e.RKey(1)).Inline([]byte("ok")).FinishBlueFlame()
		_ = x.e.Fabric.RunUntilIdle()
		n += x.p[0].Poll(16, func(c *transport.Completion) {})
	}
	round()
	require.Zero(t, testing.AllocsPerRun(100, round))
	require.Equal(t, uint64(n), x.qp[0].Counters().SendCompletions)
}

// TestCompletionTimestamps runs the model as a device (Engine mode) and
// requires the timestamps of a CQ created with Timestamps to be monotonic
// and, converted by the Context's Clock, inside the wall-clock window of
// the run; a CQ without them leaves Completion.Timestamp 0.
func TestCompletionTimestamps(t *testing.T) {
	e := transporttest.New(t, sim.Options{Mode: sim.Engine})
	x := &pair{e: e}
	for i := range 2 {
		cq, err := e.Ctx[i].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64, Timestamps: i == 0})
		require.NoError(t, err)
		x.cq[i] = cq
		x.p[i], err = transport.NewPoller(cq)
		require.NoError(t, err)
		x.qp[i], err = rc.New(e.PD[i], cq, rc.Config{SendDepth: 64, RecvDepth: 64, MaxInline: 64})
		require.NoError(t, err)
		require.NoError(t, x.p[i].Add(x.qp[i]))
	}
	require.NoError(t, x.qp[0].Connect(x.qp[1].Endpoint()))
	require.NoError(t, x.qp[1].Connect(x.qp[0].Endpoint()))
	require.True(t, x.p[0].Timestamps())
	require.False(t, x.p[1].Timestamps())
	clock, err := e.Ctx[0].Clock()
	require.NoError(t, err)
	require.Equal(t, uint64(sim.ClockMask), clock.Info().Mask)

	wait := func(p *transport.Poller) transport.Completion {
		t.Helper()
		var got transport.Completion
		deadline := time.Now().Add(10 * time.Second)
		for p.Poll(1, func(c *transport.Completion) { got = *c }) == 0 {
			require.True(t, time.Now().Before(deadline), "no completion")
			time.Sleep(10 * time.Microsecond)
		}
		require.Equal(t, transport.MatchOK, got.Match, "%+v", got)
		return got
	}
	before := time.Now()
	var stamps []uint64
	for i := range 20 {
		// A receive on side 0 and one on side 1, so that both CQs get a
		// completion of each kind.
		require.NoError(t, x.qp[0].PostRecv(uint64(i), e.Addr(0, 0), 64, e.LKey(0)))
		s, err := x.qp[1].Post(uint64(i), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.Send().Inline([]byte("tick")).FinishBlueFlame())
		stamps = append(stamps, wait(x.p[0]).Timestamp)
		require.Zero(t, wait(x.p[1]).Timestamp, "CQ without timestamps")
		write(t, x, uint64(i), wqebuilder.Signaled, e.RKey(1), true)
		stamps = append(stamps, wait(x.p[0]).Timestamp)
		time.Sleep(50 * time.Microsecond)
	}
	after := time.Now()
	res := clock.Resolution()
	for i, ts := range stamps {
		require.NotZero(t, ts)
		if i > 0 {
			require.GreaterOrEqual(t, ts, stamps[i-1], "timestamp %d goes back", i)
		}
		at := clock.ToTime(ts)
		require.False(t, at.Before(before.Add(-res)), "timestamp %d at %v, before the run began at %v", i, at, before)
		require.False(t, at.After(after.Add(res)), "timestamp %d at %v, after the run ended at %v", i, at, after)
	}
	require.Greater(t, stamps[len(stamps)-1], stamps[0], "the clock moved")

	// An error completion has its syndrome, and no timestamp: an error CQE
	// holds its syndromes where the timestamp would be.
	write(t, x, 99, wqebuilder.Signaled, e.RKey(1)^0x5a5a00, true)
	var got transport.Completion
	deadline := time.Now().Add(10 * time.Second)
	for x.p[0].Poll(1, func(c *transport.Completion) { got = *c }) == 0 {
		require.True(t, time.Now().Before(deadline), "no completion")
		time.Sleep(10 * time.Microsecond)
	}
	require.Equal(t, transport.MatchError, got.Match, "%+v", got)
	require.Equal(t, prm.SyndromeRemoteAccess, got.Syndrome, "%+v", got)
	require.Zero(t, got.Timestamp)

	// So has an error CQE the Poller cannot match (a queue pair it does
	// not route): its bytes 52..55, the syndromes, are not a timestamp.
	img := cqeImage(prm.CQEReqErr, 0xabcdef, 0, prm.SyndromeRemoteAccess)
	img[prm.CQETimestamp+4] = 0x5a // hw_err_synd, as a ConnectX may write
	require.NoError(t, e.Fabric.InjectCQE(x.cq[0].CQN(), img))
	require.Equal(t, 1, x.p[0].Poll(1, func(c *transport.Completion) { got = *c }))
	require.Equal(t, transport.MatchUnknownQPN, got.Match, "%+v", got)
	require.Zero(t, got.Timestamp, "%+v", got)
}
