package ibpath_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/ibpath"
	"github.com/mlx5kit/mlx5kit/ud"
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

// A zero ud.QP (not made by ud.New) is refused by AddressCache.Remote with
// ctx.ErrInvalidArgument, as ud.QP.RemoteVia refuses it.
func TestAddressCacheRemoteZeroQP(t *testing.T) {
	f := newFabric(t, ctx.LinkLayerInfiniBand)
	n := newNode(t, f, "sim0")
	c := ibpath.NewAddressCache(n.pd)
	t.Cleanup(func() { _ = c.Close() })
	p := ibpath.Default()
	p.DLID = 1
	r, err := c.Remote(&ud.QP{}, p)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Nil(t, r)
	require.Zero(t, c.Len())
}
