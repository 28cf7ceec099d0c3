package channel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// TestCancelKeepsOwnFailure: a request that failed for its own reason
// (here a wrong rkey) whose error completion arrives only while the
// cancelled call or scope flushes the channel is reported with the call's
// error; only the flushes the cancellation caused are left out. Its error
// was dropped with them.
func TestCancelKeepsOwnFailure(t *testing.T) {
	for _, scope := range []bool{false, true} {
		f := newFabric(t, 2)
		a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
		ca, _ := pair(t, a, b, channel.Options{})
		region, err := ca.RemoteRegion(0, 0)
		require.NoError(t, err)
		// The error completion is held back past the context's end.
		require.NoError(t, f.DelayCompletions(ca.CompletionQueue().CQN(), 300*time.Millisecond))
		bad := channel.WriteRequest{Local: a.sge(0, 8), Remote: channel.Remote{Addr: region.Address, RKey: region.RemoteKey ^ 0x5a00}}
		c, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		if scope {
			err = ca.Scope(c, func(s *channel.Scope) error {
				_, err := s.PostWrite(bad)
				return err
			})
			requireEnded(t, err, context.DeadlineExceeded, "scope")
		} else {
			err = ca.Write(c, bad)
			requireEnded(t, err, context.DeadlineExceeded, "write")
		}
		cancel()
		require.ErrorIs(t, err, monocq.ErrRemoteAccess, "scope %v", scope)
		require.NotErrorIs(t, err, monocq.ErrFlushed, "scope %v", scope)
	}
}
