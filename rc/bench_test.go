package rc_test

import (
	"testing"

	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// The benchmarks time the kit's own work: a post (state check, stages,
// doorbell) and a poll (ring scan, QPN dispatch, retiring). The software
// HCA runs between timed stretches with the timer stopped.

const benchBatch = 256

func benchPair(b *testing.B) *pair {
	e := transporttest.New(b, sim.Options{})
	return connectPair(e, rc.Config{SendDepth: 2 * benchBatch, RecvDepth: 16, MaxInline: 64})
}

// BenchmarkPost posts 8-byte inline RDMA writes, one signaled in 32, with a
// doorbell per 32 WQEs.
func BenchmarkPost(b *testing.B) {
	x := benchPair(b)
	e, qp := x.e, x.qp[0]
	raddr, rkey := e.Addr(1, 0), e.RKey(1)
	payload := []byte("8 bytes!")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		flags := wqebuilder.Flags(0)
		if i%32 == 31 {
			flags = wqebuilder.Signaled
		}
		s, err := qp.Post(uint64(i), flags)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.RdmaWrite(raddr, rkey).Inline(payload).Finish(); err != nil {
			b.Fatal(err)
		}
		if i%32 == 31 {
			qp.RingDoorbell()
		}
		if i%benchBatch == benchBatch-1 {
			b.StopTimer()
			qp.RingDoorbell()
			e.Run()
			for x.p[0].Poll(64, func(*transport.Completion) {}) > 0 {
			}
			b.StartTimer()
		}
	}
}

// BenchmarkPostBlueFlame posts single 8-byte inline writes, each published
// with BlueFlame.
func BenchmarkPostBlueFlame(b *testing.B) {
	x := benchPair(b)
	e, qp := x.e, x.qp[0]
	raddr, rkey := e.Addr(1, 0), e.RKey(1)
	payload := []byte("8 bytes!")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		flags := wqebuilder.Flags(0)
		if i%32 == 31 {
			flags = wqebuilder.Signaled
		}
		s, _ := qp.Post(uint64(i), flags)
		if err := s.RdmaWrite(raddr, rkey).Inline(payload).FinishBlueFlame(); err != nil {
			b.Fatal(err)
		}
		if i%benchBatch == benchBatch-1 {
			b.StopTimer()
			e.Run()
			for x.p[0].Poll(64, func(*transport.Completion) {}) > 0 {
			}
			b.StartTimer()
		}
	}
}

// fillCQ posts benchBatch signaled NOPs and lets the model complete them.
func fillCQ(b *testing.B, x *pair) {
	for i := range benchBatch {
		s, _ := x.qp[0].Post(uint64(i), wqebuilder.Signaled)
		if err := s.Nop().Finish(); err != nil {
			b.Fatal(err)
		}
	}
	x.qp[0].RingDoorbell()
	x.e.Run()
}

// BenchmarkPoll polls send completions through a Poller, 16 at a time:
// per completion.
func BenchmarkPoll(b *testing.B) {
	x := benchPair(b)
	p := x.p[0]
	var sum uint64
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		fillCQ(b, x)
		b.StartTimer()
		for n := 1; n > 0 && done < b.N; done += n {
			n = p.Poll(16, func(c *transport.Completion) {
				if c.Match == transport.MatchOK {
					sum += c.WRID
				}
			})
		}
	}
}

// BenchmarkPollHandWritten is the same work written against monocq
// directly: range over a batch, look the QPN up in a monocq.Table, retire
// a send completion with Queue.CompleteSend or else call Queue.Complete.
// It is what Poller.Poll compiles to.
func BenchmarkPollHandWritten(b *testing.B) {
	x := benchPair(b)
	cq, err := transport.NewCQ(x.cq[0])
	if err != nil {
		b.Fatal(err)
	}
	var table monocq.Table[transport.Queue]
	if err := table.Register(x.qp[0].QPN(), &x.qp[0].Queue); err != nil {
		b.Fatal(err)
	}
	var wc transport.Completion
	var sum uint64
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		fillCQ(b, x)
		b.StartTimer()
		for n := 1; n > 0 && done < b.N; done += n {
			n = 0
			for c := range cq.All(16) {
				if q := table.Lookup(c.QPN()); q != nil {
					if !q.CompleteSend(c, &wc) {
						q.Complete(c, &wc)
					}
					if wc.Match == transport.MatchOK {
						sum += wc.WRID
					}
				}
				n++
			}
		}
	}
}

// BenchmarkPollRing reads the same CQEs with monocq alone, without
// matching them to work requests: the floor of the two above.
func BenchmarkPollRing(b *testing.B) {
	x := benchPair(b)
	cq, err := transport.NewCQ(x.cq[0])
	if err != nil {
		b.Fatal(err)
	}
	var sum uint64
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		fillCQ(b, x)
		// The send queue must still retire: do it outside the timer.
		b.StartTimer()
		for n := 1; n > 0 && done < b.N; done += n {
			n = cq.Poll(16, func(c *monocq.CQE) { sum += uint64(c.WQECounter()) })
		}
		b.StopTimer()
		for i := uint32(0); x.qp[0].SendQueue().Outstanding() > 0 && i < benchBatch; i++ {
			x.qp[0].SendQueue().Complete(uint16(x.qp[0].SendQueue().ConsumerIndex()))
		}
		b.StartTimer()
	}
}

// BenchmarkEmptyPoll polls an empty CQ.
func BenchmarkEmptyPoll(b *testing.B) {
	x := benchPair(b)
	p := x.p[0]
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Poll(16, func(*transport.Completion) { b.Fatal("completion") })
	}
}
