package channel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// Fail after a queue pair of the channel was closed under it (by another
// goroutine, as ctx allows) returns at once: the closed queue flushes
// nothing, and Fail waited its whole flush limit (2 s) for flushes that
// never came, as did a blocking call whose context ended as the queue
// closed. The channel is closed from then on.
func TestFailAfterQueuesClosedUnderIt(t *testing.T) {
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		t.Run(tr.String(), func(t *testing.T) {
			f := newFabric(t, 2)
			ha, hb := newHost(t, f, 0, 4096), newHost(t, f, 1, 4096)
			_, b := pair(t, ha, hb, channel.Options{Transport: tr})
			p, err := b.PostReceive(channel.RecvRequest{Local: hb.sge(0, 64)})
			require.NoError(t, err)
			if qp := b.QP(0); qp != nil {
				require.NoError(t, qp.Close())
			} else {
				require.NoError(t, b.DCI().Close())
			}
			start := time.Now()
			require.NoError(t, b.Fail())
			require.Less(t, time.Since(start), 500*time.Millisecond)
			_, err = p.Poll()
			require.ErrorIs(t, err, ctx.ErrClosed)
			_, err = b.Receive(context.Background(), channel.RecvRequest{Local: hb.sge(0, 64)})
			require.ErrorIs(t, err, ctx.ErrClosed)
			require.NoError(t, b.Close())
		})
	}
}
