package sim

import (
	"testing"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

func BenchmarkScratchOneWay(b *testing.B) {
	e := newEnv(b, Options{Mode: Engine})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	q := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	e.connectRC(a, q, 7, 1)
	for i := 0; i < 32; i++ {
		q.postRecv()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, uint32(i), raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte{byte(i)}))
		for {
			e.c.Idle()
			if _, ok := q.rcq.poll(); ok {
				break
			}
		}
		q.postRecv()
		a.scq.drain()
	}
}
