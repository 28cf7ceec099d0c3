// Package mlx5kit is the one import that gives a program both providers of
// the kit: the rdma-core hardware provider (package cgo) and the software HCA
// (package sim). Open picks the first mlx5 device when one is present and the
// software HCA otherwise; MLX5KIT_PROVIDER ("mlx5" or "sim") or
// Options.Provider asks for one explicitly.
//
// The data plane lives in the transports (rc, dc, ud) over the ring code
// (wqebuilder, monocq, blueflame); see docs/architecture.md.
package mlx5kit

import (
	"github.com/mlx5kit/mlx5kit/ctx"

	// The providers register themselves with ctx when imported.
	_ "github.com/mlx5kit/mlx5kit/cgo"
	_ "github.com/mlx5kit/mlx5kit/sim"
)

// Options select what Open opens; see ctx.Options.
type Options = ctx.Options

// Open opens a device: real hardware when an mlx5 device is present, the
// software HCA otherwise, unless opts or MLX5KIT_PROVIDER say which.
// Context.Kind and Context.Provider tell what was opened.
func Open(opts Options) (*ctx.Context, error) { return ctx.Open(opts) }
