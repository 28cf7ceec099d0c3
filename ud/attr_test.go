package ud_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/ud"
)

// TestUDAttributes checks what New asks of the device, as a recording
// provider sees it: INIT with the port and the qkey, RTR, then RTS with
// the send PSN the endpoint reports (the configured one, or a random one
// of 24 bits).
func TestUDAttributes(t *testing.T) {
	e, log := transporttest.NewRecording(t, sim.Options{})
	cq := e.CQ(0, 16)
	for _, cfg := range []ud.Config{
		{SendDepth: 4, RecvDepth: 4, QKey: 0x11223344, PSN: 0xabcdef},
		{SendDepth: 4, QKey: 0x80000001},
	} {
		qp, err := ud.New(e.PD[0], cq, nil, cfg)
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
