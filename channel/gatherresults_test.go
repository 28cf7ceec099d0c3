package channel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
)

// TestGatherReceiveResultsOfUncompleted: a gather receive's results of the
// requests that did not complete before it returned (here: timed out, or
// never posted because the context had ended) hold the call's error, not
// whatever the slice held before (a result of an earlier call, which read
// as a success).
func TestGatherReceiveResultsOfUncompleted(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	// The first receive must complete within WaitTimeout: the peer's
	// SEND meets an RNR NAK and is sent again by the engine, which a
	// loaded machine can keep from running for 100 ms; the second
	// receive then waits out the full second.
	ca, cb := pair(t, a, b, channel.Options{WaitTimeout: time.Second})
	stale := channel.Result{Op: channel.OpRecv, ByteCount: 99}
	results := []channel.Result{stale, stale}
	reqs := []channel.RecvRequest{{Local: a.sge(0, 64)}, {Local: a.sge(64, 64)}}

	sent, err := cb.PostSend(channel.SendRequest{Local: b.sge(0, 8)}) // lands once a receive is posted
	require.NoError(t, err)
	err = ca.GatherReceive(context.Background(), reqs, results)
	require.ErrorIs(t, err, channel.ErrTimeout)
	require.NoError(t, results[0].Err)
	require.Equal(t, uint32(8), results[0].ByteCount)
	require.ErrorIs(t, results[1].Err, channel.ErrTimeout, "the second receive is still outstanding")
	require.Equal(t, channel.OpRecv, results[1].Op)
	require.NoError(t, sent.Wait(context.Background()))

	c, cancel := context.WithCancel(context.Background())
	cancel()
	results = []channel.Result{stale, stale}
	err = ca.GatherReceive(c, reqs, results)
	require.ErrorIs(t, err, context.Canceled)
	for i, r := range results {
		require.ErrorIs(t, r.Err, context.Canceled, "result %d", i)
		require.Zero(t, r.ByteCount, "result %d", i)
	}
}
