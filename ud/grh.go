package ud

import "github.com/mlx5kit/mlx5kit/transport"

// ErrBadGRH is returned by ReplyRemote when the GRH area holds neither an
// IPv6-form GRH nor an IPv4 header.
var ErrBadGRH = transport.ErrBadGRH
