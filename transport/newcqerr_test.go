package transport_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// TestNewCQErrorsNameTheCall: NewCQ's errors say which call failed, as
// NewPoller's do, and wrap the sentinel of the cause. Before, they read
// "nil completion queue: …" and "completion queue: object is closed".
func TestNewCQErrorsNameTheCall(t *testing.T) {
	_, err := transport.NewCQ(nil)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.True(t, strings.HasPrefix(err.Error(), "transport: new CQ: "), "%v", err)

	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 16)
	require.NoError(t, cq.Close())
	_, err = transport.NewCQ(cq)
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.True(t, strings.HasPrefix(err.Error(), "transport: new CQ: "), "%v", err)
}
