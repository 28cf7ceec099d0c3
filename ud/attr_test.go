package ud_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/kerrno"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestUDAttributes checks what New asks of the device, as a recording
// provider sees it: INIT with the port and the qkey, RTR, then RTS with
// the send PSN the endpoint reports (the configured one, or a random one
// of 24 bits).
func TestUDAttributes(t *testing.T) {
	// A controlled Q_Key (bit 31) needs CAP_NET_RAW at ibv_modify_qp, on
	// the model as in the kernel: hold it whoever runs the test.
	saved := kerrno.HasRawCap
	t.Cleanup(func() { kerrno.HasRawCap = saved })
	kerrno.HasRawCap = func() bool { return true }
	e, log := transporttest.NewRecording(t, sim.Options{})
	cq := e.CQ(0, 16)
	for _, cfg := range []ud.Config{
		{SendDepth: 4, RecvDepth: 4, QKey: 0x11223344, PSN: 0xabcdef},
		{SendDepth: 4, QKey: 0x80000001},
	} {
		qp, err := ud.New(e.PD[0], cq, cfg)
		require.NoError(t, err)
		qpn := qp.QPN()
		require.Equal(t, []ctx.QPState{ctx.QPStateInit, ctx.QPStateRTR, ctx.QPStateRTS}, log.States(qpn))
		init, _ := log.Last(qpn, ctx.QPStateInit)
		require.Equal(t, uint8(1), init.Port)
		require.Equal(t, cfg.QKey, init.QKey)
		rts, _ := log.Last(qpn, ctx.QPStateRTS)
		ep := qp.Endpoint()
		require.Equal(t, ep.PSN, rts.SQPSN)
		require.NotZero(t, rts.SQPSN)
		require.LessOrEqual(t, rts.SQPSN, uint32(0xffffff))
		if cfg.PSN != 0 {
			require.Equal(t, cfg.PSN, rts.SQPSN)
		}
		require.Equal(t, cfg.QKey, ep.QKey)
		require.Equal(t, cfg.QKey, qp.QKey())
		require.NoError(t, qp.Close())
	}
}

// TestRemoteAddresses checks the address handles NewRemote and ReplyRemote
// create, as a recording provider sees them. NewRemote: the remote's LID
// and the configured SL on InfiniBand (a remote without a LID is refused
// there; a GRH comes from the caller's address handle), its GID from the
// configured GID index with a GRH on RoCE. ReplyRemote,
// as ibv_init_ah_from_wc: the sender's LID and SL from the completion and,
// when a GRH came, a GRH back to its source GID with hop limit 255 from the
// QP's GID index. The GID index is the configured one or, unset, the
// chosen one: RoCE v2 IPv4-mapped, index 3 of the model's RoCE table (not
// index 0, RoCE v1 link-local); index 0 on InfiniBand.
func TestRemoteAddresses(t *testing.T) {
	for _, c := range []struct {
		name string
		link ctx.LinkLayer
		grh  bool
		sel  ctx.GIDSelector
		gid  uint8
	}{
		{"InfiniBand by LID", ctx.LinkLayerInfiniBand, false, ctx.GIDSelector{}, 0},
		{"InfiniBand with a GRH", ctx.LinkLayerInfiniBand, true, ctx.GIDSelector{}, 0},
		{"RoCE", ctx.LinkLayerEthernet, false, ctx.GIDSelector{}, 3},
		{"RoCE with a GID index", ctx.LinkLayerEthernet, false, ctx.GIDIndex(5), 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, log := transporttest.NewRecording(t, sim.Options{LinkLayer: c.link})
			var qps [2]*ud.QP
			var ps [2]*transport.Poller
			for i := range 2 {
				cq, p := newPoller(e, i, 16)
				qp, err := ud.New(e.PD[i], cq, ud.Config{SendDepth: 4, RecvDepth: 4, MaxInline: 64, QKey: 7, SL: uint8(2 + i), GID: c.sel})
				require.NoError(t, err)
				gids, err := e.Ctx[i].QueryGIDs(1)
				require.NoError(t, err)
				require.Equal(t, gids[c.gid], qp.GID())
				require.Equal(t, c.gid, qp.Endpoint().GIDIndex, "the endpoint says which GID")
				require.NoError(t, p.Add(qp))
				qps[i], ps[i] = qp, p
			}
			from, ep := qps[0].Endpoint(), qps[1].Endpoint()
			grh := c.grh || c.link == ctx.LinkLayerEthernet
			want := ctx.AddressAttr{Port: 1, SL: 2, DLID: ep.LID}
			var to *ud.Remote
			if c.grh {
				// On InfiniBand a GRH goes with the port's LID: an
				// endpoint without one is refused, and the GRH comes
				// from an address handle of the caller's.
				noLID := ep
				noLID.LID = 0
				_, err := qps[0].NewRemote(noLID)
				require.ErrorIs(t, err, ctx.ErrInvalidArgument, "no LID on InfiniBand")
				want = ctx.AddressAttr{Port: 1, SL: 2, DLID: ep.LID, GlobalRoute: true, DGID: ep.GID, SGIDIndex: c.gid, HopLimit: 64}
				ah, err := e.PD[0].CreateAddressHandle(want)
				require.NoError(t, err)
				to, err = qps[0].RemoteVia(ah, ep.QPN, ep.QKey)
				require.NoError(t, err)
			} else {
				var err error
				to, err = qps[0].NewRemote(ep)
				require.NoError(t, err)
				if grh {
					want = ctx.AddressAttr{Port: 1, SL: 2, GlobalRoute: true, DGID: ep.GID, SGIDIndex: c.gid, HopLimit: 64}
				}
			}
			ahs := log.AddressHandles()
			require.Equal(t, want, ahs[len(ahs)-1], "NewRemote")

			require.NoError(t, qps[1].PostRecv(1, e.Addr(1, 0), 256, e.LKey(1)))
			s, err := qps[0].Post(1, wqebuilder.Signaled, to)
			require.NoError(t, err)
			require.NoError(t, s.Send().Inline([]byte("question")).FinishBlueFlame())
			e.One(ps[0])
			in := e.One(ps[1])
			require.Equal(t, transport.MatchOK, in.Match)
			require.Equal(t, grh, in.GRH)
			require.Equal(t, from.LID, in.SLID)
			_, err = qps[1].ReplyRemote(&in, e.Mem(1, 0, ud.GRHSize))
			require.NoError(t, err)
			want = ctx.AddressAttr{Port: 1, SL: in.SL, DLID: in.SLID}
			if grh {
				want.GlobalRoute, want.DGID, want.SGIDIndex, want.HopLimit = true, from.GID, c.gid, 0xff
			}
			ahs = log.AddressHandles()
			require.Equal(t, want, ahs[len(ahs)-1], "ReplyRemote")
			// The path bits a datagram arrived on (a port with LMC > 0)
			// are the reply's source path bits.
			in.PathBits = 1
			_, err = qps[1].ReplyRemote(&in, e.Mem(1, 0, ud.GRHSize))
			require.NoError(t, err)
			want.SrcPathBits = 1
			ahs = log.AddressHandles()
			require.Equal(t, want, ahs[len(ahs)-1], "ReplyRemote with path bits")
		})
	}
}
