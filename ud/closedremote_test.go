package ud_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/ud"
)

// TestNewRemoteOnClosedQP: NewRemote on a closed UD QP is refused with
// ctx.ErrClosed naming the call, and makes no address handle; before, it
// succeeded and the handle leaked until the protection domain closed.
func TestNewRemoteOnClosedQP(t *testing.T) {
	e, log := transporttest.NewRecording(t, sim.Options{})
	cq := e.CQ(0, 16)
	a, err := ud.New(e.PD[0], cq, ud.Config{SendDepth: 4, RecvDepth: 4, QKey: 0x11})
	require.NoError(t, err)
	b, err := ud.New(e.PD[0], cq, ud.Config{SendDepth: 4, RecvDepth: 4, QKey: 0x11})
	require.NoError(t, err)
	defer b.Close()
	r, err := a.NewRemote(b.Endpoint())
	require.NoError(t, err)
	require.NoError(t, r.Close())
	made := len(log.AddressHandles())
	require.NoError(t, a.Close())
	r, err = a.NewRemote(b.Endpoint())
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.ErrorContains(t, err, "new remote")
	require.Nil(t, r)
	require.Len(t, log.AddressHandles(), made, "an address handle was made for a closed QP")
}
