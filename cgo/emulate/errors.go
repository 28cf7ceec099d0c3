package emulate

import (
	"fmt"
	"runtime"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// ErrUnavailable is what Enable returns in a build without cgo or for an
// OS other than Linux; it wraps ctx.ErrNotSupported. It is declared in
// every build, so that a program can test for it (errors.Is) whatever
// it is built with; a cgo build for Linux never returns it.
var ErrUnavailable = fmt.Errorf("emulate: the emulated uverbs kernel needs cgo and Linux; this binary was built with CGO_ENABLED=0 or for %s/%s: %w",
	runtime.GOOS, runtime.GOARCH, ctx.ErrNotSupported)
