package channel_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
)

// The scope after 2^32-1 others does not take id 0, the id of work posted
// outside any scope: a raw receive that completed while that scope
// waited was counted as the scope's, and the scope returned with its own
// receive outstanding, its buffer still the device's.
func TestScopeIDWrapSkipsZero(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, cb := pair(t, a, b, channel.Options{})

	raw, err := ca.PostReceive(channel.RecvRequest{Local: a.sge(0, 64)})
	require.NoError(t, err)
	require.NoError(t, cb.Send(context.Background(), channel.SendRequest{Local: b.sge(0, 8)}))

	channel.SetScopeID(ca.MultiChannel, math.MaxUint32)
	c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = ca.Scope(c, func(s *channel.Scope) error {
		_, err := s.PostReceive(channel.RecvRequest{Local: a.sge(64, 64)})
		return err
	})
	require.True(t, raw.Done())
	require.ErrorIs(t, err, context.DeadlineExceeded, "the scope waits for its own receive")
	require.ErrorIs(t, err, channel.ErrFailed)
	require.Zero(t, ca.Outstanding())
}
