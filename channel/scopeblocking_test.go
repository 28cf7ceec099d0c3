package channel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// TestBlockingCallInScopeReportsOnce: a blocking call made inside a
// scope's function reports its failed request, and the scope does not
// report it again (it did: the function returning the call's error made
// the scope's error hold it twice).
func TestBlockingCallInScopeReportsOnce(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, _ := pair(t, a, b, channel.Options{})
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	bad := channel.At(region, 0)
	bad.RKey++
	var inner error
	err = ca.Scope(context.Background(), func(s *channel.Scope) error {
		inner = ca.Write(context.Background(), channel.WriteRequest{Local: a.sge(0, 8), Remote: bad})
		return inner
	})
	require.ErrorIs(t, inner, monocq.ErrRemoteAccess)
	require.ErrorIs(t, err, monocq.ErrRemoteAccess)
	n := 0
	var walk func(error)
	walk = func(e error) {
		var ce *monocq.CompletionError
		if errors.As(e, &ce) && e == error(ce) {
			n++
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	require.Equal(t, 1, n, "the write's completion error once: %v", err)
	require.Zero(t, ca.Outstanding())
}
