package channel_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// prompt bounds how long a call may take to return once its context ended
// (with the flush), generous for a loaded machine and the race detector,
// and well below the transport retries (about half a second) that would
// end a wait on a vanished peer by themselves.
const prompt = 400 * time.Millisecond

// fill sets b to a pattern no transfer of these tests writes.
func fill(b []byte) {
	for i := range b {
		b[i] = 0xA5
	}
}

func intact(t *testing.T, b []byte, what string) {
	t.Helper()
	require.Equal(t, bytes.Repeat([]byte{0xA5}, len(b)), b, what)
}

// requireEnded checks the error of a call whose context ended: it wraps
// the context's error and ErrFailed, and names the operation.
func requireEnded(t *testing.T, err error, cause error, op string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, cause)
	require.ErrorIs(t, err, channel.ErrFailed)
	require.Contains(t, err.Error(), op)
}

// sendLate has the peer send 64 bytes of 0x11 after the receiver gave up;
// the send must not land.
func sendLate(t *testing.T, cb *channel.Channel, b *host) {
	t.Helper()
	copy(b.bytes()[:64], bytes.Repeat([]byte{0x11}, 64))
	c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := cb.Send(c, channel.SendRequest{Local: b.sge(0, 64)})
	require.Error(t, err, "a send to a failed queue pair must not complete")
}

func testReceiveEnds(t *testing.T, opts channel.Options, deadline bool) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, cb := pair(t, a, b, opts)
	var c context.Context
	var cancel context.CancelFunc
	cause := context.Canceled
	if deadline {
		c, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
		cause = context.DeadlineExceeded
	} else {
		c, cancel = context.WithCancel(context.Background())
		time.AfterFunc(30*time.Millisecond, cancel)
	}
	defer cancel()
	start := time.Now()
	_, err := ca.Receive(c, channel.RecvRequest{Local: a.sge(0, 64)})
	requireEnded(t, err, cause, "receive")
	require.Less(t, time.Since(start), 30*time.Millisecond+prompt)
	require.Zero(t, ca.Outstanding(), "the receive was flushed (or its queue destroyed) before the call returned")

	buf := a.bytes()[:64]
	fill(buf)
	sendLate(t, cb, b)
	time.Sleep(10 * time.Millisecond)
	intact(t, buf, "receive buffer after a cancelled receive")

	err = ca.Send(context.Background(), channel.SendRequest{Local: a.sge(128, 8)})
	require.Error(t, err)
	require.True(t, errors.Is(err, channel.ErrFailed) || errors.Is(err, ctx.ErrClosed), "%v", err)
}

func TestReceiveContextCancelRC(t *testing.T)   { testReceiveEnds(t, channel.Options{}, false) }
func TestReceiveContextDeadlineRC(t *testing.T) { testReceiveEnds(t, channel.Options{}, true) }
func TestReceiveContextCancelEvents(t *testing.T) {
	testReceiveEnds(t, channel.Options{Events: true}, false)
}
func TestReceiveContextDeadlineEvents(t *testing.T) {
	testReceiveEnds(t, channel.Options{Events: true}, true)
}
func TestReceiveContextCancelDC(t *testing.T) {
	testReceiveEnds(t, channel.Options{Transport: endpoint.TransportDC}, false)
}
func TestReceiveContextDeadlineDC(t *testing.T) {
	testReceiveEnds(t, channel.Options{Transport: endpoint.TransportDC}, true)
}

// A READ queued behind a SEND that the peer leaves waiting (no receive
// posted: RNR, retried forever) would execute as soon as the peer posts
// one. Its deadline fails the channel, so the late receive lets nothing
// through.
func TestReadContextDeadlineNoLateWrite(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, cb := pair(t, a, b, channel.Options{})
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	copy(b.bytes()[4096:4096+64], bytes.Repeat([]byte{0x22}, 64))

	send, err := ca.PostSend(channel.SendRequest{Local: a.sge(0, 8)})
	require.NoError(t, err)
	c, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = ca.Read(c, channel.ReadRequest{Local: a.sge(1024, 64), Remote: channel.At(region, 4096)})
	requireEnded(t, err, context.DeadlineExceeded, "read")
	require.Less(t, time.Since(start), 30*time.Millisecond+prompt)
	require.True(t, send.Done(), "the SEND ahead of the READ was flushed too")
	requireFlushed(t, send)
	require.ErrorIs(t, send.Wait(context.Background()), monocq.ErrFlushed)

	buf := a.bytes()[1024 : 1024+64]
	fill(buf)
	_, err = cb.PostReceive(channel.RecvRequest{Local: b.sge(0, 64)})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	cb.Poll()
	intact(t, buf, "read buffer after a READ whose deadline passed")
}

// requireFlushed checks that p completed with a flush error.
func requireFlushed(t *testing.T, p channel.Pending) {
	t.Helper()
	r, ok := p.Result()
	require.True(t, ok)
	var pe *channel.PeerError
	require.ErrorAs(t, r.Err, &pe)
	require.ErrorIs(t, pe.Err, monocq.ErrFlushed)
}

// Every blocking call to a peer whose queue pair is gone waits for an
// answer that never comes (until the transport's retries run out); its
// context ends the wait.
func TestBlockingCallsToAVanishedPeer(t *testing.T) {
	calls := []struct {
		op   string
		call func(c context.Context, ca *channel.Channel, a *host, remote channel.Remote) error
	}{
		{"read", func(c context.Context, ca *channel.Channel, a *host, remote channel.Remote) error {
			return ca.Read(c, channel.ReadRequest{Local: a.sge(0, 64), Remote: remote})
		}},
		{"write", func(c context.Context, ca *channel.Channel, a *host, remote channel.Remote) error {
			return ca.Write(c, channel.WriteRequest{Local: a.sge(0, 64), Remote: remote})
		}},
		{"send", func(c context.Context, ca *channel.Channel, a *host, _ channel.Remote) error {
			return ca.Send(c, channel.SendRequest{Local: a.sge(0, 64)})
		}},
		{"compare-and-swap", func(c context.Context, ca *channel.Channel, a *host, remote channel.Remote) error {
			return ca.CompareSwap(c, channel.CompareSwapRequest{Remote: remote, Swap: 1, Result: channel.Slice(a.mr, 0, 8)})
		}},
		{"fetch-and-add", func(c context.Context, ca *channel.Channel, a *host, remote channel.Remote) error {
			return ca.FetchAdd(c, channel.FetchAddRequest{Remote: remote, Add: 1, Result: channel.Slice(a.mr, 0, 8)})
		}},
		{"gather read", func(c context.Context, ca *channel.Channel, a *host, remote channel.Remote) error {
			return ca.MultiChannel.GatherRead(c, []channel.ReadRequest{{Local: a.sge(0, 64), Remote: remote}})
		}},
		{"scope", func(c context.Context, ca *channel.Channel, a *host, remote channel.Remote) error {
			return ca.Scope(c, func(s *channel.Scope) error {
				_, err := s.PostRead(channel.ReadRequest{Local: a.sge(0, 64), Remote: remote})
				return err
			})
		}},
	}
	for _, tc := range calls {
		t.Run(tc.op, func(t *testing.T) {
			f := newFabric(t, 2)
			a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
			ca, cb := pair(t, a, b, channel.Options{})
			region, err := ca.RemoteRegion(0, 0)
			require.NoError(t, err)
			require.NoError(t, cb.Close())
			c, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
			defer cancel()
			start := time.Now()
			err = tc.call(c, ca, a, channel.At(region, 0))
			requireEnded(t, err, context.DeadlineExceeded, tc.op)
			require.Less(t, time.Since(start), 30*time.Millisecond+prompt)
			require.Zero(t, ca.Outstanding())
		})
	}
}

// A context that has ended before the call posts nothing: the call returns
// its error at once and the channel stays as it was.
func TestContextEndedBeforeTheCall(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, cb := pair(t, a, b, channel.Options{})
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	remote := channel.At(region, 0)
	c, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := ca.Receive(c, channel.RecvRequest{Local: a.sge(0, 64)})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, err, res.Err)
	for op, err := range map[string]error{
		"receive":          err,
		"send":             ca.Send(c, channel.SendRequest{Local: a.sge(0, 8)}),
		"write":            ca.Write(c, channel.WriteRequest{Local: a.sge(0, 8), Remote: remote}),
		"read":             ca.Read(c, channel.ReadRequest{Local: a.sge(0, 8), Remote: remote}),
		"compare-and-swap": ca.CompareSwap(c, channel.CompareSwapRequest{Remote: remote, Result: channel.Slice(a.mr, 0, 8)}),
		"fetch-and-add":    ca.FetchAdd(c, channel.FetchAddRequest{Remote: remote, Result: channel.Slice(a.mr, 0, 8)}),
		"scatter send":     ca.MultiChannel.ScatterSend(c, []channel.SendRequest{{Local: a.sge(0, 8)}}),
		"scatter write":    ca.MultiChannel.ScatterWrite(c, []channel.WriteRequest{{Local: a.sge(0, 8), Remote: remote}}),
		"gather receive":   ca.MultiChannel.GatherReceive(c, []channel.RecvRequest{{Local: a.sge(0, 8)}}, nil),
		"gather read":      ca.MultiChannel.GatherRead(c, []channel.ReadRequest{{Local: a.sge(0, 8), Remote: remote}}),
		"multicast send":   ca.MultiChannel.MulticastSend(c, []int{0}, channel.SendRequest{Local: a.sge(0, 8)}),
		"scope": ca.Scope(c, func(*channel.Scope) error {
			t.Error("fn ran under an ended context")
			return nil
		}),
	} {
		require.ErrorIs(t, err, context.Canceled, op)
		require.NotErrorIs(t, err, channel.ErrFailed, op)
		require.Contains(t, err.Error(), "channel: "+op+": ", op)
	}
	require.Zero(t, ca.Outstanding(), "nothing was posted")

	// The channel still works.
	copy(b.bytes()[:5], "later")
	p, err := ca.PostReceive(channel.RecvRequest{Local: a.sge(0, 64)})
	require.NoError(t, err)
	require.NoError(t, cb.Send(context.Background(), channel.SendRequest{Local: b.sge(0, 5)}))
	require.NoError(t, p.Wait(context.Background()))
	require.Equal(t, "later", string(a.bytes()[:5]))
}

// Pending.Wait gives up without touching the request: it stays
// outstanding and completes later; Fail then flushes whatever is left.
func TestPendingWaitContext(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, cb := pair(t, a, b, channel.Options{})

	p, err := ca.PostReceive(channel.RecvRequest{Local: a.sge(0, 64)})
	require.NoError(t, err)
	c, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = p.Wait(c)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, channel.ErrFailed)
	require.Contains(t, err.Error(), "wait for work request")
	require.False(t, p.Done())
	require.Equal(t, 1, ca.Outstanding())

	copy(b.bytes()[:64], bytes.Repeat([]byte{0x33}, 64))
	require.NoError(t, cb.Send(context.Background(), channel.SendRequest{Local: b.sge(0, 64)}))
	require.NoError(t, p.Wait(context.Background()), "the receive is still live after Wait gave up")
	require.Equal(t, bytes.Repeat([]byte{0x33}, 64), a.bytes()[:64])

	// Gave up again, then Fail: the buffer is the caller's once it returns.
	p, err = ca.PostReceive(channel.RecvRequest{Local: a.sge(0, 64)})
	require.NoError(t, err)
	c2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	require.ErrorIs(t, p.Wait(c2), context.Canceled)
	require.NoError(t, ca.Fail())
	require.NoError(t, ca.Fail(), "Fail again: nothing left to flush")
	require.True(t, p.Done())
	requireFlushed(t, p)
	buf := a.bytes()[:64]
	fill(buf)
	sendLate(t, cb, b)
	intact(t, buf, "receive buffer after Fail")
	_, err = ca.PostReceive(channel.RecvRequest{Local: a.sge(0, 64)})
	require.ErrorIs(t, err, channel.ErrFailed)
}

// A scope's context also bounds the wait for room in a full receive
// queue, and the wait for its completions; the receives it posted are
// flushed.
func TestScopeContextFullQueue(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, cb := pair(t, a, b, channel.Options{RecvDepth: 4})
	reqs := make([]channel.RecvRequest, 64)
	for j := range reqs {
		reqs[j] = channel.RecvRequest{Local: a.sge(j*64, 64)}
	}
	c, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	var posted error
	err := ca.Scope(c, func(s *channel.Scope) error {
		posted = s.PostGatherReceive(reqs)
		return posted
	})
	require.ErrorIs(t, posted, context.DeadlineExceeded, "the wait for room ended with the context")
	requireEnded(t, err, context.DeadlineExceeded, "scope")
	require.Less(t, time.Since(start), 30*time.Millisecond+prompt)
	require.Zero(t, ca.Outstanding())
	buf := a.bytes()[:64*len(reqs)]
	fill(buf)
	sendLate(t, cb, b)
	intact(t, buf, "receive buffers of the scope")
}
