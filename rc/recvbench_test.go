package rc_test

import (
	"testing"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// The receive benchmarks time receive posts and receive completions: the
// receiver posts benchBatch receive WQEs (timed), then, with the timer
// stopped, the sender consumes them with as many RDMA writes with
// immediate and the software HCA runs.

// recvRig is an RC pair whose second QP receives, through its own receive
// queue or through an SRQ.
type recvRig struct {
	x   *pair
	srq *transport.SharedReceiveQueue
	rcv *rc.QP
	rp  *transport.Poller
}

func newRecvRig(b *testing.B, shared bool) *recvRig {
	e := transporttest.New(b, sim.Options{})
	if !shared {
		x := connectPair(e, rc.Config{SendDepth: 2 * benchBatch, RecvDepth: benchBatch, MaxRecvSGE: 2, MaxInline: 64})
		return &recvRig{x: x, rcv: x.qp[1], rp: x.p[1]}
	}
	srq, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: benchBatch, MaxSGE: 2})
	if err != nil {
		b.Fatal(err)
	}
	x := &pair{e: e}
	for i := range 2 {
		x.cq[i], x.p[i] = newPoller(e, i, 1024)
		cfg := rc.Config{SendDepth: 2 * benchBatch, MaxInline: 64}
		if i == 1 {
			cfg.SRQ = srq
		}
		if x.qp[i], err = rc.New(e.PD[i], x.cq[i], cfg); err != nil {
			b.Fatal(err)
		}
		if err := x.p[i].Add(x.qp[i]); err != nil {
			b.Fatal(err)
		}
	}
	if err := x.qp[0].Connect(x.qp[1].Endpoint()); err != nil {
		b.Fatal(err)
	}
	if err := x.qp[1].Connect(x.qp[0].Endpoint()); err != nil {
		b.Fatal(err)
	}
	return &recvRig{x: x, srq: srq, rcv: x.qp[1], rp: x.p[1]}
}

// consume sends n RDMA writes with immediate and no payload, which take
// the receiver's posted WQEs, and lets the software HCA run. The receive
// completions are left in the receiver's CQ.
func (g *recvRig) consume(b *testing.B, n int) {
	x := g.x
	raddr, rkey := x.e.Addr(1, 0), x.e.RKey(1)
	for i := range n {
		flags := wqebuilder.Flags(0)
		if i%32 == 31 || i == n-1 {
			flags = wqebuilder.Signaled
		}
		s, err := x.qp[0].Post(uint64(i), flags)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.RdmaWriteImm(raddr, rkey, uint32(i)).Finish(); err != nil {
			b.Fatal(err)
		}
	}
	x.qp[0].RingDoorbell()
	x.e.Run()
	for x.p[0].Poll(64, func(*transport.Completion) {}) > 0 {
	}
}

// drain polls the receive completions away.
func (g *recvRig) drain() {
	for g.rp.Poll(64, func(*transport.Completion) {}) > 0 {
	}
}

// benchRecvPost times post over b.N receive WQEs.
func benchRecvPost(b *testing.B, g *recvRig, post func(g *recvRig, i int) error) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := post(g, i); err != nil {
			b.Fatal(err)
		}
		if i%benchBatch == benchBatch-1 {
			b.StopTimer()
			g.consume(b, benchBatch)
			g.drain()
			b.StartTimer()
		}
	}
}

// postOne posts a one-buffer receive WQE with PostRecv (and its doorbell).
func (g *recvRig) postOne(i int) error {
	addr, lkey := g.x.e.Addr(1, 0), g.x.e.LKey(1)
	if g.srq != nil {
		return g.srq.PostRecv(uint64(i), addr, 64, lkey)
	}
	return g.rcv.PostRecv(uint64(i), addr, 64, lkey)
}

// postStaged posts a two-buffer receive WQE with BeginRecv, SGE, SGE and
// FinishDoorbell.
func (g *recvRig) postStaged(i int) error {
	addr, lkey := g.x.e.Addr(1, 0), g.x.e.LKey(1)
	if g.srq != nil {
		return g.srq.BeginRecv(uint64(i)).SGE(addr, 32, lkey).SGE(addr+32, 32, lkey).FinishDoorbell()
	}
	return g.rcv.BeginRecv(uint64(i)).SGE(addr, 32, lkey).SGE(addr+32, 32, lkey).FinishDoorbell()
}

// BenchmarkPostRecv posts one-buffer receive WQEs with PostRecv.
func BenchmarkPostRecv(b *testing.B) { benchRecvPost(b, newRecvRig(b, false), (*recvRig).postOne) }

// BenchmarkPostRecvStaged posts two-buffer receive WQEs through the stages.
func BenchmarkPostRecvStaged(b *testing.B) {
	benchRecvPost(b, newRecvRig(b, false), (*recvRig).postStaged)
}

// BenchmarkPostRecvSRQ posts one-buffer receive WQEs to a shared receive
// queue with PostRecv.
func BenchmarkPostRecvSRQ(b *testing.B) { benchRecvPost(b, newRecvRig(b, true), (*recvRig).postOne) }

// BenchmarkPostRecvSRQStaged posts two-buffer receive WQEs to a shared
// receive queue through the stages.
func BenchmarkPostRecvSRQStaged(b *testing.B) {
	benchRecvPost(b, newRecvRig(b, true), (*recvRig).postStaged)
}

// benchRecvPoll times polling b.N receive completions (of receives posted
// with PostRecv) through a Poller.
func benchRecvPoll(b *testing.B, g *recvRig) {
	var sum uint64
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		for i := range benchBatch {
			if err := g.postOne(i); err != nil {
				b.Fatal(err)
			}
		}
		g.consume(b, benchBatch)
		b.StartTimer()
		for n := 1; n > 0 && done < b.N; done += n {
			n = g.rp.Poll(16, func(c *transport.Completion) {
				if c.Match == transport.MatchOK {
					sum += c.WRID
				}
			})
		}
		b.StopTimer()
		g.drain()
		b.StartTimer()
	}
}

// BenchmarkPollRecv polls receive completions of the QP's own receive
// queue, per completion.
func BenchmarkPollRecv(b *testing.B) { benchRecvPoll(b, newRecvRig(b, false)) }

// BenchmarkPollRecvSRQ polls receive completions of a shared receive
// queue, per completion.
func BenchmarkPollRecvSRQ(b *testing.B) { benchRecvPoll(b, newRecvRig(b, true)) }
