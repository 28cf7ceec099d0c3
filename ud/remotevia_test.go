package ud_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestRemoteVia: a Remote over an address handle the caller keeps sends
// like one from NewRemote, leaves the handle open when it is closed, and
// bad arguments are refused.
func TestRemoteVia(t *testing.T) {
	x := newPeers(t, sim.Options{}, ud.Config{SendDepth: 4, RecvDepth: 4, MaxInline: 64, QKey: 0x1234})
	own, err := x.qp[0].NewRemote(x.qp[1].Endpoint())
	require.NoError(t, err)
	defer own.Close()
	ah, err := x.e.PD[0].CreateAddressHandle(ctx.AddressAttr{Port: 1, DLID: x.qp[1].Endpoint().LID})
	require.NoError(t, err)
	r, err := x.qp[0].RemoteVia(ah, x.qp[1].QPN(), 0x1234)
	require.NoError(t, err)
	require.Equal(t, x.qp[1].QPN(), r.QPN())
	require.Equal(t, uint32(0x1234), r.QKey())

	require.NoError(t, x.qp[1].PostRecv(1, x.e.Addr(1, 0), 256, x.e.LKey(1)))
	s, err := x.qp[0].Post(7, wqebuilder.Signaled, r)
	require.NoError(t, err)
	require.NoError(t, s.Send().Inline([]byte("via")).FinishBlueFlame())
	require.Equal(t, transport.MatchOK, x.e.One(x.p[0]).Match)
	got := x.e.One(x.p[1])
	require.Equal(t, transport.MatchOK, got.Match)
	require.Equal(t, x.qp[0].QPN(), got.SourceQPN)
	require.Equal(t, "via", string(x.e.Mem(1, ud.GRHSize, 3)))

	require.NoError(t, r.Close())
	require.False(t, ah.Closed(), "the Remote borrowed the handle")
	require.NoError(t, ah.Close())

	_, err = x.qp[0].RemoteVia(nil, 1, 1)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = x.qp[0].RemoteVia(ah, 1, 1)
	require.ErrorIs(t, err, ctx.ErrClosed)
	ah2, err := x.e.PD[0].CreateAddressHandle(ctx.AddressAttr{Port: 1, DLID: 1})
	require.NoError(t, err)
	defer ah2.Close()
	_, err = x.qp[0].RemoteVia(ah2, 1<<24, 1)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)

	// A handle of another protection domain, a zero QP and a closed one.
	require.NotSame(t, x.e.PD[0], x.e.PD[1])
	other, err := x.e.PD[1].CreateAddressHandle(ctx.AddressAttr{Port: 1, DLID: 1})
	require.NoError(t, err)
	defer other.Close()
	require.Same(t, x.e.PD[1], other.ProtectionDomain())
	_, err = x.qp[0].RemoteVia(other, 1, 1)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "another protection domain")
	_, err = new(ud.QP).RemoteVia(ah2, 1, 1)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.NoError(t, x.qp[0].Close())
	_, err = x.qp[0].RemoteVia(ah2, 1, 1)
	require.ErrorIs(t, err, ctx.ErrClosed)
}
