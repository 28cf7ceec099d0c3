package ctx_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// A size whose rounding to pages overflows is refused as an invalid
// argument naming the size asked for, not as an mmap of a negative length.
func TestAllocBufferHugeSize(t *testing.T) {
	for _, opts := range []ctx.BufferOptions{{}, {HugePages: true, Guard: true}} {
		b, err := ctx.AllocBuffer(math.MaxInt, opts)
		if b != nil {
			_ = b.Close()
		}
		if !errors.Is(err, ctx.ErrInvalidArgument) || strings.Contains(err.Error(), "-") {
			t.Errorf("AllocBuffer(MaxInt, %+v): %v, want ctx.ErrInvalidArgument naming the size", opts, err)
		}
	}
}
