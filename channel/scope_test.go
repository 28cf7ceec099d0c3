package channel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
)

func testScopeReportsFailedWork(t *testing.T, opts channel.Options) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	opts.WaitTimeout = 10 * time.Second
	ca, _ := pair(t, a, b, opts)
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	copy(a.bytes(), "good data")

	var good channel.Pending
	err = ca.Scope(context.Background(), func(s *channel.Scope) error {
		var err error
		good, err = s.PostWrite(channel.WriteRequest{Local: a.sge(0, 9), Remote: channel.At(region, 100)})
		if err != nil {
			return err
		}
		// The same write with an rkey the peer never handed out.
		bad := channel.At(region, 200)
		bad.RKey ^= 0x5a5a00
		_, err = s.PostWrite(channel.WriteRequest{Local: a.sge(0, 9), Remote: bad})
		return err
	})
	require.Error(t, err)
	require.NoError(t, good.Wait(context.Background()), "the write before the bad one succeeded")
	require.Equal(t, "good data", string(b.bytes()[100:109]))
	require.NotEqual(t, "good data", string(b.bytes()[200:209]))

	require.ErrorIs(t, err, monocq.ErrRemoteAccess)
	require.ErrorIs(t, err, monocq.ErrCompletion)
	var pe *channel.PeerError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 0, pe.Peer)
	require.Equal(t, channel.OpWrite, pe.Op)
	var ce *monocq.CompletionError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, prm.SyndromeRemoteAccess, ce.Syndrome)
	require.Equal(t, "REM_ACCESS_ERR", ce.Status.String())
	require.Equal(t, prm.OpRdmaWrite, ce.Opcode)
	require.True(t, ce.HasWRID)
	require.Contains(t, err.Error(), "REMOTE_ACCESS_ERR")
	require.Contains(t, err.Error(), "write to peer 0")
	require.Zero(t, ca.Outstanding(), "the scope polled everything")

	// The queue pair is in error now: later work is refused at once.
	err = ca.Write(context.Background(), channel.WriteRequest{Local: a.sge(0, 9), Remote: channel.At(region, 300)})
	require.Error(t, err)
}

func TestScopeFailedWorkRC(t *testing.T) { testScopeReportsFailedWork(t, channel.Options{}) }
func TestScopeFailedWorkDC(t *testing.T) {
	testScopeReportsFailedWork(t, channel.Options{Transport: endpoint.TransportDC})
}

func TestScopeJoinsEveryError(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, _ := pair(t, a, b, channel.Options{WaitTimeout: 10 * time.Second})
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	mine := errors.New("the function's own error")
	bad := channel.At(region, 0)
	bad.RKey++
	err = ca.Scope(context.Background(), func(s *channel.Scope) error {
		for i := 0; i < 4; i++ {
			if _, err := s.PostWrite(channel.WriteRequest{Local: a.sge(0, 8), Remote: bad}); err != nil {
				return err
			}
		}
		return mine
	})
	require.ErrorIs(t, err, mine)
	require.ErrorIs(t, err, monocq.ErrRemoteAccess, "the first write failed")
	require.ErrorIs(t, err, monocq.ErrFlushed, "the writes after it were flushed")
	var joined interface{ Unwrap() []error }
	require.ErrorAs(t, err, &joined)
	require.Len(t, joined.Unwrap(), 5, "the function's error and one per failed write")
}

func TestScopeMisuse(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, _ := pair(t, a, b, channel.Options{WaitTimeout: 10 * time.Second})
	var kept *channel.Scope
	err := ca.Scope(context.Background(), func(s *channel.Scope) error {
		kept = s
		return ca.Scope(context.Background(), func(*channel.Scope) error { return nil })
	})
	require.ErrorIs(t, err, channel.ErrNestedScope)
	_, err = kept.PostSend(channel.SendRequest{Local: a.sge(0, 1)})
	require.ErrorIs(t, err, ctx.ErrClosed, "a scope is not usable after it returned")
	require.Zero(t, ca.Outstanding())

	err = ca.Scope(context.Background(), func(s *channel.Scope) error {
		_, err := s.PostSend(channel.SendRequest{Peer: 3, Local: a.sge(0, 1)})
		return err
	})
	require.ErrorIs(t, err, channel.ErrPeer)
}

// TestScopeMoreThanTheQueueHolds posts far more writes than the send queue
// holds in one scope: the scope polls for room as it goes.
func TestScopeMoreThanTheQueueHolds(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, _ := pair(t, a, b, channel.Options{SendDepth: 8, WaitTimeout: 10 * time.Second})
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	const n = 500
	for i := 0; i < n; i++ {
		a.bytes()[i] = byte(i*7 + 1)
	}
	err = ca.Scope(context.Background(), func(s *channel.Scope) error {
		for i := 0; i < n; i++ {
			if _, err := s.PostWrite(channel.WriteRequest{Local: a.sge(i, 1), Remote: channel.At(region, uint64(i))}); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, a.bytes()[:n], b.bytes()[:n])
}

// TestRawPostReportsFullQueue shows the raw level: no polling behind the
// caller's back, a full queue is an error to handle.
func TestRawPostReportsFullQueue(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, _ := pair(t, a, b, channel.Options{SendDepth: 4, WaitTimeout: 10 * time.Second})
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	var pend []channel.Pending
	var full error
	for i := 0; i < 64; i++ {
		p, err := ca.PostWrite(channel.WriteRequest{Local: a.sge(0, 8), Remote: channel.At(region, 0)})
		if err != nil {
			full = err
			break
		}
		pend = append(pend, p)
	}
	require.Error(t, full, "a queue of 4 refuses the 64th write")
	var pe *channel.PeerError
	require.ErrorAs(t, full, &pe)
	require.NotEmpty(t, pend)
	for _, p := range pend {
		require.NoError(t, p.Wait(context.Background()))
	}
	require.Zero(t, ca.Outstanding())
}

func TestTimeout(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	_, cb := pair(t, a, b, channel.Options{WaitTimeout: 50 * time.Millisecond})
	start := time.Now()
	_, err := cb.Receive(context.Background(), channel.RecvRequest{Local: b.sge(0, 8)})
	require.ErrorIs(t, err, channel.ErrTimeout)
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	require.Equal(t, 1, cb.Outstanding(), "the receive is still posted")
}

// TestLongOutstandingSurvivesTraffic keeps a receive from one peer posted
// while thousands of requests go to another: its record is not reused
// while it is outstanding, and a record long completed reports ErrStale.
func TestLongOutstandingSurvivesTraffic(t *testing.T) {
	f := newFabric(t, 3)
	a, b, c := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16), newHost(t, f, 2, 1<<16)
	opts := channel.Options{SendDepth: 16, RecvDepth: 4, WaitTimeout: 10 * time.Second}
	pa, err := channel.NewMulti(a.pd, 2, opts)
	require.NoError(t, err)
	pb, err := channel.New(b.pd, opts)
	require.NoError(t, err)
	pc, err := channel.New(c.pd, opts)
	require.NoError(t, err)
	require.NoError(t, pc.Share(c.mr))
	ea := pa.Endpoints()
	ma, err := pa.Handshake([]endpoint.Endpoint{pb.Endpoint(), pc.Endpoint()})
	require.NoError(t, err)
	defer ma.Close()
	cb, err := pb.Handshake(ea[0])
	require.NoError(t, err)
	defer cb.Close()
	cc, err := pc.Handshake(ea[1])
	require.NoError(t, err)
	defer cc.Close()

	waiting, err := ma.PostReceive(channel.RecvRequest{Peer: 0, Local: a.sge(0, 64)})
	require.NoError(t, err)
	first, err := ma.PostWrite(channel.WriteRequest{Peer: 1, Local: a.sge(100, 8), Remote: remoteOf(t, ma, 1)})
	require.NoError(t, err)
	require.NoError(t, first.Wait(context.Background()))
	for i := 0; i < 5000; i++ {
		require.NoError(t, ma.Write(context.Background(), channel.WriteRequest{Peer: 1, Local: a.sge(100, 8), Remote: remoteOf(t, ma, 1)}))
	}
	_, err = first.Poll()
	require.ErrorIs(t, err, channel.ErrStale, "a record completed 5000 requests ago was reused")
	_, ok := first.Result()
	require.False(t, ok)
	require.False(t, waiting.Done())

	copy(b.bytes(), "still here")
	require.NoError(t, cb.Send(context.Background(), channel.SendRequest{Local: b.sge(0, 10)}))
	require.NoError(t, waiting.Wait(context.Background()))
	res, ok := waiting.Result()
	require.True(t, ok)
	require.Equal(t, uint32(10), res.ByteCount)
	require.Equal(t, "still here", string(a.bytes()[:10]))
}

func remoteOf(t *testing.T, m *channel.MultiChannel, peer int) channel.Remote {
	r, err := m.RemoteRegion(peer, 0)
	require.NoError(t, err)
	return channel.At(r, 0)
}

func TestUseAfterClose(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, _ := pair(t, a, b, channel.Options{WaitTimeout: time.Second})
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	require.NoError(t, ca.Close())
	require.NoError(t, ca.Close(), "Close is idempotent")
	err = ca.Write(context.Background(), channel.WriteRequest{Local: a.sge(0, 8), Remote: channel.At(region, 0)})
	require.Error(t, err)
	_, err = ca.PostSend(channel.SendRequest{Local: a.sge(0, 8)})
	require.Error(t, err)
	require.Zero(t, ca.Poll())
	require.NoError(t, ca.Scope(context.Background(), func(*channel.Scope) error { return nil }))
}

// Every kind of request on a closed channel fails with ErrClosed (and
// ctx.ErrClosed, what its closed queues say), naming the request and peer.
func TestClosedChannelRefusesRequests(t *testing.T) {
	for _, opts := range []channel.Options{{}, {Transport: endpoint.TransportDC}} {
		f := newFabric(t, 2)
		a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
		ca, _ := pair(t, a, b, opts)
		region, err := ca.RemoteRegion(0, 0)
		require.NoError(t, err)
		require.NoError(t, ca.Close())
		_, rawErr := ca.PostWrite(channel.WriteRequest{Local: a.sge(0, 8), Remote: channel.At(region, 0)})
		_, recvErr := ca.PostReceive(channel.RecvRequest{Local: a.sge(0, 8)})
		scopeErr := ca.Scope(context.Background(), func(s *channel.Scope) error {
			_, err := s.PostSend(channel.SendRequest{Local: a.sge(0, 1)})
			return err
		})
		for _, err := range []error{
			ca.Send(context.Background(), channel.SendRequest{Local: a.sge(0, 1)}), rawErr, recvErr, scopeErr,
			ca.Read(context.Background(), channel.ReadRequest{Local: a.sge(0, 8), Remote: channel.At(region, 0)}),
		} {
			require.ErrorIs(t, err, ctx.ErrClosed, "%v", opts.Transport)
			require.ErrorIs(t, err, ctx.ErrClosed)
			var pe *channel.PeerError
			require.ErrorAs(t, err, &pe)
			require.Zero(t, pe.Peer)
		}
		require.EqualError(t, ca.Send(context.Background(), channel.SendRequest{Local: a.sge(0, 1)}), "channel: send to peer 0: channel closed")
	}
}
