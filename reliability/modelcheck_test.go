package reliability

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// recordTB stops at the first Fatalf and keeps its message, so that the
// model's own checks can be shown to fail.
type recordTB struct {
	testing.TB
	msg string
}

func (r *recordTB) Helper() {}

func (r *recordTB) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

// caught runs f and returns the message of the model's first failure ("" if
// none).
func (r *recordTB) caught(f func()) (msg string) {
	r.msg = ""
	defer func() {
		if x := recover(); x != nil {
			if x != r {
				panic(x)
			}
			msg = r.msg
		}
	}()
	f()
	return ""
}

func ok(wrid uint64) *transport.Completion {
	return &transport.Completion{WRID: wrid, Match: transport.MatchOK, Opcode: prm.CQEReq}
}

func bad(wrid uint64, s prm.Syndrome) *transport.Completion {
	return &transport.Completion{WRID: wrid, Match: transport.MatchError, Opcode: prm.CQEReqErr, Syndrome: s}
}

// TestModelCatchesMistakes feeds the reference model the completions of a
// broken data plane: each mistake must stop it with the right message.
func TestModelCatchesMistakes(t *testing.T) {
	tb := &recordTB{TB: t}
	s := &soak{t: tb}
	s.n.errorCQEs = map[prm.Syndrome]int{}
	s.n.recvErrors = map[prm.Syndrome]int{}
	sq := func(ws ...sendWR) *sqModel { return &sqModel{s: s, name: "q", out: ws} }
	sig := func(wrid uint64) sendWR { return sendWR{wrid: wrid, signaled: true} }
	unsig := func(wrid uint64) sendWR { return sendWR{wrid: wrid} }

	for _, c := range []struct {
		name string
		run  func()
		want string
	}{
		{"good run", func() {
			m := sq(unsig(1), sig(2), sig(3), sendWR{wrid: 4, expect: prm.SyndromeRemoteAccess}, unsig(5))
			m.complete(ok(2))
			m.complete(ok(3))
			m.complete(bad(4, prm.SyndromeRemoteAccess))
			m.complete(bad(5, prm.SyndromeWRFlush))
		}, ""},
		{"duplicate", func() {
			m := sq(sig(1), sig(2))
			m.complete(ok(1))
			m.complete(ok(1))
		}, "duplicated"},
		{"lost signaled", func() {
			m := sq(sig(1), sig(2))
			m.complete(ok(2))
		}, "lost"},
		{"success after error", func() {
			m := sq(sendWR{wrid: 1, signaled: true, expect: prm.SyndromeLocalProt}, sig(2))
			m.complete(bad(1, prm.SyndromeLocalProt))
			m.complete(ok(2))
		}, "after the queue pair failed"},
		{"wrong syndrome", func() {
			m := sq(sendWR{wrid: 1, signaled: true, expect: prm.SyndromeRemoteAccess})
			m.complete(bad(1, prm.SyndromeLocalProt))
		}, "predicted REMOTE_ACCESS_ERR"},
		{"unpredicted error", func() {
			m := sq(sig(1))
			m.complete(bad(1, prm.SyndromeRemoteAccess))
		}, "the model predicted success"},
		{"predicted error succeeded", func() {
			m := sq(sendWR{wrid: 1, signaled: true, expect: prm.SyndromeRNRRetryExc})
			m.complete(ok(1))
		}, "predicted RNR_RETRY_EXC_ERR"},
		{"flush from nowhere", func() {
			m := sq(sig(1))
			m.complete(bad(1, prm.SyndromeWRFlush))
		}, "nothing moved the queue pair to error"},
		{"flush skips one", func() {
			m := sq(sendWR{wrid: 1, signaled: true, expect: prm.SyndromeLocalProt}, unsig(2), unsig(3))
			m.complete(bad(1, prm.SyndromeLocalProt))
			m.complete(bad(3, prm.SyndromeWRFlush))
		}, "lost"},
		{"unsignaled completes", func() {
			m := sq(unsig(1))
			m.complete(ok(1))
		}, "unsignaled"},
		{"unmatched", func() {
			m := sq(sig(1))
			m.complete(&transport.Completion{WRID: 0, Match: transport.MatchUnmatched, Opcode: prm.CQEReq})
		}, "UNMATCHED"},
	} {
		got := tb.caught(c.run)
		if c.want == "" {
			require.Empty(t, got, c.name)
		} else {
			require.Contains(t, got, c.want, c.name)
		}
	}

	// Receives: order, content, duplicates.
	reg := &region{name: "r", mem: make([]byte, 4096), shadow: make([]byte, 4096)}
	rq := &rqModel{s: s, name: "rq", fifo: true, region: reg}
	s.bySeq = map[uint64]*message{}
	msg := &message{seq: 77, n: 100, op: prm.CQERespSend, to: rq}
	s.bySeq[77] = msg
	genMessage(reg.mem[0:100], 77)
	recv := func(wrid uint64) *transport.Completion {
		return &transport.Completion{WRID: wrid, Match: transport.MatchOK, Opcode: prm.CQERespSend, ByteCount: 100}
	}
	rq.out = []recvWR{{wrid: 1, slot: 0, size: 1024}, {wrid: 2, slot: 1024, size: 1024}}
	require.Contains(t, tb.caught(func() { rq.complete(recv(2)) }), "posted first")
	rq.out = []recvWR{{wrid: 1, slot: 0, size: 1024}, {wrid: 2, slot: 0, size: 1024}}
	require.Empty(t, tb.caught(func() { rq.complete(recv(1)) }))
	require.Equal(t, 1, msg.delivered)
	require.Contains(t, tb.caught(func() { rq.complete(recv(2)) }), "delivered 2 times")
	reg.mem[50] ^= 1
	rq.out = []recvWR{{wrid: 3, slot: 0, size: 1024}}
	require.Contains(t, tb.caught(func() { rq.complete(recv(3)) }), "not the message")
	require.Error(t, reg.check(), "the shadow no longer matches the region")
}

// TestCanariesCatchStrayWrites shows that a byte changed outside every
// region, or inside a region against the model, is found.
func TestCanariesCatchStrayWrites(t *testing.T) {
	x := newFabric(t, sim.Options{})
	a := newArena(t, x.pd[0], 64<<10)
	t.Cleanup(func() { require.NoError(t, a.buf.Close()) })
	r1 := a.region(t, "one", 1000, allAccess, 1)
	a.region(t, "two", 3000, allAccess, 2)
	require.NoError(t, a.checkCanaries(true))
	require.NoError(t, r1.check())
	a.mem[r1.off+len(r1.mem)] ^= 1 // the byte after region one
	require.ErrorContains(t, a.checkCanaries(false), "outside every region")
	a.mem[r1.off+len(r1.mem)] ^= 1
	a.mem[len(a.mem)-1] ^= 1 // far after the last region
	require.NoError(t, a.checkCanaries(false), "only the gap after the last region is checked per batch")
	require.Error(t, a.checkCanaries(true))
	a.mem[len(a.mem)-1] ^= 1
	r1.mem[999] ^= 1
	require.ErrorContains(t, r1.check(), "byte 999")
}
