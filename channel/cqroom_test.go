package channel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestCQDepthBelowWorkRefused: a CQDepth smaller than the work the depths
// allow outstanding would overrun; New refuses it and names the numbers.
func TestCQDepthBelowWorkRefused(t *testing.T) {
	f := newFabric(t, 1)
	h := newHost(t, f, 0, 4096)
	_, err := channel.New(h.pd, channel.Options{CQDepth: 2})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "CQDepth 2 is less than the 128 work requests")
	_, err = channel.NewMulti(h.pd, 3, channel.Options{Transport: endpoint.TransportDC, SendDepth: 8, RecvDepth: 4, CQDepth: 19})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "CQDepth 19 is less than the 20 work requests")
	p, err := channel.NewMulti(h.pd, 3, channel.Options{Transport: endpoint.TransportDC, SendDepth: 8, RecvDepth: 4, CQDepth: 20})
	require.NoError(t, err)
	require.NoError(t, p.Close())
}

// TestPostsNeverOverrunCQ: a send ring sized for large inline WQEs holds
// many more small ones than SendDepth, and so than the completion queue
// the depths size. A raw post past the CQ's room fails with the queue-full
// error instead of posting work whose CQE would overrun the CQ (which left
// every wait polling for good). The engine runs the posted work before
// the first poll, so that every CQE is written before one is read.
func TestPostsNeverOverrunCQ(t *testing.T) {
	f := newFabric(t, 2)
	ha, hb := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	a, _ := pair(t, ha, hb, channel.Options{SendDepth: 4, RecvDepth: 4, MaxInline: 256})
	// A full ring reads as overrun: one less; the receives' share
	// (RecvDepth) is left to them.
	room := int(provider.CQDescriptor(a.CompletionQueue()).CQECnt) - 1 - 4
	l := a.QP(0).Limits()
	require.Greater(t, int(l.SendWQEBBs-l.MaxWQEBBs+1), room, "the send ring must hold more small WQEs than the CQ")
	rem := channel.Remote{Addr: uint64(hb.mr.Addr()), RKey: hb.mr.RKey()}
	cqes := f.Stats().CQEs
	var pending []channel.Pending
	for i := 0; ; i++ {
		p, err := a.PostWrite(channel.WriteRequest{Local: ha.sge(i*8, 8), Remote: rem})
		if err != nil {
			require.ErrorIs(t, err, wqebuilder.ErrQueueFull)
			break
		}
		pending = append(pending, p)
	}
	require.Len(t, pending, room)
	require.Eventually(t, func() bool { return f.Stats().CQEs-cqes >= uint64(room) }, 10*time.Second, time.Millisecond,
		"the engine never completed every write")
	cx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, p := range pending {
		require.NoError(t, p.Wait(cx), "write %d", i)
	}
	require.NoError(t, a.Err())
	// The room is back.
	p, err := a.PostWrite(channel.WriteRequest{Local: ha.sge(0, 8), Remote: rem})
	require.NoError(t, err)
	require.NoError(t, p.Wait(cx))
}

// TestWaitSeesOverrunCQ: work posted on the channel's queue pair past the
// channel (its raw QP) overruns the completion queue; a wait on the
// channel's own request then fails with the CQ's error and ErrFailed
// instead of polling a ring that delivers nothing more.
func TestWaitSeesOverrunCQ(t *testing.T) {
	f := newFabric(t, 2)
	ha, hb := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	a, _ := pair(t, ha, hb, channel.Options{SendDepth: 4, RecvDepth: 4, MaxInline: 256})
	room := int(provider.CQDescriptor(a.CompletionQueue()).CQECnt)
	rem := channel.Remote{Addr: uint64(hb.mr.Addr()), RKey: hb.mr.RKey()}
	q := a.QP(0)
	for i := range room + 1 {
		st, err := q.Post(uint64(1<<40+i), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, st.RdmaWrite(rem.Addr, rem.RKey).SGE(uint64(ha.mr.Addr()), 8, ha.mr.LKey()).FinishBlueFlame())
	}
	waitOverrun(t, f) // the engine executes every write
	p, err := a.PostWrite(channel.WriteRequest{Local: ha.sge(0, 8), Remote: rem})
	require.NoError(t, err)
	// Poll says so too, rather than reporting the request outstanding
	// for ever.
	done, err := p.Poll()
	require.False(t, done)
	require.ErrorIs(t, err, monocq.ErrOverrun)
	cx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = p.Wait(cx)
	require.ErrorIs(t, err, channel.ErrFailed)
	require.ErrorIs(t, err, monocq.ErrOverrun)
	// The channel failed as ErrFailed says: nothing outstanding, new
	// work refused.
	require.Zero(t, a.Outstanding())
	_, err = a.PostWrite(channel.WriteRequest{Local: ha.sge(0, 8), Remote: rem})
	require.Error(t, err)
}

// waitOverrun waits until the engine of f has overrun a completion queue:
// the work posted past its room has all been executed.
func waitOverrun(t *testing.T, f *sim.Fabric) {
	t.Helper()
	require.Eventually(t, func() bool { return f.Stats().CQOverruns != 0 }, 10*time.Second, time.Millisecond,
		"the engine never overran the completion queue")
}

// TestReceivesLeaveSendsRoom: receives posted up to what their queue
// takes (more than RecvDepth where the ring rounds up) leave the sends
// their share of the completion queue: a blocking send still goes out.
func TestReceivesLeaveSendsRoom(t *testing.T) {
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		t.Run(tr.String(), func(t *testing.T) {
			f := newFabric(t, 2)
			ha, hb := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
			opts := channel.Options{Transport: tr, SendDepth: 8, RecvDepth: 100, WaitTimeout: 10 * time.Second}
			if tr == endpoint.TransportDC {
				opts.SendDepth, opts.RecvDepth = 1, 64
			}
			a, b := pair(t, ha, hb, opts)
			posted := 0
			for ; posted < 1000; posted++ {
				_, err := a.PostReceive(channel.RecvRequest{Local: ha.sge(0, 64)})
				if err != nil {
					require.ErrorIs(t, err, transport.ErrReceiveQueueFull)
					break
				}
			}
			require.GreaterOrEqual(t, posted, int(opts.RecvDepth))
			got, err := b.PostReceive(channel.RecvRequest{Local: hb.sge(0, 64)})
			require.NoError(t, err)
			cx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, a.Send(cx, channel.SendRequest{Local: ha.sge(0, 8)}))
			require.NoError(t, got.Wait(cx))
		})
	}
}

// TestShareAfterHandshakeRefused: the peers have their endpoints once the
// prepared channel is used, so a region shared then would never reach
// them; Share refuses it with ErrUsed, as a second Handshake is.
func TestShareAfterHandshakeRefused(t *testing.T) {
	f := newFabric(t, 2)
	ha, hb := newHost(t, f, 0, 4096), newHost(t, f, 1, 4096)
	pa, err := channel.New(ha.pd, channel.Options{})
	require.NoError(t, err)
	pb, err := channel.New(hb.pd, channel.Options{})
	require.NoError(t, err)
	ca, err := pa.Handshake(pb.Endpoint())
	require.NoError(t, err)
	t.Cleanup(func() { _ = ca.Close(); _ = pb.Close() })
	require.ErrorIs(t, pa.Share(ha.mr), channel.ErrUsed)
}

// TestPostForRoomSeesOverrunCQ: a blocking post that waits for room (the
// sends' share of the completion queue taken by raw posts of the channel)
// on a completion queue that work posted through the raw QP overran fails
// the channel with the CQ's error and ErrFailed, instead of waiting for
// room that never comes.
func TestPostForRoomSeesOverrunCQ(t *testing.T) {
	f := newFabric(t, 2)
	ha, hb := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	a, _ := pair(t, ha, hb, channel.Options{SendDepth: 4, RecvDepth: 4, MaxInline: 256, WaitTimeout: 10 * time.Second})
	rem := channel.Remote{Addr: uint64(hb.mr.Addr()), RKey: hb.mr.RKey()}
	entries := int(provider.CQDescriptor(a.CompletionQueue()).CQECnt)
	posted := 0
	for ; ; posted++ {
		_, err := a.PostWrite(channel.WriteRequest{Local: ha.sge(0, 8), Remote: rem})
		if err != nil {
			require.ErrorIs(t, err, wqebuilder.ErrQueueFull)
			break
		}
	}
	q := a.QP(0)
	for i := posted; i <= entries; i++ {
		st, err := q.Post(uint64(1<<40+i), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, st.RdmaWrite(rem.Addr, rem.RKey).SGE(uint64(ha.mr.Addr()), 8, ha.mr.LKey()).FinishBlueFlame())
	}
	waitOverrun(t, f) // the engine executes every write
	cx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := a.Write(cx, channel.WriteRequest{Local: ha.sge(0, 8), Remote: rem})
	t.Logf("posted %d entries %d: %v", posted, entries, err)
	require.ErrorIs(t, err, channel.ErrFailed)
	require.ErrorIs(t, err, monocq.ErrOverrun)
	require.Zero(t, a.Outstanding())
}

// TestShareNilRefused: Share of a nil memory region is an invalid
// argument, not a closed region.
func TestShareNilRefused(t *testing.T) {
	f := newFabric(t, 1)
	h := newHost(t, f, 0, 4096)
	p, err := channel.New(h.pd, channel.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	err = p.Share(nil)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.NotErrorIs(t, err, ctx.ErrClosed)
	require.NoError(t, p.Share(h.mr), "the prepared channel still shares")
}
