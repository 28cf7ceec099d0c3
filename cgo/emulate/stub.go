//go:build !cgo || !linux

package emulate

import (
	"fmt"
	"runtime"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/sim"
)

// ErrUnavailable is what Enable returns in a build without cgo or for an
// OS other than Linux.
var ErrUnavailable = fmt.Errorf("emulate: the emulated uverbs kernel needs cgo and Linux; this binary was built with CGO_ENABLED=0 or for %s/%s: %w",
	runtime.GOOS, runtime.GOARCH, ctx.ErrNotSupported)

// Enable returns ErrUnavailable.
func Enable() error { return ErrUnavailable }

// Enabled reports false.
func Enabled() bool { return false }

// Fabric returns nil.
func Fabric() *sim.Fabric { return nil }

// SysfsPath returns "".
func SysfsPath() string { return "" }
