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

// TestReplyFromAddressedGID: on RoCE ReplyRemote sends from the local GID
// the datagram was addressed to (the GRH's destination GID, of the type
// its header says), as ibv_init_ah_from_wc finds it with
// ibv_find_gid_index, not from the QP's own GID. A QP on an IPv4-mapped
// GID that a peer reached at its link-local GID failed to answer: the
// address handle from an IPv4 source to an IPv6 destination was refused
// (EINVAL).
func TestReplyFromAddressedGID(t *testing.T) {
	const linkLocalV2, ipv4V2 = 1, 3 // the software HCA's RoCE v2 GIDs
	x := newPeers(t, sim.Options{LinkLayer: ctx.LinkLayerEthernet},
		ud.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 64, QKey: 7, GID: ctx.GIDIndex(ipv4V2)})
	e := x.e
	gids1, err := e.Ctx[1].QueryGIDs(1)
	require.NoError(t, err)
	require.Equal(t, ctx.GIDTypeRoCEv2, gids1[linkLocalV2].Type)

	// QP 0 sends from its link-local GID to QP 1's link-local GID.
	ah, err := e.PD[0].CreateAddressHandle(ctx.AddressAttr{Port: 1, GlobalRoute: true,
		DGID: gids1[linkLocalV2].GID, SGIDIndex: linkLocalV2, HopLimit: 64})
	require.NoError(t, err)
	to, err := x.qp[0].RemoteVia(ah, x.qp[1].QPN(), 7)
	require.NoError(t, err)
	require.NoError(t, x.qp[1].PostRecv(1, e.Addr(1, 0), 256, e.LKey(1)))
	require.NoError(t, x.qp[0].PostRecv(2, e.Addr(0, 4096), 256, e.LKey(0)))
	s, err := x.qp[0].Post(1, wqebuilder.Signaled, to)
	require.NoError(t, err)
	require.NoError(t, s.Send().Inline([]byte("question")).FinishBlueFlame())
	require.Equal(t, transport.MatchOK, e.One(x.p[0]).Match)
	in := e.One(x.p[1])
	require.Equal(t, transport.MatchOK, in.Match)

	back, err := x.qp[1].ReplyRemote(&in, e.Mem(1, 0, ud.GRHSize))
	require.NoError(t, err)
	s, err = x.qp[1].Post(2, wqebuilder.Signaled, back)
	require.NoError(t, err)
	require.NoError(t, s.SendImm(99).Inline([]byte("answer")).FinishBlueFlame())
	require.Equal(t, transport.MatchOK, e.One(x.p[1]).Match)
	got := e.One(x.p[0])
	require.Equal(t, transport.MatchOK, got.Match)
	require.Equal(t, uint32(99), got.Immediate)
	// The answer comes from the GID the question went to.
	require.Equal(t, gids1[linkLocalV2].GID[:], e.Mem(0, 4096+8, 16))
	require.NoError(t, back.Close())
	require.NoError(t, to.Close())
	require.NoError(t, ah.Close())

	// A closed QP is refused as such before any GID is looked up, also
	// once its Context is closed.
	require.NoError(t, e.Ctx[1].Close())
	_, err = x.qp[1].ReplyRemote(&in, e.Mem(1, 0, ud.GRHSize))
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.ErrorContains(t, err, "reply remote: QP")
}
