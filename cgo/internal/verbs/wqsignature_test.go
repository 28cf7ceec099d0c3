//go:build cgo && linux

package verbs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestWQSignatureEnvRefused: with MLX5_QP_SIGNATURE or MLX5_SRQ_SIGNATURE
// set (even to "0"), rdma-core creates the queue with WQE signatures that
// the data plane does not write, so the create is refused before rdma-core
// is called; a DCT, which has no work queue, is not. Without the variable
// the call goes on to its other checks (here: no CQ, depth 0).
func TestWQSignatureEnvRefused(t *testing.T) {
	var pd ProtectionDomain
	for _, typ := range []ctx.QPType{ctx.QPTypeRC, ctx.QPTypeUD, ctx.QPTypeDCI} {
		t.Run(typ.String(), func(t *testing.T) {
			t.Setenv(envQPSignature, "0")
			_, err := pd.CreateQueuePair(QPConfig{Type: typ})
			require.ErrorIs(t, err, ctx.ErrNotSupported)
			require.Contains(t, err.Error(), envQPSignature)
		})
	}
	t.Run("DCT", func(t *testing.T) {
		t.Setenv(envQPSignature, "1")
		_, err := pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeDCT})
		require.NotErrorIs(t, err, ctx.ErrNotSupported)
	})
	t.Run("SRQ", func(t *testing.T) {
		t.Setenv(envSRQSignature, "")
		_, err := pd.CreateSRQ(ctx.SRQConfig{Depth: 4})
		require.ErrorIs(t, err, ctx.ErrNotSupported)
		require.Contains(t, err.Error(), envSRQSignature)
	})
	t.Run("unset", func(t *testing.T) {
		_, err := pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeRC})
		require.NotErrorIs(t, err, ctx.ErrNotSupported)
		_, err = pd.CreateSRQ(ctx.SRQConfig{})
		require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	})
}
