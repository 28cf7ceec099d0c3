package ibpath_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/ibpath"
)

// Nil arguments are refused with ctx.ErrInvalidArgument, as the
// transports refuse them, instead of crashing.
func TestNilArguments(t *testing.T) {
	p := ibpath.Default()
	_, err := ibpath.Local(nil, p, 1, ctx.GIDSelector{})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorIs(t, ibpath.ModifyToInit(nil, p, 0), ctx.ErrInvalidArgument)
	require.ErrorIs(t, ibpath.ModifyToRTR(nil, p), ctx.ErrInvalidArgument)
	require.ErrorIs(t, ibpath.ModifyToRTS(nil, p), ctx.ErrInvalidArgument)
	require.ErrorIs(t, ibpath.ModifyToConnected(nil, p, 0), ctx.ErrInvalidArgument)
	_, err = ibpath.NewAddressCache(nil).AddressHandle(p)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}
