package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// On InfiniBand the subnet forwards every packet by its DLID, GRH or not:
// a UD address handle with a GRH reaches the port only with the port's
// LID, and only when the GRH's destination GID is one of the port's.
func TestInfiniBandUDWithGRHNeedsLID(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.udQP(e.pd, 1, qpOpts{})
	b := e.udQP(e.pd2, 1, qpOpts{})
	gids, err := e.c2.QueryGIDs(1)
	require.NoError(t, err)
	other := gids[0].GID
	other[15] ^= 0x55
	lid := lidOf(t, e.c2)
	for _, c := range []struct {
		dlid uint16
		dgid ctx.GID
		data string
	}{
		{0, gids[0].GID, "no LID"},
		{lid + 1, gids[0].GID, "wrong LID"},
		{lid, other, "wrong GID"},
		{lid, gids[0].GID, "routed"},
	} {
		ah, err := e.pd.CreateAddressHandle(ctx.AddressAttr{GlobalRoute: true, DGID: c.dgid, DLID: c.dlid, HopLimit: 64})
		require.NoError(t, err)
		av := ah.AV()
		be.PutUint32(av[prm.AVKey:], 1)
		be.PutUint32(av[prm.AVDQPDCT:], b.qp.QPN()|prm.ExtendedUDAV)
		b.postRecv(dataSeg(100, e.mr2.LKey(), e.addr2(0)))
		a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, av[:], inlineSeg([]byte(c.data)))
	}
	e.run()
	require.Len(t, a.scq.drain(), 4)
	got := b.rcq.one(t)
	require.True(t, got.grh)
	require.Equal(t, []byte("routed"), e.mem2(40, 6))
	require.Equal(t, uint64(3), e.f.Stats().UDDropped)
}

// An RC path with a GRH and DLID 0 does not reach the peer on InfiniBand:
// the requester retries and ends with RETRY_EXC_ERR.
func TestInfiniBandRCWithGRHNeedsLID(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	gids, err := e.c2.QueryGIDs(1)
	require.NoError(t, err)
	mine, err := e.c.QueryGIDs(1)
	require.NoError(t, err)
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: b.qp.QPN(), PathMTU: ctx.MTU1024,
		Path: ctx.AddressAttr{GlobalRoute: true, DGID: gids[0].GID, HopLimit: 64}}))
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 10, RetryCount: 2}))
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: a.qp.QPN(), PathMTU: ctx.MTU1024,
		Path: ctx.AddressAttr{GlobalRoute: true, DGID: mine[0].GID, DLID: lidOf(t, e.c), HopLimit: 64}}))
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 10, RetryCount: 2}))
	i := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte{1}))
	e.run()
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeTransportRetryExc, i)
}
