package channel_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestDoneOfStaleRecord checks that Done reports true for a request whose
// record was reused: it completed long ago, and a loop until Done reports
// true ends, where Wait and Poll report ErrStale. The Pending of a refused
// post names no request and stays false, as Poll reports.
func TestDoneOfStaleRecord(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, _ := pair(t, a, b, channel.Options{SendDepth: 4, RecvDepth: 4})
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	w := channel.WriteRequest{Local: a.sge(0, 8), Remote: channel.At(region, 0)}
	first, err := ca.PostWrite(w)
	require.NoError(t, err)
	require.NoError(t, first.Wait(context.Background()))
	require.True(t, first.Done())
	for range 2000 {
		require.NoError(t, ca.Write(context.Background(), w))
	}
	_, err = first.Poll()
	require.ErrorIs(t, err, channel.ErrStale)
	require.ErrorIs(t, first.Wait(context.Background()), channel.ErrStale)
	require.True(t, first.Done(), "a request whose record was reused has completed")
	_, ok := first.Result()
	require.False(t, ok, "its result is gone")
	require.False(t, channel.Pending{}.Done(), "the Pending of a refused post names no request")
}

// TestDoneAfterClose: a request still outstanding when its channel is
// closed never completes, but its buffers are the caller's again (the
// queue pair is destroyed): Done reports true, so that a loop waiting for
// it ends, and Poll reports ctx.ErrClosed.
func TestDoneAfterClose(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, _ := pair(t, a, b, channel.Options{SendDepth: 4, RecvDepth: 4})
	recv, err := ca.PostReceive(channel.RecvRequest{Local: a.sge(0, 64)})
	require.NoError(t, err)
	require.False(t, recv.Done(), "nothing was sent to it")
	require.NoError(t, ca.Close())
	require.True(t, recv.Done(), "its channel is closed: the buffers are the caller's")
	done, err := recv.Poll()
	require.False(t, done)
	require.ErrorIs(t, err, ctx.ErrClosed)
}
