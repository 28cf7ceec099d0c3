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

// TestDCAttributes checks what NewDCI and NewDCT ask of the device, as a
// recording provider sees it: a DCI goes INIT, RTR at the port's MTU, then
// RTS with its timeout, retry counts and RDMA read depth (configured, or
// the defaults); a DCT goes INIT with its remote access, then RTR with the
// port's MTU, its RNR timer and a path from its port (a GRH from its GID
// index on RoCE). Both send from the configured GID index or, unset, from
// the chosen one (RoCE v2 IPv4-mapped, index 3 of the model's RoCE table;
// index 0 on InfiniBand).
func TestDCAttributes(t *testing.T) {
	for _, link := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		t.Run(link.String(), func(t *testing.T) {
			e, log := transporttest.NewRecording(t, sim.Options{LinkLayer: link})
			cq := e.CQ(0, 16)
			named, chosen := uint8(0), uint8(0)
			if link == ctx.LinkLayerEthernet {
				named, chosen = 2, 3
			}
			gids, err := e.Ctx[0].QueryGIDs(1)
			require.NoError(t, err)
			gids1, err := e.Ctx[1].QueryGIDs(1)
			require.NoError(t, err)
			dev, err := e.Ctx[0].Query()
			require.NoError(t, err)
			// The default depth is 16 where the DC requester allows it.
			defRd := uint8(min(16, dev.MaxDCInitRdAtomic))
			for _, c := range []struct {
				name                         string
				cfg                          dc.DCIConfig
				rd, timeout, retry, rnrRetry uint8
				gid                          uint8
			}{
				{"configured", dc.DCIConfig{SendDepth: 4, MaxRdAtomic: 4, Timeout: 9, RetryCount: 3, RNRRetry: 2, GID: ctx.GIDIndex(named)}, 4, 9, 3, 2, named},
				{"defaults", dc.DCIConfig{SendDepth: 4}, defRd, 14, 7, 7, chosen},
				{"negative means 0", dc.DCIConfig{SendDepth: 4, Timeout: -1, RetryCount: -1, RNRRetry: -1}, defRd, 0, 0, 0, chosen},
			} {
				dci, err := dc.NewDCI(e.PD[0], cq, c.cfg)
				require.NoError(t, err, c.name)
				require.Equal(t, gids[c.gid], dci.GID(), c.name)
				qpn := dci.QPN()
				require.Equal(t, []ctx.QPState{ctx.QPStateInit, ctx.QPStateRTR, ctx.QPStateRTS}, log.States(qpn), c.name)
				rtr, _ := log.Last(qpn, ctx.QPStateRTR)
				require.Equal(t, ctx.MTU4096, rtr.PathMTU, c.name)
				rts, _ := log.Last(qpn, ctx.QPStateRTS)
				require.Equal(t, c.rd, rts.MaxRdAtomic, c.name)
				require.Equal(t, c.timeout, rts.Timeout, c.name)
				require.Equal(t, c.retry, rts.RetryCount, c.name)
				require.Equal(t, c.rnrRetry, rts.RNRRetry, c.name)
				require.NoError(t, dci.Close())
			}

			srq, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: 4})
			require.NoError(t, err)
			for _, c := range []struct {
				name   string
				cfg    dc.DCTConfig
				access ctx.Access
				rnr    uint8
				gid    uint8
			}{
				{"configured", dc.DCTConfig{SRQ: srq, Key: 1, RemoteAccess: ctx.AccessRemoteRead, MinRNRTimer: 5, GID: ctx.GIDIndex(named)}, ctx.AccessRemoteRead, 5, named},
				{"defaults", dc.DCTConfig{SRQ: srq, Key: 2}, ctx.AccessRemoteWrite | ctx.AccessRemoteRead | ctx.AccessRemoteAtomic, 12, chosen},
				{"negative means 0", dc.DCTConfig{SRQ: srq, Key: 3, MinRNRTimer: -1}, ctx.AccessRemoteWrite | ctx.AccessRemoteRead | ctx.AccessRemoteAtomic, 0, chosen},
			} {
				dct, err := dc.NewDCT(e.PD[1], e.CQ(1, 16), c.cfg)
				require.NoError(t, err, c.name)
				n := dct.QPN()
				require.Equal(t, []ctx.QPState{ctx.QPStateInit, ctx.QPStateRTR}, log.States(n), c.name)
				init, _ := log.Last(n, ctx.QPStateInit)
				require.Equal(t, c.access, init.Access, c.name)
				rtr, _ := log.Last(n, ctx.QPStateRTR)
				require.Equal(t, ctx.MTU4096, rtr.PathMTU, c.name)
				require.Equal(t, c.rnr, rtr.MinRNRTimer, c.name)
				path := ctx.AddressAttr{Port: 1}
				if link == ctx.LinkLayerEthernet {
					path.GlobalRoute, path.SGIDIndex, path.HopLimit = true, c.gid, 64
				}
				require.Equal(t, path, rtr.Path, c.name)
				ep := dct.Endpoint()
				require.Equal(t, c.gid, ep.GIDIndex, "%s: the endpoint says which GID", c.name)
				require.Equal(t, gids1[c.gid].GID, ep.GID, c.name)
				require.Equal(t, gids1[c.gid], dct.GID(), c.name)
				require.Equal(t, n, ep.DCTNumber, c.name)
				require.Equal(t, c.cfg.Key, ep.DCAccessKey, c.name)
				require.NoError(t, dct.Close())
			}
		})
	}
}

// TestDCReadAtomicDepth checks that a DCI's RDMA read/atomic depth is
// bounded by DC's own requester depth, which the device reports apart
// from RC's: on the software HCA (a ConnectX-5: both 16) a DCI asking for
// one more is refused, naming the knob, and one asking for the depth gets
// it at RTS.
func TestDCReadAtomicDepth(t *testing.T) {
	e, log := transporttest.NewRecording(t, sim.Options{})
	dev, err := e.Ctx[0].Query()
	require.NoError(t, err)
	require.NotZero(t, dev.MaxDCInitRdAtomic)
	require.NotZero(t, dev.MaxDCRdAtomic)
	cq := e.CQ(0, 16)

	_, err = dc.NewDCI(e.PD[0], cq, dc.DCIConfig{SendDepth: 4, MaxRdAtomic: int(dev.MaxDCInitRdAtomic) + 1})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Contains(t, err.Error(), "reads/atomics")

	dci, err := dc.NewDCI(e.PD[0], cq, dc.DCIConfig{SendDepth: 4, MaxRdAtomic: int(dev.MaxDCInitRdAtomic)})
	require.NoError(t, err)
	rts, ok := log.Last(dci.QPN(), ctx.QPStateRTS)
	require.True(t, ok)
	require.Equal(t, uint8(dev.MaxDCInitRdAtomic), rts.MaxRdAtomic)
	require.NoError(t, dci.Close())

	dci, err = dc.NewDCI(e.PD[0], cq, dc.DCIConfig{SendDepth: 4})
	require.NoError(t, err)
	rts, _ = log.Last(dci.QPN(), ctx.QPStateRTS)
	require.Equal(t, uint8(min(16, dev.MaxDCInitRdAtomic)), rts.MaxRdAtomic, "the default stays within DC's depth")
	require.NoError(t, dci.Close())
}
