package channel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// Pending.Poll of a request whose channel was closed reports the close
// (ctx.ErrClosed) instead of "not done, no error" forever, which made a
// loop polling it until done spin for good; Wait names the call.
func TestPendingAfterClose(t *testing.T) {
	_, b, mr := misusePair(t)
	p, err := b.PostReceive(channel.RecvRequest{Local: []channel.SGE{channel.Slice(mr, 0, 64)}})
	require.NoError(t, err)
	require.NoError(t, b.Close())

	done, err := p.Poll()
	require.False(t, done)
	require.ErrorIs(t, err, ctx.ErrClosed)

	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = p.Wait(c)
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.Contains(t, err.Error(), "channel: wait for work request")
}
