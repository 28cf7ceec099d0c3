package dc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// TestNewRemoteOnClosedDCI: NewRemote on a closed DCI is refused with
// ctx.ErrClosed naming the call, and makes no address handle; before, it
// succeeded and the handle leaked until the protection domain closed.
func TestNewRemoteOnClosedDCI(t *testing.T) {
	e, log := transporttest.NewRecording(t, sim.Options{})
	cq := e.CQ(0, 16)
	srq, err := transport.NewSharedReceiveQueue(e.PD[0], ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	dct, err := dc.NewDCT(e.PD[0], cq, dc.DCTConfig{SRQ: srq, Key: 1})
	require.NoError(t, err)
	dci, err := dc.NewDCI(e.PD[0], cq, dc.DCIConfig{SendDepth: 4})
	require.NoError(t, err)
	r, err := dci.NewRemote(dct.Endpoint())
	require.NoError(t, err)
	require.NoError(t, r.Close())
	made := len(log.AddressHandles())
	require.NoError(t, dci.Close())
	r, err = dci.NewRemote(dct.Endpoint())
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.ErrorContains(t, err, "new remote")
	require.Nil(t, r)
	require.Len(t, log.AddressHandles(), made, "an address handle was made for a closed DCI")
}
