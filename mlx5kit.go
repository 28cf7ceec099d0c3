// Package mlx5kit is the one import that gives a program both providers of
// the kit: the rdma-core hardware provider (package cgo) and the software
// HCA (package sim). Open opens the first mlx5 device; the software HCA runs
// only when it is chosen, with Options.Provider set to ctx.ProviderSoftware
// ("sim") or the environment variable MLX5KIT_PROVIDER=sim. With no mlx5
// device and no choice, Open returns an error that says so.
//
// # Where to start
//
// Most programs want package channel: a connected queue pair per peer with
// its completion queue, blocking, asynchronous and batched sends, writes,
// reads and atomics, and the TCP handshake that swaps endpoints. Programs
// that drive the rings themselves use the transports (rc, dc, ud) over the
// ring code (wqebuilder, monocq, blueflame); see docs/guide.md and
// docs/architecture.md.
//
// MLX5KIT_EMULATE=1 together with MLX5KIT_PROVIDER=mlx5 runs a program
// built with the kit through rdma-core (libibverbs and libmlx5 as
// installed) on the software HCA standing in for the kernel: the package
// links the emulated uverbs kernel (package cgo/emulate), which the
// variable switches on while the process starts; see docs/hardware.md.
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

// Open opens a device of the provider opts or MLX5KIT_PROVIDER name, or the
// first mlx5 device when neither names one (see ctx.Open); it never falls
// back to the software HCA by itself. Context.Kind and Context.Provider tell
// what was opened.
func Open(opts Options) (*ctx.Context, error) { return ctx.Open(opts) }
