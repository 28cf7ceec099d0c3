package transport

import (
	"testing"

	"github.com/mlx5kit/mlx5kit/internal/names/namestest"
)

// TestNames checks that the String methods of Match and State name every
// constant of their type, each differently, and fall back to "Type(n)".
func TestNames(t *testing.T) {
	namestest.Check(t, ".", "Match", func(v uint64) string { return Match(v).String() })
	namestest.Check(t, ".", "State", func(v uint64) string { return State(v).String() })
}
