//go:build !cgo || !linux

package verbs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

func TestStubRegisterDMABufNotSupported(t *testing.T) {
	mr, err := (&ProtectionDomain{}).RegisterDMABuf(3, 0, 4096, 0, ctx.AccessLocalWrite)
	require.Nil(t, mr)
	require.ErrorIs(t, err, ctx.ErrNotSupported)
	require.ErrorIs(t, err, ErrUnavailable)
}
