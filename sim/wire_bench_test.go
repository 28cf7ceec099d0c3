package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// BenchmarkWireMessage measures the model's work for one RC
// RDMA_WRITE_WITH_IMM to a QP of another Fabric on a shared fabric, on
// one goroutine: the requester's round that sends it, the responder's
// round that executes it (wireIn) and answers, and the requester's round
// that takes the ACK (wireIn) and writes the send CQE; then both CQEs are
// polled. The responder holds the ACK of a write with immediate until its
// next round (wireServeSeg), which sends it. Both engines are held off,
// so the rounds run here, one after the other, and no cache line moves
// between processors: what is left is the model's CPU cost per message
// and per round.
func BenchmarkWireMessage(b *testing.B) {
	e1, e2, a, q := heldRCPair(b)
	for i := 0; i < 32; i++ {
		q.postRecv()
	}
	w := writeImmWQE(a, e2.addr(0), e2.mr.RKey())
	message := func(i int) {
		a.postWQE(w, uint32(i))
		stepRound(e1.f)
		stepRound(e2.f)
		c, ok := q.rcq.poll()
		if !ok || c.op != prm.CQERespWrImm || c.imm != uint32(i) {
			b.Fatalf("message %d: receive CQE %+v %v", i, c, ok)
		}
		q.postRecvNone()
		stepRound(e2.f)
		stepRound(e1.f)
		if c, ok := a.scq.poll(); !ok || c.op != prm.CQEReq {
			b.Fatalf("message %d: send CQE %+v %v", i, c, ok)
		}
	}
	for i := 0; i < 1000; i++ {
		message(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		message(1000 + i)
	}
}

// BenchmarkWireRoundTrip measures the model's work for a round trip of
// writes with immediate between RC QPs of two Fabrics on a shared fabric,
// on one goroutine, as two polling loops run it: each side's answer
// carries the ACK of the message it answers (wireCarryAck), which the
// other side takes before the answer. A round trip is four rounds (a
// send and a receive on each side), four CQEs written and polled, and
// the receives posted again.
func BenchmarkWireRoundTrip(b *testing.B) {
	e1, e2, a, q := heldRCPair(b)
	for i := 0; i < 32; i++ {
		q.postRecv()
		a.postRecv()
	}
	ping := writeImmWQE(a, e2.addr(0), e2.mr.RKey())
	pong := writeImmWQE(q, e1.addr(0), e1.mr.RKey())
	take := func(i int, rcq, scq *testCQ, first bool) {
		c, ok := rcq.poll()
		if !ok || c.op != prm.CQERespWrImm || c.imm != uint32(i) {
			b.Fatalf("round trip %d: receive CQE %+v %v", i, c, ok)
		}
		if !first {
			// The send CQE of the message this one answers, from
			// the ACK it carried.
			if c, ok := scq.poll(); !ok || c.op != prm.CQEReq {
				b.Fatalf("round trip %d: send CQE %+v %v", i, c, ok)
			}
		}
	}
	rt := func(i int, first bool) {
		a.postWQE(ping, uint32(i))
		stepRound(e1.f)
		stepRound(e2.f)
		take(i, q.rcq, q.scq, first)
		q.postRecvNone()
		q.postWQE(pong, uint32(i))
		stepRound(e2.f)
		stepRound(e1.f)
		take(i, a.rcq, a.scq, false)
		a.postRecvNone()
	}
	rt(0, true)
	for i := 1; i < 1000; i++ {
		rt(i, false)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rt(1000+i, false)
	}
}

// BenchmarkEmptyRound measures a round of the model with nothing to do, as
// a polling loop runs it (Context.Idle) between messages, the engine held
// off: two connected RC QPs and their four CQs on a private Fabric, and an
// RC QP with its two CQs on a shared fabric (whose round also looks at its
// inbound rings).
func BenchmarkEmptyRound(b *testing.B) {
	b.Run("private", func(b *testing.B) {
		e := newEnv(b, Options{Mode: Engine})
		e.rcPair(qpOpts{recvDepth: 64})
		emptyRounds(b, e.f)
	})
	b.Run("shared", func(b *testing.B) {
		e1, _, _, _ := sharedRCPair(b)
		emptyRounds(b, e1.f)
	})
}

// sharedRCPair makes two Fabrics of a fresh shared fabric in this process
// and connects an RC QP of each to the other's.
func sharedRCPair(b testing.TB) (e1, e2 *env, a, q *testQP) {
	name := testFabricName(b)
	e1 = newEnv(b, Options{Mode: Engine, Fabric: name})
	e2 = newEnv(b, Options{Mode: Engine, Fabric: name})
	a = e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	q = e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	e1.connectRC(a, q, 7, 1)
	return e1, e2, a, q
}

// emptyRounds calls f's idle b.N times, its engine held off.
func emptyRounds(b *testing.B, f *Fabric) {
	holdEngine(b, f)
	steps := f.Stats().StepsExecuted
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.idle()
	}
	b.StopTimer()
	// About 1: now and then the engine takes the lock for a round of
	// its own, and an idle call that finds it taken yields instead.
	b.ReportMetric(float64(f.Stats().StepsExecuted-steps)/float64(b.N), "rounds/op")
}

// TestEngineStaysOutWhileIdleRuns: a polling loop's round that reads no
// clock (nothing to do) still tells the engine that a loop runs the model
// (driven), through the count of the loops' rounds; once no loop has run
// a round since the engine last asked, and none read the clock within
// driveHold, the engine takes the rounds back.
func TestEngineStaysOutWhileIdleRuns(t *testing.T) {
	e := newEnv(t, Options{Mode: Engine})
	e.rcPair(qpOpts{})
	var seen uint64 // the engine's copy of the count, as the engine keeps one
	e.f.driven(&seen)
	e.f.drivenAt.Store(0) // no round that read the clock
	before := e.f.idleRounds.Load()
	for e.f.idleRounds.Load() == before { // a round, not a yield
		e.c.Idle()
	}
	require.Zero(t, e.f.drivenAt.Load(), "an empty round read the clock")
	require.True(t, e.f.driven(&seen), "a loop's round without a clock read is not seen")
	require.False(t, e.f.driven(&seen), "no round since: the engine must take the rounds back")
}
