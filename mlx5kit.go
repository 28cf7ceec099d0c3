// Package mlx5kit is the one import that gives a program both providers of
// the kit: the rdma-core hardware provider (package cgo) and the software HCA
// (package sim). Open picks the first mlx5 device when one is present and the
// software HCA otherwise; MLX5KIT_PROVIDER ("mlx5" or "sim") or
// Options.Provider asks for one explicitly.
//
// MLX5KIT_EMULATE=1 together with MLX5KIT_PROVIDER=mlx5 runs a program
// built with the kit through rdma-core (libibverbs and libmlx5 as
// installed) on the software HCA standing in for the kernel: the package
// links the emulated uverbs kernel (package cgo/emulate), which the
// variable switches on while the process starts; see docs/hardware.md.
//
// The data plane lives in the transports (rc, dc, ud) over the ring code
// (wqebuilder, monocq, blueflame); see docs/architecture.md.
package mlx5kit

import (
	"github.com/mlx5kit/mlx5kit/ctx"

	// The providers register themselves with ctx when imported.
	_ "github.com/mlx5kit/mlx5kit/cgo"
	_ "github.com/mlx5kit/mlx5kit/sim"

	// The emulated uverbs kernel, off unless MLX5KIT_EMULATE=1.
	_ "github.com/mlx5kit/mlx5kit/cgo/emulate"
)

// Options select what Open opens; see ctx.Options.
type Options = ctx.Options

// Open opens a device: real hardware when an mlx5 device is present, the
// software HCA otherwise, unless opts or MLX5KIT_PROVIDER say which.
// Context.Kind and Context.Provider tell what was opened.
func Open(opts Options) (*ctx.Context, error) { return ctx.Open(opts) }
