package monocq

import (
	"testing"

	"github.com/mlx5kit/mlx5kit/internal/names/namestest"
)

// TestStatusNames checks that Status.String names every status constant,
// each differently, from its table, and falls back to "Status(n)" past it.
func TestStatusNames(t *testing.T) {
	namestest.Check(t, ".", "Status", func(v uint64) string { return Status(v).String() })
}
