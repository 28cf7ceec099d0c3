package channel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// A scope whose function panics (here with the documented panic of
// channel.Slice for a range outside the region), recovered by the caller,
// leaves the channel usable: the next Scope runs instead of failing with
// ErrNestedScope forever.
func TestScopeAfterPanicInside(t *testing.T) {
	a, b, mr := misusePair(t)
	_ = b
	func() {
		defer func() { require.NotNil(t, recover()) }()
		_ = a.Scope(context.Background(), func(s *channel.Scope) error {
			channel.Slice(mr, 0, 1<<20) // panics: outside the region
			return nil
		})
	}()
	ran := false
	err := a.Scope(context.Background(), func(s *channel.Scope) error { ran = true; return nil })
	require.NoError(t, err)
	require.True(t, ran)
	require.False(t, errors.Is(err, channel.ErrNestedScope))
}

// A nil function is refused before anything runs, and the next Scope runs.
func TestScopeNilFunction(t *testing.T) {
	a, _, _ := misusePair(t)
	require.ErrorIs(t, a.Scope(context.Background(), nil), ctx.ErrInvalidArgument)
	ran := false
	require.NoError(t, a.Scope(context.Background(), func(*channel.Scope) error { ran = true; return nil }))
	require.True(t, ran)
}
