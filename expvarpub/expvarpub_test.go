package expvarpub_test

import (
	"context"
	"encoding/json"
	"expvar"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/expvarpub"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// published reads the variable through expvar and decodes its JSON.
func published(t *testing.T, name string) map[string]map[string]any {
	t.Helper()
	v := expvar.Get(name)
	require.NotNil(t, v, "expvar %q", name)
	var out map[string]map[string]any
	require.NoError(t, json.Unmarshal([]byte(v.String()), &out), v.String())
	return out
}

func TestPublish(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	var qp [2]*rc.QP
	var p [2]*transport.Poller
	for i := range 2 {
		cq := e.CQ(i, 64)
		var err error
		p[i], err = transport.NewPoller(cq)
		require.NoError(t, err)
		qp[i], err = rc.New(e.PD[i], cq, rc.Config{SendDepth: 16, RecvDepth: 16, MaxInline: 64})
		require.NoError(t, err)
		require.NoError(t, p[i].Add(qp[i]))
	}
	require.NoError(t, qp[0].Connect(qp[1].Endpoint()))
	require.NoError(t, qp[1].Connect(qp[0].Endpoint()))
	qp[0].EnableCounters()
	p[0].EnableCounters()

	pub, err := expvarpub.New("mlx5kit_test_publish")
	require.NoError(t, err)
	require.Equal(t, "mlx5kit_test_publish", pub.Name())
	require.NoError(t, pub.AddQueue("rc0", qp[0]))
	require.NoError(t, pub.AddPoller("cq0", p[0]))
	require.ErrorIs(t, pub.AddQueue("rc0", qp[1]), expvarpub.ErrExists)
	require.Error(t, pub.AddQueue("", qp[1]))
	require.Error(t, pub.AddQueue("nil", nil))
	calls := 0
	require.NoError(t, pub.AddFunc("live", func() any { calls++; return map[string]int{"calls": calls} }))

	got := published(t, "mlx5kit_test_publish")
	require.Equal(t, 0.0, got["rc0"]["Posts"])
	require.Equal(t, 1.0, got["live"]["calls"])

	for i := range 3 {
		s, err := qp[0].Post(uint64(i), wqebuilder.Signaled)
		require.NoError(t, err)
		rkey := e.RKey(1)
		if i == 2 {
			rkey ^= 0xff00 // the last one fails at the peer
		}
		require.NoError(t, s.RdmaWrite(e.Addr(1, 0), rkey).Inline([]byte("x")).FinishBlueFlame())
		e.Drain(p[0])
	}
	// Not refreshed yet: the snapshot is the old one.
	require.Equal(t, 0.0, published(t, "mlx5kit_test_publish")["rc0"]["Posts"])
	require.Zero(t, testing.AllocsPerRun(20, pub.Refresh))
	got = published(t, "mlx5kit_test_publish")
	q := qp[0].Counters()
	require.Equal(t, float64(q.Posts), got["rc0"]["Posts"])
	require.Equal(t, 3.0, got["rc0"]["Posts"])
	require.Equal(t, float64(q.BlueFlameCopies), got["rc0"]["BlueFlameCopies"])
	require.Equal(t, float64(q.SendCompletions), got["rc0"]["SendCompletions"])
	require.Equal(t, map[string]any{"total": 1.0, "REMOTE_ACCESS_ERR": 1.0}, got["rc0"]["Errors"])
	require.Equal(t, true, got["rc0"]["RetriesCounted"])
	require.Equal(t, float64(p[0].Counters().Completions), got["cq0"]["Completions"])
	require.Equal(t, 3.0, got["cq0"]["Completions"])

	require.True(t, pub.Remove("rc0"))
	require.False(t, pub.Remove("rc0"))
	require.NotContains(t, published(t, "mlx5kit_test_publish"), "rc0")

	_, err = expvarpub.New("mlx5kit_test_publish")
	require.ErrorIs(t, err, expvarpub.ErrExists)
}

func TestPublishChannel(t *testing.T) {
	f := sim.New(sim.Options{Mode: sim.Engine, Devices: 2})
	t.Cleanup(func() { _ = f.Close() })
	var chans [2]*channel.Channel
	var prep [2]*channel.Prepared
	for i := range 2 {
		c, err := f.Open([]string{"sim0", "sim1"}[i])
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		pd, err := c.AllocProtectionDomain()
		require.NoError(t, err)
		prep[i], err = channel.New(pd, channel.Options{Counters: true})
		require.NoError(t, err)
	}
	for i := range 2 {
		var err error
		chans[i], err = prep[i].Handshake(prep[1-i].Endpoint())
		require.NoError(t, err)
		t.Cleanup(func() { _ = chans[i].Close() })
	}
	buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	mr, err := chans[0].ProtectionDomain().RegisterBuffer(buf, ctx.AccessLocalWrite)
	require.NoError(t, err)
	rbuf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rbuf.Close() })
	rmr, err := chans[1].ProtectionDomain().RegisterBuffer(rbuf, ctx.AccessLocalWrite)
	require.NoError(t, err)

	pub, err := expvarpub.New("mlx5kit_test_channel")
	require.NoError(t, err)
	require.NoError(t, pub.AddChannel("ch0", chans[0]))
	rp, err := chans[1].PostReceive(channel.RecvRequest{Local: []channel.SGE{channel.Slice(rmr, 0, 64)}})
	require.NoError(t, err)
	require.NoError(t, chans[0].Send(context.Background(), channel.SendRequest{Local: []channel.SGE{channel.Slice(mr, 0, 8)}}))
	require.NoError(t, rp.Wait(context.Background()))
	pub.Refresh()
	var got map[string]struct {
		CQ     transport.CQCounters
		Queues struct{ Posts, SendCompletions uint64 }
	}
	require.NoError(t, json.Unmarshal([]byte(expvar.Get("mlx5kit_test_channel").String()), &got))
	require.Equal(t, uint64(1), got["ch0"].Queues.Posts)
	require.Equal(t, uint64(1), got["ch0"].Queues.SendCompletions)
	require.Equal(t, chans[0].Counters().CQ.Completions, got["ch0"].CQ.Completions)
}
