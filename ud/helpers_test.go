package ud_test

import (
	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/ud"
)

// newPoller creates a CQ on HCA i and a Poller for it.
func newPoller(e *transporttest.Env, i int, depth uint32) (*ctx.CompletionQueue, *ud.Poller) {
	e.T.Helper()
	cq := e.CQ(i, depth)
	p, err := ud.NewPoller(cq)
	require.NoError(e.T, err)
	return cq, p
}
