package sim

import (
	"runtime"
	"testing"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// BenchmarkStepWrite measures the model's cost of one signaled inline
// RDMA_WRITE: post with the test encoder, one Step, poll the CQE.
func BenchmarkStepWrite(b *testing.B) {
	e := newEnv(b, Options{})
	a, _ := e.rcPair(qpOpts{sendDepth: 64})
	payload := []byte("0123456789abcdef0123456789abcdef")
	w := a.build(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg(payload))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w[1], w[2] = byte(a.pi>>8), byte(a.pi) // the WQE index in the control segment
		a.write(w)
		a.ring()
		if _, err := e.f.Step(); err != nil {
			b.Fatal(err)
		}
		if _, ok := a.scq.poll(); !ok {
			b.Fatal("no CQE")
		}
	}
}

// BenchmarkEngineRoundTrip measures a write-with-immediate ping-pong
// between two QPs through the engine goroutine (the latency a program sees
// on the software HCA). On a 2-core machine the engine and the poller share
// the CPUs.
func BenchmarkEngineRoundTrip(b *testing.B) {
	e := newEnv(b, Options{Mode: Engine})
	a, peer := e.rcPair(qpOpts{sendDepth: 64, recvDepth: 64})
	for i := 0; i < 60; i++ {
		peer.postRecv()
	}
	w := a.build(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, 1, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte("ping")))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w[1], w[2] = byte(a.pi>>8), byte(a.pi)
		a.write(w)
		a.ring()
		for {
			if _, ok := peer.rcq.poll(); ok {
				break
			}
			runtime.Gosched()
		}
		peer.postRecv()
		for {
			if _, ok := a.scq.poll(); ok {
				break
			}
			runtime.Gosched()
		}
	}
}
