package monocq_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/monocq"
)

// TestZeroCQ: the control calls of a CQ not made by New (a zero value) do
// not panic: it is in no batch, Discard removes nothing, and Arm refuses
// it (no UAR). InBatch and Discard panicked.
func TestZeroCQ(t *testing.T) {
	for name, fn := range map[string]func(t *testing.T, cq *monocq.CQ){
		"InBatch": func(t *testing.T, cq *monocq.CQ) { require.False(t, cq.InBatch()) },
		"Discard": func(t *testing.T, cq *monocq.CQ) {
			require.Zero(t, cq.Discard(func(*monocq.CQE) bool { t.Fatal("a CQE of a zero CQ"); return true }))
		},
		"Arm": func(t *testing.T, cq *monocq.CQ) { require.ErrorIs(t, cq.Arm(false), monocq.ErrNoUAR) },
		"Err": func(t *testing.T, cq *monocq.CQ) { require.NoError(t, cq.Err()) },
	} {
		t.Run(name, func(t *testing.T) {
			var cq monocq.CQ
			require.NotPanics(t, func() { fn(t, &cq) })
		})
	}
}
