package sim

import (
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// readDeregPair is two Fabrics of one shared fabric with an RC QP each,
// connected with ACK timeout 12 (about 17 ms) and retry count 3, their
// engines held off, and a region of size bytes registered on the second
// for the first to read.
func readDeregPair(t *testing.T, size int) (e1, e2 *env, a, q *testQP, mr *ctx.MemoryRegion) {
	name := testFabricName(t)
	e1 = newEnv(t, Options{Mode: Engine, Fabric: name})
	e2 = newEnv(t, Options{Mode: Engine, Fabric: name})
	e1.allowViolations, e2.allowViolations = true, true
	a = e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64, sendDepth: 64})
	q = e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64, sendDepth: 64})
	connectRCTimed(t, a, q, 3, 12)
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	buf, err := ctx.AllocBuffer(size, ctx.BufferOptions{Guard: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	mr, err = e2.pd.RegisterBuffer(buf, allAccess)
	require.NoError(t, err)
	return e1, e2, a, q, mr
}

// stepUntilCQE runs rounds of the Fabrics until c has a CQE, for up to d.
func stepUntilCQE(t *testing.T, d time.Duration, c *testCQ, fs ...*Fabric) cqe {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Microsecond) {
		for _, f := range fs {
			stepRound(f)
		}
		if x, ok := c.poll(); ok {
			return x
		}
	}
	t.Fatalf("no CQE within %v", d)
	return cqe{}
}

// requireReadNAKed checks that the READ completed with a remote access
// error after at most retries transport retries of the requester (e1),
// not once they ran out (RETRY_EXC_ERR after 4), and that the
// responder's QP moved to error with its access error event.
func requireReadNAKed(t *testing.T, c cqe, e1, e2 *env, q *testQP, retries uint64) {
	t.Helper()
	require.Equal(t, prm.CQEReqErr, c.op, "%+v", c)
	require.Equal(t, prm.SyndromeRemoteAccess, c.synd, "%+v", c)
	require.LessOrEqual(t, e1.f.Stats().Retries, retries)
	st, err := q.qp.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateError, st)
	requireEvent(t, e2.c, ctx.EventQPAccessError, q.qp.QPN())
}

// TestSharedRepeatedReadAfterDereg: a READ executed once whose answer is
// lost, and whose region the responder deregisters before the
// requester's retry, is checked again as a new READ: the repeat is NAKed
// with a remote access error. Before, the responder dropped it silently,
// and the READ ended in RETRY_EXC_ERR after every retry.
func TestSharedRepeatedReadAfterDereg(t *testing.T) {
	e1, e2, a, q, mr := readDeregPair(t, 1<<16)
	_, s2 := e2.f.SharedFabric()
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(uint64(mr.Addr()), mr.RKey()), dataSeg(4096, e1.mr.LKey(), e1.addr(0)))
	stepRound(e1.f) // the request leaves
	stepRound(e2.f) // executed and answered
	in := e1.f.shm.in
	require.NotEqual(t, atomic.LoadUint64(in.head(s2)), atomic.LoadUint64(in.tail(s2)), "the answer is in the ring")
	atomic.StoreUint64(in.head(s2), atomic.LoadUint64(in.tail(s2))) // and lost
	require.NoError(t, mr.Close())
	c := stepUntilCQE(t, 3*time.Second, a.scq, e1.f, e2.f)
	requireReadNAKed(t, c, e1, e2, q, 3) // the retry that repeats it, and any a loaded machine adds
	require.Positive(t, e2.f.Stats().RepeatsServed)
}

// TestSharedHeldReadAnswerAfterDereg: a READ's answer that finds the
// requester's ring full is held; when the responder deregisters the
// region before the answer goes, the answer is a NAK with a remote
// access error. Before, it was dropped, and so was every repeat.
func TestSharedHeldReadAnswerAfterDereg(t *testing.T) {
	e1, e2, a, q, mr := readDeregPair(t, 1<<21)
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(uint64(mr.Addr()), mr.RKey()), dataSeg(1<<20, e1.mr.LKey(), e1.addr(0)))
	stepRound(e1.f) // the READ is in e2's ring
	for i := 0; i < 40; i++ {
		q.post(prm.OpRdmaWrite, 0, 0, 0, raddrSeg(e1.addr(0), e1.mr.RKey()), dataSeg(1<<20, e2.mr.LKey(), e2.addr(0)))
	}
	stepRound(e2.f) // the WRITEs fill e1's ring; the READ's answer is held
	require.NotEmpty(t, e2.f.wireAcks, "the READ's answer is held")
	require.NoError(t, mr.Close())
	c := stepUntilCQE(t, 3*time.Second, a.scq, e1.f, e2.f)
	requireReadNAKed(t, c, e1, e2, q, 3) // the ring full may outlast timeouts
}

// TestSharedHeldReadAnswersAfterDereg: two READs whose answers are held
// when the region goes: the first answer's NAK moves the responder to
// error, with one QP_ACCESS_ERR, and the second sends nothing more. A
// modify to RTS then, which sends the answers held before it, is refused
// from error, where the NIC's QP already is.
func TestSharedHeldReadAnswersAfterDereg(t *testing.T) {
	e1, e2, a, q, mr := readDeregPair(t, 1<<21)
	for i := 0; i < 2; i++ {
		a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(uint64(mr.Addr())+uint64(i)<<20, mr.RKey()), dataSeg(1<<20, e1.mr.LKey(), e1.addr(0)))
	}
	stepRound(e1.f) // the READs are in e2's ring
	for i := 0; i < 40; i++ {
		q.post(prm.OpRdmaWrite, 0, 0, 0, raddrSeg(e1.addr(0), e1.mr.RKey()), dataSeg(1<<20, e2.mr.LKey(), e2.addr(0)))
	}
	stepRound(e2.f) // the WRITEs fill e1's ring; both answers are held
	require.Len(t, e2.f.wireAcks, 2, "both READs' answers are held")
	require.NoError(t, mr.Close())
	err := q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS})
	require.ErrorIs(t, err, syscall.EINVAL, "RTS from the error the held answers' NAK moved it to")
	st, err := q.qp.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateError, st)
	requireEvent(t, e2.c, ctx.EventQPAccessError, q.qp.QPN())
	require.Empty(t, readEvents(t, e2.c), "one event for one move to error")
	c := stepUntilCQE(t, 3*time.Second, a.scq, e1.f, e2.f)
	require.Equal(t, prm.CQEReqErr, c.op, "%+v", c)
	require.Equal(t, prm.SyndromeRemoteAccess, c.synd, "%+v", c)
}
