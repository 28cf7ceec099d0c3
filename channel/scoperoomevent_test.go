package channel_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// TestScopeRoomWaitEventDropsFlushes: an event that ends the channel while
// a scope's post waits for room in its full queue fails the scope with
// the event's error, and the flushes of the scope's earlier requests,
// which the channel's failure caused, are not among its errors, as for a
// blocking call (TestRoomWaitEventDropsFlushes). The scope reported them.
func TestScopeRoomWaitEventDropsFlushes(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	var evA events
	ca, _ := pairWith(t, a, b, channel.Options{OnEvent: evA.on, RecvDepth: 4}, channel.Options{})
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = f.SetPortState("sim0", 1, false)
	}()
	err := ca.Scope(bg, func(s *channel.Scope) error {
		for i := range 8 { // the fifth waits for room
			if _, err := s.PostReceive(channel.RecvRequest{Local: a.sge(64*i, 64)}); err != nil {
				return err
			}
		}
		return nil
	})
	requireEventFailure(t, err, ctx.EventPortError)
	require.NotErrorIs(t, err, monocq.ErrFlushed, "the failure's own flushes are not the scope's errors: %v", err)
	require.Zero(t, ca.Outstanding())
}
