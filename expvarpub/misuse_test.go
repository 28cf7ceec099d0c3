package expvarpub_test

import (
	"expvar"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/expvarpub"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
)

// A source that is a nil pointer of a queue type is refused, as a nil
// interface is, instead of panicking at its first Counters call.
func TestAddRefusesTypedNilSources(t *testing.T) {
	pub, err := expvarpub.New("mlx5kit_test_typed_nil_sources")
	require.NoError(t, err)
	require.Error(t, pub.AddQueue("rc", (*rc.QP)(nil)))
	require.Error(t, pub.AddQueue("q", (*transport.Queue)(nil)))
	pub.Refresh()
	require.Equal(t, "{}", expvar.Get("mlx5kit_test_typed_nil_sources").String())
}

// Every refusal of an invalid argument (an empty name, a nil source or
// function) matches ctx.ErrInvalidArgument.
func TestInvalidArgumentsMatchSentinel(t *testing.T) {
	_, err := expvarpub.New("")
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)

	pub, err := expvarpub.New("mlx5kit_test_invalid_arguments")
	require.NoError(t, err)
	require.ErrorIs(t, pub.AddQueue("rc", (*rc.QP)(nil)), ctx.ErrInvalidArgument)
	require.ErrorIs(t, pub.AddQueue("nil", nil), ctx.ErrInvalidArgument)
	require.ErrorIs(t, pub.AddPoller("p", nil), ctx.ErrInvalidArgument)
	require.ErrorIs(t, pub.AddChannel("c", nil), ctx.ErrInvalidArgument)
	require.ErrorIs(t, pub.AddFunc("f", nil), ctx.ErrInvalidArgument)
	require.ErrorIs(t, pub.AddFunc("", func() any { return 0 }), ctx.ErrInvalidArgument)
}

// A Publisher not made by New (the zero value, or nil) is refused with
// ctx.ErrInvalidArgument instead of panicking on its missing table; the
// calls that only read it have nothing to do.
func TestZeroPublisherRefused(t *testing.T) {
	for _, pub := range []*expvarpub.Publisher{{}, nil} {
		require.ErrorIs(t, pub.AddFunc("f", func() any { return 0 }), ctx.ErrInvalidArgument)
		require.ErrorIs(t, pub.AddQueue("q", &transport.Queue{}), ctx.ErrInvalidArgument)
		require.False(t, pub.Remove("f"))
		pub.Refresh()
	}
}

// A nil Publisher given a nil source or function is refused with
// ctx.ErrInvalidArgument, as either alone is, instead of panicking while
// it names the Publisher in the error.
func TestNilPublisherNilSourceRefused(t *testing.T) {
	var pub *expvarpub.Publisher
	require.ErrorIs(t, pub.AddQueue("q", nil), ctx.ErrInvalidArgument)
	require.ErrorIs(t, pub.AddQueue("rc", (*rc.QP)(nil)), ctx.ErrInvalidArgument)
	require.ErrorIs(t, pub.AddPoller("p", nil), ctx.ErrInvalidArgument)
	require.ErrorIs(t, pub.AddChannel("c", nil), ctx.ErrInvalidArgument)
	require.ErrorIs(t, pub.AddFunc("f", nil), ctx.ErrInvalidArgument)
	require.Equal(t, "", pub.Name())
}
