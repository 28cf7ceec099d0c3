package rc

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/transport"
)

// limits returns the sizes the provider granted qp.
func limits(qp *ctx.QueuePair) Limits { return transport.LimitsOf(qp) }
