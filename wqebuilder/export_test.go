package wqebuilder

import "github.com/mlx5kit/mlx5kit/internal/prm"

// Dump decodes the WQE at producer index pi for the external tests.
func Dump(q *SendQueue, pi uint32, t prm.Transport) string { return q.dump(pi, t) }

// DefaultMaxWQEBBs is the MaxWQEBBs New picks, for the external tests.
func DefaultMaxWQEBBs(maxSGE, maxInline uint32) uint32 { return defaultMaxWQEBBs(maxSGE, maxInline) }
