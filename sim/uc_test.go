package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// ucQP returns a new RC QP of e made a UC QP, as adopting one with
// simadopt.QPConfig.Unreliable does.
func ucQP(e *env, pd *ctx.ProtectionDomain) *testQP {
	q := e.newQP(pd, qpOpts{typ: ctx.QPTypeRC})
	e.f.mu.Lock()
	e.f.qps[q.qp.QPN()].uc = true
	e.f.mu.Unlock()
	return q
}

// connectUC brings two UC QPs to RTS with the attributes a UC modify
// carries (no timeout, retry counts or READ/atomic depths).
func connectUC(t *testing.T, a, b *testQP) {
	t.Helper()
	connectUCOneWay(t, a, b)
	connectUCOneWay(t, b, a)
}

// connectUCOneWay moves UC QP q to RTS toward peer (PSNs 100); peer is
// left as it is.
func connectUCOneWay(t *testing.T, q, peer *testQP) {
	t.Helper()
	require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
	require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: peer.qp.QPN(), PathMTU: ctx.MTU4096,
		RQPSN: 100, Path: ctx.AddressAttr{DLID: lidOf(t, peer.qp.ProtectionDomain().Context())}}))
	require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, SQPSN: 100}))
}

// ucDropRules runs the UC responder's drop rules between requester a (of
// ea) and responder b (of eb): each message the responder cannot take
// completes at the requester with success, and the responder writes
// nothing, completes nothing, stays in RTS and takes the next good
// message. next returns the next CQE of a CQ, none the CQEs a CQ holds
// once the requester's are in.
func ucDropRules(t *testing.T, ea, eb *env, a, b *testQP, next func(*testCQ) cqe, settle func()) {
	okSend := func(what string) {
		t.Helper()
		c := next(a.scq)
		require.Equal(t, prm.CQEReq, c.op, "%s: the requester completes with success: %+v", what, c)
		settle()
		require.Empty(t, b.rcq.drain(), "%s: no completion at the responder", what)
		st, err := b.qp.State()
		require.NoError(t, err)
		require.Equal(t, ctx.QPStateRTS, st, "%s: the responder stays in RTS", what)
	}
	clear(eb.mem(0, 8192))
	before := append([]byte(nil), eb.mem(0, 8192)...)

	// A bad rkey, and a range past the region's end.
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(eb.addr(0), 0x7777), inlineSeg([]byte("bad rkey")))
	okSend("bad rkey")
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(eb.addr(1<<20-4), eb.mr.RKey()), inlineSeg([]byte("past the end")))
	okSend("past the end")
	require.Zero(t, eb.buf.Bytes()[1<<20-4], "nothing written past the end")

	// No receive posted: a SEND and a WRITE with immediate (whose data is
	// not written either).
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("no receive")))
	okSend("SEND without a receive")
	a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, 7, raddrSeg(eb.addr(512), eb.mr.RKey()), inlineSeg([]byte("imm, no receive")))
	okSend("WRITE with immediate without a receive")

	// A message longer than the receive: dropped, the receive stays.
	b.postRecv(dataSeg(8, eb.mr.LKey(), eb.addr(1024)))
	settle()
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("longer than eight bytes")))
	okSend("too long")
	require.Equal(t, before, eb.mem(0, 8192), "nothing written")

	// The next good messages: the SEND lands in the receive the long one
	// left, the WRITE in the region.
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("good")))
	require.Equal(t, prm.CQEReq, next(a.scq).op)
	r := next(b.rcq)
	require.Equal(t, prm.CQERespSend, r.op)
	require.Equal(t, uint32(4), r.byteCnt)
	require.Equal(t, []byte("good"), eb.mem(1024, 4))
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(eb.addr(2048), eb.mr.RKey()), inlineSeg([]byte("write")))
	require.Equal(t, prm.CQEReq, next(a.scq).op)
	settle()
	require.Equal(t, []byte("write"), eb.mem(2048, 5))
	require.Zero(t, eb.mem(512, 1)[0], "the dropped WRITE with immediate wrote nothing")

	// READ and atomics are not UC operations: a local QP operation
	// error at the requester.
	ea.allowViolations = true
	i := a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(eb.addr(0), eb.mr.RKey()), dataSeg(8, ea.mr.LKey(), ea.addr(0)))
	c := next(a.scq)
	require.Equal(t, prm.CQEReqErr, c.op)
	require.Equal(t, prm.SyndromeLocalQPOp, c.synd)
	require.Equal(t, i, c.counter)
}

// TestUCDropRules runs the UC drop rules with both QPs in one Fabric.
func TestUCDropRules(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := ucQP(e, e.pd), ucQP(e, e.pd2)
	connectUC(t, a, b)
	// The second HCA's region is the responder's: a view of e as eb.
	eb := &env{t: t, f: e.f, buf: e.buf2, mr: e.mr2}
	ucDropRules(t, e, eb, a, b, func(c *testCQ) cqe { e.run(); return c.one(t) }, e.run)
}

// TestUCPeerNotReady: a UC message to a QP that is not ready (not
// connected back) completes with success at once, with no retry.
func TestUCPeerNotReady(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := ucQP(e, e.pd), ucQP(e, e.pd2)
	connectUCOneWay(t, a, b)
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("lost")))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	require.Zero(t, e.f.Stats().Retries)
}

// TestUCDropRulesBetweenFabrics runs the UC drop rules between two Fabrics
// joined to one shared fabric, as between two processes, and between two
// joined by a TCP link.
func TestUCDropRulesBetweenFabrics(t *testing.T) {
	for _, c := range []struct {
		name string
		pair func(*testing.T) (e1, e2 *env)
	}{{"shared", sharedPair}, {"link", linkedPair}} {
		t.Run(c.name, func(t *testing.T) {
			e1, e2 := c.pair(t)
			a, b := ucQP(e1, e1.pd), ucQP(e2, e2.pd)
			connectUC(t, a, b)
			const wait = 5 * time.Second
			ucDropRules(t, e1, e2, a, b, func(c *testCQ) cqe { return waitCQE(t, c, wait) },
				func() { time.Sleep(20 * time.Millisecond) })
		})
	}
}

// TestSharedUCPSNGap: messages lost on the way leave a gap in the PSNs;
// the responder takes the next message from its first segment, as a UC
// responder does, and stays in RTS.
func TestSharedUCPSNGap(t *testing.T) {
	e1, e2 := sharedPair(t)
	a, b := ucQP(e1, e1.pd), ucQP(e2, e2.pd)
	connectUC(t, a, b)
	const wait = 5 * time.Second
	b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(0)))
	b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(64)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("first")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, wait).op)
	require.Equal(t, prm.CQERespSend, waitCQE(t, b.rcq, wait).op)
	// Five PSNs lost: the requester's next PSN jumps ahead of the one
	// the responder expects.
	e1.f.mu.Lock()
	ws := &e1.f.qpByNum(a.qp.QPN()).wire
	ws.next = (ws.next + 5) & ctx.MaxPSN
	e1.f.mu.Unlock()
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("after the gap")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, wait).op)
	r := waitCQE(t, b.rcq, wait)
	require.Equal(t, prm.CQERespSend, r.op)
	require.Equal(t, []byte("after the gap"), e2.mem(64, 13))
	st, err := b.qp.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTS, st)
}

// TestSharedUCPeerNotReady: between processes, a UC segment the peer does
// not answer (not connected back) is taken as lost after wireUCLoss and
// its WQE completes with success.
func TestSharedUCPeerNotReady(t *testing.T) {
	e1, e2 := sharedPair(t)
	a, b := ucQP(e1, e1.pd), ucQP(e2, e2.pd)
	connectUCOneWay(t, a, b)
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("lost")))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("lost too")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
	st, err := a.qp.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTS, st)
}

// TestUCSRQTooLong: a message too long for the SRQ receive it takes
// completes that receive with LOCAL_LENGTH and the UC QP stays in RTS
// (rxe's class E); the next message takes the next receive.
func TestUCSRQTooLong(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.newSRQ(e.pd2, 16, 1)
	a := ucQP(e, e.pd)
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: s})
	e.f.mu.Lock()
	e.f.qps[b.qp.QPN()].uc = true
	e.f.mu.Unlock()
	connectUC(t, a, b)
	s.post(dataSeg(8, e.mr2.LKey(), e.addr2(0)))
	s.post(dataSeg(64, e.mr2.LKey(), e.addr2(64)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("longer than eight bytes")))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	c := b.rcq.one(t)
	require.Equal(t, prm.CQERespErr, c.op)
	require.Equal(t, prm.SyndromeLocalLength, c.synd)
	require.Equal(t, ctx.QPStateRTS, qpState(t, b))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("fits")))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	c = b.rcq.one(t)
	require.Equal(t, prm.CQERespSend, c.op)
	require.Equal(t, []byte("fits"), e.mem2(64, 4))
}

// TestSharedUCResponderIgnoresReadAndAtomic: a READ or an atomic that
// reaches a UC QP of another process (from a peer that is no requester
// of this version, or an RC QP connected to it, which the segments do not
// tell apart) is dropped as an opcode UC does not have: nothing is read
// or written, nothing answers, and the QP stays in RTS, as a UC QP never
// moves to error because of its peer. Before, it was checked as a remote
// access, which a UC QP never grants: the QP moved to error with
// QP_ACCESS_ERR.
func TestSharedUCResponderIgnoresReadAndAtomic(t *testing.T) {
	e1, e2 := sharedPair(t)
	a, b := ucQP(e1, e1.pd), ucQP(e2, e2.pd)
	connectUC(t, a, b)
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	lid := lidOf(t, e2.c)
	copy(e2.mem(0, 8), []byte{1, 2, 3, 4, 5, 6, 7, 8})
	e2.f.mu.Lock()
	tq := e2.f.qpByNum(b.qp.QPN())
	from := e2.f.remoteSlot(a.qp.QPN())
	expect := tq.wire.resp.expect
	read := wireHdr{Kind: wireRequest, Op: uint8(prm.OpRdmaRead), DstQPN: b.qp.QPN(), SrcQPN: a.qp.QPN(),
		PSN: expect, RAddr: e2.addr(0), RKey: e2.mr.RKey(), Total: 8, Seg: 8, DLID: lid}
	e2.f.wireIn(from, &read, nil)
	fa := wireHdr{Kind: wireRequest, Op: uint8(prm.OpAtomicFA), DstQPN: b.qp.QPN(), SrcQPN: a.qp.QPN(),
		PSN: expect, RAddr: e2.addr(0), RKey: e2.mr.RKey(), Total: 8, Seg: 8, ASize: 8, DLID: lid}
	operands := make([]byte, wireAtomicSize)
	operands[0] = 1 // add 1
	e2.f.wireIn(from, &fa, operands)
	state, after, held := tq.state, tq.wire.resp.expect, len(e2.f.wireAcks)
	e2.f.mu.Unlock()
	require.Equal(t, ctx.QPStateRTS, state, "a READ or an atomic moved the UC QP")
	require.Equal(t, expect, after, "a dropped request moved the PSN expected")
	require.Zero(t, held, "a dropped request was answered")
	require.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8}, e2.mem(0, 8), "an atomic wrote to a UC QP's memory")
}
