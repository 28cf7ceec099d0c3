package emulate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestErrUnavailableInEveryBuild: the sentinel is declared whatever the
// build (this file has no build constraint, so it fails to compile where
// it is missing) and matches ctx.ErrNotSupported.
func TestErrUnavailableInEveryBuild(t *testing.T) {
	require.ErrorIs(t, emulate.ErrUnavailable, ctx.ErrNotSupported)
	if !emulate.Enabled() {
		return
	}
	require.NotErrorIs(t, emulate.Enable(), emulate.ErrUnavailable)
}
