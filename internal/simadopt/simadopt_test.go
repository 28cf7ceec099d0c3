package simadopt_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestRegisteredBySim checks that linking package sim fills every hook,
// and that the hooks refuse objects that are not the model's.
func TestRegisteredBySim(t *testing.T) {
	require.NotNil(t, simadopt.CompletionQueue)
	require.NotNil(t, simadopt.ResizeCompletionQueue)
	require.NotNil(t, simadopt.QueuePair)
	require.NotNil(t, simadopt.SharedReceiveQueue)
	require.NotNil(t, simadopt.ProtectionDomainNumber)
	require.NotNil(t, simadopt.QueuePairAttributes)
	require.NotNil(t, simadopt.SharedReceiveQueueNumber)
	require.NotNil(t, simadopt.NeighbourMAC)
	require.NotNil(t, simadopt.LookupMR)
	require.NotNil(t, simadopt.LookupCQ)
	require.NotNil(t, simadopt.LookupSRQ)

	_, ok := simadopt.ProtectionDomainNumber(nil)
	require.False(t, ok)
	_, ok = simadopt.SharedReceiveQueueNumber(nil)
	require.False(t, ok)
	_, _, ok = simadopt.QueuePairAttributes(nil)
	require.False(t, ok)
	_, ok = simadopt.LookupCQ(nil, 1)
	require.False(t, ok)
	_, ok = simadopt.NeighbourMAC(nil, ctx.GID{})
	require.False(t, ok)
	_, err := simadopt.CompletionQueue(nil, simadopt.CQConfig{})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}

// TestNeighbourMAC resolves the GID of an Ethernet port of a fabric to
// that port's MAC address, as the kernel's neighbour resolution does.
func TestNeighbourMAC(t *testing.T) {
	f := sim.New(sim.Options{Mode: sim.Manual, Devices: 2, LinkLayer: ctx.LinkLayerEthernet})
	t.Cleanup(func() { _ = f.Close() })
	c, err := f.Open("sim1")
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	gids, err := c.QueryGIDs(1)
	require.NoError(t, err)
	require.NotEmpty(t, gids)
	want, ok := f.PortMAC("sim1")
	require.True(t, ok)
	got, ok := simadopt.NeighbourMAC(f, gids[0].GID)
	require.True(t, ok)
	require.Equal(t, want, got)
	_, ok = simadopt.NeighbourMAC(f, ctx.GID{0xfe, 0x80, 1})
	require.False(t, ok)
}
