package cgo_test

import (
	"errors"
	"fmt"
	"slices"

	_ "github.com/mlx5kit/mlx5kit/cgo"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// Importing package cgo registers the hardware provider with ctx, in every
// build; without cgo it reports ctx.ErrNotSupported when asked for a device.
func Example_provider() {
	fmt.Println(slices.Contains(ctx.Providers(), ctx.ProviderHardware))
	_, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware, Device: "no_such_device"})
	fmt.Println(errors.Is(err, ctx.ErrNotFound) || errors.Is(err, ctx.ErrNotSupported))
	// Output:
	// true
	// true
}
