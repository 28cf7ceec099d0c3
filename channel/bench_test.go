package channel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// The Manual benchmarks run the software HCA in manual mode, stepped by the
// benchmark loop itself, so the time per operation is the channel's (or the
// bare transport's) post and poll plus the model's execution, on one
// goroutine; the difference between the two is what the channel adds. The
// Engine benchmarks use the model's engine goroutine and include the
// hand-off to it.

func manualHosts(b *testing.B) (*sim.Fabric, *host, *host) {
	f := sim.New(sim.Options{Mode: sim.Manual})
	b.Cleanup(func() { _ = f.Close() })
	return f, newHost(b, f, 0, 1<<16), newHost(b, f, 1, 1<<16)
}

func BenchmarkManualChannelRawWrite(b *testing.B) {
	f, a, h := manualHosts(b)
	ca, _ := pair(b, a, h, channel.Options{})
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(b, err)
	req := channel.WriteRequest{Local: a.sge(0, 64), Remote: channel.At(region, 0)}
	b.ReportAllocs()
	for b.Loop() {
		p, err := ca.PostWrite(req)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.RunUntilIdle(); err != nil {
			b.Fatal(err)
		}
		if done, err := p.Poll(); !done || err != nil {
			b.Fatal(done, err)
		}
	}
}

func BenchmarkManualTransportWrite(b *testing.B) {
	f, a, h := manualHosts(b)
	mk := func(x *host) (*rc.QP, *transport.Poller) {
		cq, err := x.dev.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 128})
		require.NoError(b, err)
		qp, err := rc.New(x.pd, cq, rc.Config{SendDepth: 64, RecvDepth: 64})
		require.NoError(b, err)
		p, err := transport.NewPoller(cq)
		require.NoError(b, err)
		require.NoError(b, p.Add(qp))
		return qp, p
	}
	qa, pa := mk(a)
	qb, _ := mk(h)
	require.NoError(b, qa.Connect(qb.Endpoint()))
	require.NoError(b, qb.Connect(qa.Endpoint()))
	raddr, rkey := uint64(h.mr.Addr()), h.mr.RKey()
	laddr, lkey := uint64(a.mr.Addr()), a.mr.LKey()
	b.ReportAllocs()
	var wrid uint64
	for b.Loop() {
		wrid++
		s, err := qa.Post(wrid, wqebuilder.Signaled)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.RdmaWrite(raddr, rkey).SGE(laddr, 64, lkey).FinishBlueFlame(); err != nil {
			b.Fatal(err)
		}
		if err := f.RunUntilIdle(); err != nil {
			b.Fatal(err)
		}
		n := pa.Poll(16, func(c *transport.Completion) {
			if c.WRID != wrid || c.Match != transport.MatchOK {
				b.Fatal("unexpected completion")
			}
		})
		if n != 1 {
			b.Fatal("no completion")
		}
	}
}

func engineChannel(b *testing.B, opts channel.Options) (*host, *channel.Channel, channel.Remote) {
	f := newFabric(b, 2)
	a, h := newHost(b, f, 0, 1<<16), newHost(b, f, 1, 1<<16)
	opts.WaitTimeout = 30 * time.Second
	ca, _ := pair(b, a, h, opts)
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(b, err)
	return a, ca, channel.At(region, 0)
}

func BenchmarkEngineBlockingWrite(b *testing.B) {
	a, ca, remote := engineChannel(b, channel.Options{})
	req := channel.WriteRequest{Local: a.sge(0, 64), Remote: remote}
	b.ReportAllocs()
	for b.Loop() {
		if err := ca.Write(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEngineScope16Writes reports the time per write of a scope that
// posts 16 writes and polls them.
func BenchmarkEngineScope16Writes(b *testing.B) {
	a, ca, remote := engineChannel(b, channel.Options{})
	reqs := make([]channel.WriteRequest, 16)
	for i := range reqs {
		reqs[i] = channel.WriteRequest{Local: a.sge(i*64, 64), Remote: remote}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := ca.Scope(context.Background(), func(s *channel.Scope) error { return s.PostScatterWrite(reqs) }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*16), "ns/write")
}
