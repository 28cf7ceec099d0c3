package sim

import (
	"testing"

	"github.com/mlx5kit/mlx5kit/internal/names/namestest"
)

// TestNames checks that the String methods of Mode and ViolationKind name
// every constant of their type, each differently, and fall back to
// "Type(n)" for any other value.
func TestNames(t *testing.T) {
	namestest.Check(t, ".", "Mode", func(v uint64) string { return Mode(v).String() })
	namestest.Check(t, ".", "ViolationKind", func(v uint64) string { return ViolationKind(v).String() })
}
