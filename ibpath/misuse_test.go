package ibpath_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/ibpath"
)

// The address cache does not hand out a handle that was closed under it
// (with its PD, or its Context): it drops the entry and tries to create
// the handle again, which on a closed PD fails with ctx.ErrClosed.
func TestAddressCacheClosedHandle(t *testing.T) {
	f := newFabric(t, ctx.LinkLayerInfiniBand)
	n := newNode(t, f, "sim0")
	pd, err := n.dev.AllocProtectionDomain()
	require.NoError(t, err)
	c := ibpath.NewAddressCache(pd)
	p := ibpath.Default()
	p.DLID = 1
	ah, err := c.AddressHandle(p)
	require.NoError(t, err)
	require.NoError(t, pd.Close())
	require.True(t, ah.Closed())

	got, err := c.AddressHandle(p)
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.Nil(t, got)
	require.Zero(t, c.Len())
	require.NoError(t, c.Close())
}
