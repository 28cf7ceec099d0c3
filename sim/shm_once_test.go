package sim

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestSharedRoundTripsExactlyOnce: a fault-free run of round trips with
// another process (an RC write with immediate each way) executes every
// request once. Requests the responder sees twice (Stats.RepeatsServed)
// come only from a requester's ACK timeout; with an ACK timeout of
// seconds none fires on a fault-free run, so none is repeated, and every
// message is completed exactly once at both ends.
func TestSharedRoundTripsExactlyOnce(t *testing.T) {
	skipOnEmulatedCPU(t)
	const n = 500
	// ACK timeout 20: 4.3 s, far above any round trip of a loaded
	// machine.
	p := startEcho(t, 20)
	before := p.e.f.Stats()
	for i := 0; i < n; i++ {
		p.round(t, i)
	}
	// The child holds its ACK of the last request until its next round,
	// which can come after its answer reached this process.
	require.Eventually(t, func() bool {
		p.e.c.Idle()
		return p.e.f.Stats().CQEs-before.CQEs >= 2*n
	}, 5*time.Second, 10*time.Microsecond, "this process's last send completion")
	mine := p.e.f.Stats()
	// The child's last send completes when this process's ACK reaches
	// it, which can be after this process saw the child's last write:
	// the child waits for it before it reports (echoChild).
	child := p.ch.stats(t)
	require.Zero(t, mine.Retries-before.Retries, "ACK timeouts of this process's requests")
	require.Zero(t, child.Retries, "ACK timeouts of the child's requests")
	require.Zero(t, child.RepeatsServed, "this process's requests the child saw twice")
	require.Zero(t, mine.RepeatsServed, "the child's requests this process saw twice")
	// Each end: n receive completions and n send completions, no more.
	require.Equal(t, uint64(2*n), child.CQEs, "the child's completions")
	require.Equal(t, uint64(2*n), mine.CQEs-before.CQEs, "this process's completions")
	require.Zero(t, child.ErrorCQEs+mine.ErrorCQEs)
}

// TestSharedRepeatsCounted: a request the responder executed before is
// answered again, not executed, and counted in Stats.RepeatsServed; a new
// one is not counted.
func TestSharedRepeatsCounted(t *testing.T) {
	e1, e2 := sharedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	e1.connectRC(a, b, 7, 1)
	binary.NativeEndian.PutUint64(e2.mem(0, 8), 10)
	_, s1 := e1.f.SharedFabric()
	h := wireHdr{Kind: wireRequest, Op: uint8(prm.OpAtomicFA), DstQPN: b.qp.QPN(), SrcQPN: a.qp.QPN(), PSN: 0,
		RAddr: e2.addr(0), RKey: e2.mr.RKey(), Total: 8, ASize: 8, DLID: lidOf(t, e2.c)}
	serve := func() {
		e2.f.mu.Lock()
		defer e2.f.mu.Unlock()
		e2.f.wireServe(s1, &h, atomicOperands(1))
	}
	before := e2.f.Stats().RepeatsServed
	serve()
	require.Equal(t, before, e2.f.Stats().RepeatsServed, "a new request")
	serve()
	serve()
	require.Equal(t, before+2, e2.f.Stats().RepeatsServed, "two repeats")
	require.Equal(t, uint64(11), binary.NativeEndian.Uint64(e2.mem(0, 8)), "executed once")
}
