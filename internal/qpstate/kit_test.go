package qpstate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
)

// requireLegalWalk checks that every modify the transports made on QP qpn
// of type typ, from RESET on, is a transition the kernel accepts.
func requireLegalWalk(t *testing.T, log *transporttest.Log, typ ctx.QPType, qpn uint32, want []ctx.QPState) {
	t.Helper()
	got := log.States(qpn)
	require.Equal(t, want, got, "%v QP %#x", typ, qpn)
	from := ctx.QPStateReset
	for _, to := range got {
		r := qpstate.Lookup(typ, from, to)
		require.True(t, r.Legal, "%v QP %#x: %v→%v is refused by %s (%s)", typ, qpn, from, to, r.Source, r.Why)
		from = to
	}
}

// TestKitTransitionsAreLegal runs the set-up, error and reset paths of the
// transports (rc connect, Fail, Reset and reconnect; ud set-up and Fail; a
// DCI's set-up and Fail; a DCT's set-up and Close) on the software HCA
// through a recording provider, and checks every transition they asked for
// against the kernel's table: none moves a DCT past RTR, resets a DCI, or
// moves a QP from RESET to ERR.
func TestKitTransitionsAreLegal(t *testing.T) {
	e, log := transporttest.NewRecording(t, sim.Options{})
	R, I, RTR, RTS, E := ctx.QPStateReset, ctx.QPStateInit, ctx.QPStateRTR, ctx.QPStateRTS, ctx.QPStateError

	var qps [2]*rc.QP
	for i := range qps {
		cq := e.CQ(i, 64)
		q, err := rc.New(e.PD[i], cq, rc.Config{SendDepth: 8, RecvDepth: 8})
		require.NoError(t, err)
		qps[i] = q
	}
	require.NoError(t, qps[0].Connect(qps[1].Endpoint()))
	require.NoError(t, qps[1].Connect(qps[0].Endpoint()))
	require.NoError(t, qps[0].Fail())
	require.NoError(t, qps[0].Reset())
	require.NoError(t, qps[1].Reset())
	require.NoError(t, qps[0].Connect(qps[1].Endpoint()))
	require.NoError(t, qps[1].Connect(qps[0].Endpoint()))
	requireLegalWalk(t, log, ctx.QPTypeRC, qps[0].QPN(), []ctx.QPState{I, RTR, RTS, E, R, I, RTR, RTS})
	requireLegalWalk(t, log, ctx.QPTypeRC, qps[1].QPN(), []ctx.QPState{I, RTR, RTS, R, I, RTR, RTS})

	ucq := e.CQ(0, 16)
	u, err := ud.New(e.PD[0], ucq, ud.Config{SendDepth: 4, RecvDepth: 4, QKey: 0x11})
	require.NoError(t, err)
	require.NoError(t, u.Fail())
	requireLegalWalk(t, log, ctx.QPTypeUD, u.QPN(), []ctx.QPState{I, RTR, RTS, E})
	require.NoError(t, u.Close())

	dci, err := dc.NewDCI(e.PD[0], e.CQ(0, 16), dc.DCIConfig{SendDepth: 4})
	require.NoError(t, err)
	require.NoError(t, dci.Fail())
	requireLegalWalk(t, log, ctx.QPTypeDCI, dci.QPN(), []ctx.QPState{I, RTR, RTS, E})
	require.NoError(t, dci.Close())

	srq, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	dct, err := dc.NewDCT(e.PD[1], e.CQ(1, 16), dc.DCTConfig{SRQ: srq, Key: 5})
	require.NoError(t, err)
	n := dct.QPN()
	require.NoError(t, dct.Close(), "a DCT is destroyed from RTR")
	requireLegalWalk(t, log, ctx.QPTypeDCT, n, []ctx.QPState{I, RTR})
	require.NoError(t, srq.Close())
}
