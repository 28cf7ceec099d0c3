package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestPortsOption: Options.Ports gives every HCA that many ports, each
// after the first mirroring port 1 (state, LID, GID table) under its own
// number; a port beyond them is refused by the port and GID queries and
// by address handle creation.
func TestPortsOption(t *testing.T) {
	e := newEnv(t, Options{Ports: 2})
	a, err := e.c.Query()
	require.NoError(t, err)
	require.Equal(t, uint8(2), a.PhysPortCount)
	p1, err := e.c.QueryPort(1)
	require.NoError(t, err)
	p2, err := e.c.QueryPort(2)
	require.NoError(t, err)
	require.Equal(t, uint8(2), p2.Port)
	p2.Port = 1
	require.Equal(t, p1, p2, "port 2 mirrors port 1")
	_, err = e.c.QueryPort(3)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)

	g1, err := e.c.QueryGIDs(1)
	require.NoError(t, err)
	g2, err := e.c.QueryGIDs(2)
	require.NoError(t, err)
	require.Len(t, g2, len(g1))
	for i := range g2 {
		require.Equal(t, uint8(2), g2[i].Port, "GID %d names its port", i)
		require.Equal(t, g1[i].GID, g2[i].GID)
	}
	_, err = e.c.QueryGIDs(3)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)

	ah, err := e.pd.CreateAddressHandle(ctx.AddressAttr{Port: 2, DLID: lidOf(t, e.c2)})
	require.NoError(t, err, "an address handle on port 2")
	require.NoError(t, ah.Close())
	_, err = e.pd.CreateAddressHandle(ctx.AddressAttr{Port: 3, DLID: lidOf(t, e.c2)})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument, "port 3 of a two-port device")

	one := newEnv(t, Options{})
	a, err = one.c.Query()
	require.NoError(t, err)
	require.Equal(t, uint8(1), a.PhysPortCount, "one port by default")
	_, err = one.c.QueryPort(2)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}
