package channel_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/transport"
)

func TestChannelCounters(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, cb := pair(t, a, b, channel.Options{Counters: true})
	require.True(t, ca.QP(0).Counting())
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)

	for range 3 {
		require.NoError(t, ca.Write(context.Background(), channel.WriteRequest{Local: a.sge(0, 16), Remote: channel.At(region, 100)}))
	}
	rp, err := cb.PostReceive(channel.RecvRequest{Local: b.sge(0, 64)})
	require.NoError(t, err)
	require.NoError(t, ca.Send(context.Background(), channel.SendRequest{Local: a.sge(0, 8)}))
	require.NoError(t, rp.Wait(context.Background()))
	// A write beyond the region the peer shared fails at the peer.
	err = ca.Write(context.Background(), channel.WriteRequest{Local: a.sge(0, 16), Remote: channel.At(region, 1<<20)})
	require.Error(t, err)

	c := ca.Counters()
	require.Equal(t, uint64(5), c.Queues.Posts)
	require.Equal(t, c.Queues.Posts, c.Queues.BlueFlameCopies+c.Queues.Doorbells, "each blocking call rings once")
	require.Equal(t, uint64(5), c.Queues.SendCompletions)
	require.Equal(t, uint64(5), c.CQ.Completions)
	require.Equal(t, uint64(1), c.Queues.Errors.Syndrome(prm.SyndromeRemoteAccess))
	require.Equal(t, uint64(1), c.CQ.Errors.Syndrome(prm.SyndromeRemoteAccess))
	require.True(t, c.Queues.RetriesCounted)
	require.Equal(t, c.Queues, ca.QP(0).Counters(), "one peer: its queue pair is the sum")

	r := cb.Counters()
	require.Equal(t, uint64(1), r.Queues.RecvCompletions)
	require.Zero(t, testing.AllocsPerRun(50, func() { _ = ca.Counters() }))

	// Without the option nothing counts.
	cc, _ := pair(t, newHost(t, f, 0, 1<<12), newHost(t, f, 1, 1<<12), channel.Options{})
	require.False(t, cc.QP(0).Counting())
	require.Equal(t, channel.Counters{}, cc.Counters())
	require.Equal(t, transport.QueueCounters{}, cc.Counters().Queues)
}
