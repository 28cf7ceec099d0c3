package rc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// TestConnectAttributes checks what New and Connect ask of the device, as
// a recording provider sees it: INIT with the port and remote access, RTR
// with the remote QPN, its PSN, the path (by LID on InfiniBand, by GID on
// RoCE from the configured GID index, or unset from the chosen one: RoCE v2
// IPv4-mapped, index 3 of the model's table, not index 0; with the
// configured SL), the smaller of
// the two MTUs, the RNR timer and the responder's RDMA read depth, then RTS
// with this QP's PSN, timeout, retry counts and RDMA read depth: the knobs
// as configured on one side, their defaults on the other.
func TestConnectAttributes(t *testing.T) {
	for _, link := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		t.Run(link.String(), func(t *testing.T) {
			e, log := transporttest.NewRecording(t, sim.Options{LinkLayer: link})
			// a names its GID, b leaves it to the choice.
			gidA, gidB := uint8(0), uint8(0)
			if link == ctx.LinkLayerEthernet {
				// RoCE v1 IPv4-mapped; RoCE v2 IPv4-mapped: one IP
				// family, as a path on RoCE needs (ib_resolve_eth_dmac).
				gidA, gidB = 2, 3
			}
			a, err := rc.New(e.PD[0], e.CQ(0, 16), rc.Config{SendDepth: 4, PSN: 0x123456, SL: 1,
				GID: ctx.GIDIndex(gidA), RemoteAccess: ctx.AccessRemoteRead, MaxRdAtomic: 4, MinRNRTimer: 5,
				Timeout: 9, RetryCount: 3, RNRRetry: 2})
			require.NoError(t, err)
			b, err := rc.New(e.PD[1], e.CQ(1, 16), rc.Config{SendDepth: 4, RecvDepth: 4, PSN: 0x654321})
			require.NoError(t, err)
			epA, epB := a.Endpoint(), b.Endpoint()
			for i, c := range []struct {
				qp  *rc.QP
				ep  endpoint.Endpoint
				gid uint8
			}{{a, epA, gidA}, {b, epB, gidB}} {
				gids, err := e.Ctx[i].QueryGIDs(1)
				require.NoError(t, err)
				require.Equal(t, gids[c.gid], c.qp.GID(), "QP %d: the GID it sends from", i)
				require.Equal(t, c.gid, c.ep.GIDIndex, "QP %d: the endpoint says which GID", i)
				require.Equal(t, gids[c.gid].GID, c.ep.GID, "QP %d", i)
			}
			require.Equal(t, uint32(0x123456), epA.PSN)
			require.Equal(t, uint32(0x654321), epB.PSN)
			require.Equal(t, ctx.MTU4096, epB.MTU)

			// a sees b behind a path of 1024 bytes.
			narrow := epB
			narrow.MTU = ctx.MTU1024
			require.NoError(t, a.Connect(narrow))
			require.NoError(t, b.Connect(epA))

			path := func(to endpoint.Endpoint, sl, sgid uint8) ctx.AddressAttr {
				p := ctx.AddressAttr{Port: 1, SL: sl}
				if link == ctx.LinkLayerEthernet {
					p.GlobalRoute, p.DGID, p.SGIDIndex, p.HopLimit = true, to.GID, sgid, 64
				} else {
					p.DLID = to.LID
				}
				return p
			}
			if link == ctx.LinkLayerInfiniBand {
				require.NotZero(t, epB.LID)
			} else {
				require.NotEqual(t, ctx.GID{}, epB.GID)
			}
			for _, c := range []struct {
				name     string
				qp       *rc.QP
				remote   endpoint.Endpoint
				access   ctx.Access
				mtu      ctx.MTU
				sl       uint8
				rnrTimer uint8
				rd       uint8
				timeout  uint8
				retry    uint8
				rnrRetry uint8
				sgid     uint8
			}{
				{"configured", a, epB, ctx.AccessRemoteRead, ctx.MTU1024, 1, 5, 4, 9, 3, 2, gidA},
				{"defaults", b, epA, ctx.AccessRemoteWrite | ctx.AccessRemoteRead | ctx.AccessRemoteAtomic, ctx.MTU4096, 0, 12, 16, 14, 7, 7, gidB},
			} {
				qpn := c.qp.QPN()
				require.Equal(t, []ctx.QPState{ctx.QPStateInit, ctx.QPStateRTR, ctx.QPStateRTS}, log.States(qpn), c.name)
				init, _ := log.Last(qpn, ctx.QPStateInit)
				require.Equal(t, uint8(1), init.Port, c.name)
				require.Equal(t, c.access, init.Access, c.name)

				rtr, _ := log.Last(qpn, ctx.QPStateRTR)
				require.Equal(t, c.remote.QPN, rtr.RemoteQPN, c.name)
				require.Equal(t, c.remote.PSN, rtr.RQPSN, "%s: RTR expects the remote's first PSN", c.name)
				require.Equal(t, c.mtu, rtr.PathMTU, "%s: the smaller MTU", c.name)
				require.Equal(t, path(c.remote, c.sl, c.sgid), rtr.Path, c.name)
				require.Equal(t, c.rnrTimer, rtr.MinRNRTimer, c.name)
				require.Equal(t, c.rd, rtr.MaxDestRdAtomic, "%s: responder RDMA read depth", c.name)

				rts, _ := log.Last(qpn, ctx.QPStateRTS)
				ep := c.qp.Endpoint()
				require.Equal(t, ep.PSN, rts.SQPSN, "%s: RTS sends from the PSN the endpoint reports", c.name)
				require.Equal(t, c.timeout, rts.Timeout, c.name)
				require.Equal(t, c.retry, rts.RetryCount, c.name)
				require.Equal(t, c.rnrRetry, rts.RNRRetry, c.name)
				require.Equal(t, c.rd, rts.MaxRdAtomic, "%s: initiator RDMA read depth", c.name)
			}
		})
	}
}

// TestConnectRefusesNoAddress: a remote endpoint that gives no address the
// port can use (neither a LID nor a GID on InfiniBand, no GID on RoCE: a
// peer's endpoint says what it likes), or a multicast or the permissive
// LID on InfiniBand, is refused before anything changes, and the QP then
// connects to the real peer; before, Connect moved the QP to RTS towards
// the zero GID or the multicast LID, and its first send failed half a
// second later with RETRY_EXC_ERR.
func TestConnectRefusesNoAddress(t *testing.T) {
	for _, link := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		t.Run(link.String(), func(t *testing.T) {
			e := transporttest.New(t, sim.Options{LinkLayer: link})
			a, err := rc.New(e.PD[0], e.CQ(0, 16), rc.Config{SendDepth: 4})
			require.NoError(t, err)
			b, err := rc.New(e.PD[1], e.CQ(1, 16), rc.Config{SendDepth: 4})
			require.NoError(t, err)
			bad := b.Endpoint()
			bad.GID = ctx.GID{}
			if link == ctx.LinkLayerInfiniBand {
				bad.LID = 0
			}
			require.ErrorIs(t, a.Connect(bad), ctx.ErrInvalidArgument)
			require.Equal(t, transport.StateInit, a.State(), "the refused Connect changed the QP")
			if link == ctx.LinkLayerInfiniBand {
				for _, lid := range []uint16{0xc000, 0xfffe, 0xffff} {
					mc := b.Endpoint()
					mc.LID = lid
					require.ErrorIs(t, a.Connect(mc), ctx.ErrInvalidArgument, "LID %#x", lid)
				}
				// A GID does not stand for the LID: the subnet forwards
				// by DLID, GRH or not.
				noLID := b.Endpoint()
				noLID.LID = 0
				require.NotEqual(t, ctx.GID{}, noLID.GID)
				require.ErrorIs(t, a.Connect(noLID), ctx.ErrInvalidArgument, "a GID without a LID")
				require.Equal(t, transport.StateInit, a.State())
			}
			require.NoError(t, a.Connect(b.Endpoint()))
			require.NoError(t, b.Connect(a.Endpoint()))
		})
	}
}
