package ud_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

func TestSendAndReply(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	var qps [2]*ud.QP
	var ps [2]*transport.Poller
	for i := range 2 {
		cq, p := newPoller(e, i, 256)
		qp, err := ud.New(e.PD[i], cq, ud.Config{SendDepth: 16, RecvDepth: 16, QKey: 0x42, MaxInline: 64})
		require.NoError(t, err)
		require.NoError(t, p.Add(qp))
		qps[i], ps[i] = qp, p
	}
	require.NoError(t, qps[1].PostRecv(9, e.Addr(1, 0), 1024, e.LKey(1)))
	require.NoError(t, qps[0].PostRecv(8, e.Addr(0, 4096), 1024, e.LKey(0)))
	r, err := qps[0].NewRemote(qps[1].Endpoint())
	require.NoError(t, err)
	s, err := qps[0].Post(1, wqebuilder.Signaled, r)
	require.NoError(t, err)
	require.NoError(t, s.SendImm(77).Inline([]byte("ping")).FinishBlueFlame())
	got := e.Drain(ps[1])
	require.Len(t, got, 1)
	c := got[0]
	require.NoError(t, c.Err())
	require.Equal(t, uint32(ud.GRHSize+4), c.ByteCount)
	require.Equal(t, "ping", string(e.Mem(1, ud.GRHSize, 4)))
	back, err := qps[1].ReplyRemote(&c, e.Mem(1, 0, ud.GRHSize))
	require.NoError(t, err)
	s, err = qps[1].Post(2, wqebuilder.Signaled, back)
	require.NoError(t, err)
	require.NoError(t, s.Send().Inline([]byte("pong")).FinishBlueFlame())
	e.Drain(ps[1])
	got = e.Drain(ps[0])
	require.Len(t, got, 2)
	require.Equal(t, "pong", string(e.Mem(0, 4096+ud.GRHSize, 4)))
}
