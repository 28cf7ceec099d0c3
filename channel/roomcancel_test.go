package channel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestRoomWaitContextWithNothingOfItsOwn: a blocking call or scope whose
// context ends while its first post waits for room that raw posts take
// returns the context's error with the queue's refusal, and leaves the
// channel working, as the package documentation says: it has nothing of
// its own to flush.
func TestRoomWaitContextWithNothingOfItsOwn(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, cb := pair(t, a, b, channel.Options{SendDepth: 2})
	n := 0
	for ; ; n++ { // sends no receive answers yet: they stay outstanding
		if _, err := ca.PostSend(channel.SendRequest{Local: a.sge(0, 8)}); err != nil {
			require.ErrorIs(t, err, wqebuilder.ErrQueueFull)
			break
		}
	}
	for _, scope := range []bool{false, true} {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		var err error
		if scope {
			err = ca.Scope(c, func(s *channel.Scope) error {
				_, err := s.PostSend(channel.SendRequest{Local: a.sge(0, 8)})
				return err
			})
		} else {
			err = ca.Send(c, channel.SendRequest{Local: a.sge(0, 8)})
		}
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, wqebuilder.ErrQueueFull)
		require.NotErrorIs(t, err, channel.ErrFailed)
		require.Equal(t, n, ca.Outstanding(), "the raw posts are still outstanding")
	}
	// The channel works: receives at the peer let the raw sends complete.
	for range n {
		_, err := cb.PostReceive(channel.RecvRequest{Local: b.sge(0, 64)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { ca.Poll(); return ca.Outstanding() == 0 }, 5*time.Second, time.Millisecond)
	require.NoError(t, ca.Err())
}
