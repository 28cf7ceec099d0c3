package ud_test

import (
	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/transport"
)

// newPoller creates a CQ on HCA i and a Poller for it.
func newPoller(e *transporttest.Env, i int, depth uint32) (*ctx.CompletionQueue, *transport.Poller) {
	e.T.Helper()
	cq := e.CQ(i, depth)
	p, err := transport.NewPoller(cq)
	require.NoError(e.T, err)
	return cq, p
}
