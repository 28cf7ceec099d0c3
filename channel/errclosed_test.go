package channel_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// TestErrAfterClose checks what Err's documentation says of a closed
// channel: after Close, and after a DC channel's Fail destroyed its queues
// (a receive was outstanding), Err wraps ctx.ErrClosed; after an RC
// channel's Fail, whose queues stay, it reports nothing.
func TestErrAfterClose(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, _ := pair(t, a, b, channel.Options{})
	require.NoError(t, ca.Err())
	require.NoError(t, ca.Close())
	require.ErrorIs(t, ca.Err(), ctx.ErrClosed)

	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		c, _ := pair(t, a, b, channel.Options{Transport: tr})
		_, err := c.PostReceive(channel.RecvRequest{Local: a.sge(0, 8)})
		require.NoError(t, err)
		require.NoError(t, c.Fail())
		if tr == endpoint.TransportDC {
			require.ErrorIs(t, c.Err(), ctx.ErrClosed, "%v", tr)
		} else {
			require.NoError(t, c.Err(), "%v", tr)
		}
	}
}
