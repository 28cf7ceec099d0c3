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

// A wait asleep on the completion channel (Options.Events) when another
// goroutine closes the channel's Context ends as a polling wait does: the
// channel closes what is left of it and the error says its queues were
// closed under it (Pending.Wait naming the request), rather than passing
// on the Notifier's error and leaving the channel half open.
func TestEventWaitEndsWhenContextClosesUnderIt(t *testing.T) {
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		t.Run(tr.String(), func(t *testing.T) {
			f := newFabric(t, 2)
			ha, hb := newHost(t, f, 0, 4096), newHost(t, f, 1, 4096)
			_, b := pair(t, ha, hb, channel.Options{Transport: tr, Events: true})
			p, err := b.PostReceive(channel.RecvRequest{Local: hb.sge(0, 64)})
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- p.Wait(context.Background()) }()
			// Let the wait go to sleep (after a millisecond of spinning).
			time.Sleep(30 * time.Millisecond)
			require.NoError(t, hb.dev.Close())
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the wait did not end when the Context closed")
			}
			require.ErrorIs(t, err, ctx.ErrClosed)
			require.ErrorContains(t, err, "wait for work request")
			require.ErrorContains(t, err, "closed under it")
			require.NoError(t, b.Close())
		})
	}
}
