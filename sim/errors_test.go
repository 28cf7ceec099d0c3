package sim

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// requireErr checks one error CQE.
func requireErr(t *testing.T, c cqe, op prm.CQEOpcode, s prm.Syndrome, counter uint16) {
	t.Helper()
	require.Equal(t, op, c.op, "CQE %+v", c)
	require.Equal(t, s, c.synd, "syndrome %v", c.synd)
	require.Equal(t, prm.VendorSyndromeOf(s), c.vendor, "vendor syndrome with %v", c.synd)
	require.Equal(t, counter, c.counter)
}

func qpState(t *testing.T, q *testQP) ctx.QPState {
	t.Helper()
	s, err := q.qp.State()
	require.NoError(t, err)
	return s
}

func TestLocalProtection(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{})
	// An SGE one byte past the end of the region.
	end := int(e.mr.Len())
	i0 := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), dataSeg(16, e.mr.LKey(), e.addr(end-15)))
	e.run()
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeLocalProt, i0)
	require.Equal(t, ctx.QPStateError, qpState(t, a))

	// An lkey of another PD; and a READ into a region without local write.
	a, _ = e.rcPair(qpOpts{})
	i0 = a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dataSeg(16, e.mr2.LKey(), e.addr2(0)))
	e.run()
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeLocalProt, i0)

	ro, err := e.pd.RegisterMemory(e.mem(65536, 4096), ctx.AccessRemoteRead)
	require.NoError(t, err)
	a, _ = e.rcPair(qpOpts{})
	i0 = a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), dataSeg(16, ro.LKey(), e.addr(65536)))
	e.run()
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeLocalProt, i0)
}

func TestRemoteAccess(t *testing.T) {
	e := newEnv(t, Options{})
	// A region that allows remote read only.
	ro, err := e.pd2.RegisterMemory(e.mem2(8192, 4096), ctx.AccessRemoteRead)
	require.NoError(t, err)
	cases := []struct {
		name string
		post func(a *testQP) uint16
	}{
		{"bad rkey", func(a *testQP) uint16 {
			return a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), 0x7777), inlineSeg([]byte{1}))
		}},
		{"write to a read-only region", func(a *testQP) uint16 {
			return a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(8192), ro.RKey()), inlineSeg([]byte{1}))
		}},
		{"atomic on a read-only region", func(a *testQP) uint16 {
			return a.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(8192), ro.RKey()), atomicSeg(1, 0), dataSeg(8, e.mr.LKey(), e.addr(0)))
		}},
		{"read past the end", func(a *testQP) uint16 {
			return a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(8192+4000), ro.RKey()), dataSeg(97, e.mr.LKey(), e.addr(0)))
		}},
		{"rkey of the requester's own PD", func(a *testQP) uint16 {
			return a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr(0), e.mr.RKey()), dataSeg(8, e.mr.LKey(), e.addr(64)))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := e.rcPair(qpOpts{})
			before := append([]byte(nil), e.mem2(8192, 4096)...)
			idx := c.post(a)
			e.run()
			requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeRemoteAccess, idx)
			require.Equal(t, ctx.QPStateError, qpState(t, a))
			require.Equal(t, ctx.QPStateError, qpState(t, b), "an RC responder moves to error on an access violation")
			require.Equal(t, before, e.mem2(8192, 4096))
			requireEvent(t, e.c2, ctx.EventQPAccessError, b.qp.QPN())
		})
	}
}

func TestQPAccessFlags(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	e.connectRC(a, b, 7, 1)
	// Take remote read away from the responder QP (INIT→INIT is not
	// reachable from RTS; recreate instead).
	b2 := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	a2 := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	require.NoError(t, b2.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: ctx.AccessRemoteWrite}))
	require.NoError(t, b2.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: a2.qp.QPN(), PathMTU: ctx.MTU1024, Path: ctx.AddressAttr{DLID: 1}}))
	require.NoError(t, a2.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
	require.NoError(t, a2.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: b2.qp.QPN(), PathMTU: ctx.MTU1024, Path: ctx.AddressAttr{DLID: 2}}))
	require.NoError(t, a2.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 10, RetryCount: 3}))
	i := a2.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), dataSeg(8, e.mr.LKey(), e.addr(0)))
	e.run()
	requireErr(t, a2.scq.one(t), prm.CQEReqErr, prm.SyndromeRemoteAccess, i)
}

// An RC responder whose max_dest_rd_atomic is 0 grants only remote
// write, whatever its access flags: mlx5_ib clears the read and atomic
// enables of its context (set_qpc_atomic_flags), so a READ or an atomic
// to it completes with REMOTE_ACCESS_ERR, and QUERY_QP reports the
// enables. With a depth of 1 the same QPs serve both.
func TestNoReadDepthNoRemoteRead(t *testing.T) {
	for _, depth := range []uint8{0, 1} {
		e := newEnv(t, Options{})
		a, b := readDepthPair(t, e, depth)

		e.f.mu.Lock()
		bq := e.f.qps[b.qp.QPN()]
		e.f.mu.Unlock()
		_, attr, ok := queuePairAttributes(bq)
		require.True(t, ok)
		want := ctx.AccessRemoteWrite
		if depth > 0 {
			want = ctx.AccessRemoteRead | ctx.AccessRemoteWrite | ctx.AccessRemoteAtomic
		}
		require.Equal(t, want, attr.Access, "depth %d", depth)

		copy(e.mem2(0, 8), "written!")
		a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(8), e.mr2.RKey()), inlineSeg([]byte("w")))
		e.run()
		require.Equal(t, prm.CQEReq, a.scq.one(t).op, "a WRITE, depth %d", depth)
		require.Equal(t, byte('w'), e.mem2(8, 1)[0])

		i := a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), dataSeg(8, e.mr.LKey(), e.addr(0)))
		e.run()
		if depth == 0 {
			requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeRemoteAccess, i)
			require.Zero(t, e.mem(0, 8)[0], "nothing read")
			require.Equal(t, ctx.QPStateError, qpState(t, b))
			continue
		}
		c := a.scq.one(t)
		require.Equal(t, prm.CQEReq, c.op)
		require.Equal(t, i, c.counter)
		require.Equal(t, []byte("written!"), e.mem(0, 8))
		i = a.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(16), e.mr2.RKey()), atomicSeg(1, 0), dataSeg(8, e.mr.LKey(), e.addr(8)))
		e.run()
		c = a.scq.one(t)
		require.Equal(t, prm.CQEReq, c.op)
		require.Equal(t, i, c.counter)
		require.Equal(t, uint64(1), binary.NativeEndian.Uint64(e.mem2(16, 8)))
	}
}

// readDepthPair connects an RC requester a (read depth 1) to an RC
// responder b whose max_dest_rd_atomic is depth, both with every access
// flag.
func readDepthPair(t *testing.T, e *env, depth uint8) (a, b *testQP) {
	t.Helper()
	a = e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b = e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: a.qp.QPN(), PathMTU: ctx.MTU1024, Path: ctx.AddressAttr{DLID: 1}, MaxDestRdAtomic: depth}))
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: b.qp.QPN(), PathMTU: ctx.MTU1024, Path: ctx.AddressAttr{DLID: 2}, MaxDestRdAtomic: 1}))
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 10, RetryCount: 3, MaxRdAtomic: 1}))
	return a, b
}

// An atomic to an RC responder without a read depth: REMOTE_ACCESS_ERR,
// the counter untouched.
func TestNoReadDepthNoRemoteAtomic(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := readDepthPair(t, e, 0)
	binary.NativeEndian.PutUint64(e.mem2(16, 8), 41)
	i := a.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(16), e.mr2.RKey()), atomicSeg(1, 0), dataSeg(8, e.mr.LKey(), e.addr(8)))
	e.run()
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeRemoteAccess, i)
	require.Equal(t, uint64(41), binary.NativeEndian.Uint64(e.mem2(16, 8)))
}

func TestLengthErrors(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := e.rcPair(qpOpts{})
	ri := b.postRecv(dataSeg(8, e.mr2.LKey(), e.addr2(0)))
	b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(64)))
	si := a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg(make([]byte, 9)))
	e.run()
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeRemoteInvalReq, si)
	resp := b.rcq.drain()
	require.Len(t, resp, 2, "the failed receive, then the flush of the other")
	requireErr(t, resp[0], prm.CQERespErr, prm.SyndromeLocalLength, ri)
	requireErr(t, resp[1], prm.CQERespErr, prm.SyndromeWRFlush, ri+1)

	// An atomic whose result segment is not 8 bytes.
	a, _ = e.rcPair(qpOpts{})
	si = a.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), atomicSeg(1, 0), dataSeg(4, e.mr.LKey(), e.addr(0)))
	e.run()
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeLocalLength, si)
}

// An atomic whose remote address is not aligned to its size is an
// invalid request (the IBA's responder class C): the requester completes
// with REM_INV_REQ_ERR, and the RC responder moves to error with the
// invalid-request event (QP_REQ_ERR), its memory untouched.
func TestRemoteInvalidRequestMisalignedAtomic(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := e.rcPair(qpOpts{})
	binary.NativeEndian.PutUint64(e.mem2(0, 8), 0x1111)
	binary.NativeEndian.PutUint64(e.mem2(8, 8), 0x2222)
	i := a.post(prm.OpAtomicCS, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(4), e.mr2.RKey()), atomicSeg(1, 0), dataSeg(8, e.mr.LKey(), e.addr(0)))
	e.run()
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeRemoteInvalReq, i)
	require.Equal(t, ctx.QPStateError, qpState(t, a))
	require.Equal(t, ctx.QPStateError, qpState(t, b), "an RC responder moves to error on an invalid request")
	require.Equal(t, uint64(0x1111), binary.NativeEndian.Uint64(e.mem2(0, 8)))
	require.Equal(t, uint64(0x2222), binary.NativeEndian.Uint64(e.mem2(8, 8)))
	requireEvent(t, e.c2, ctx.EventQPRequestError, b.qp.QPN())
}

func TestRemoteOperationalError(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := e.rcPair(qpOpts{})
	ri := b.postRecv(dataSeg(64, 0x4242, e.addr2(0))) // lkey unknown to the responder
	si := a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("x")))
	e.run()
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeRemoteOp, si)
	requireErr(t, b.rcq.one(t), prm.CQERespErr, prm.SyndromeLocalProt, ri)
}

func TestLocalQPOperationError(t *testing.T) {
	e := newEnv(t, Options{})
	e.allowViolations = true
	u := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeUD})
	require.NoError(t, u.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, QKey: 1}))
	require.NoError(t, u.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR}))
	require.NoError(t, u.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS}))
	i := u.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, udAV(1, 1, 1), raddrSeg(e.addr(0), e.mr.RKey()), inlineSeg([]byte{1}))
	e.run()
	requireErr(t, u.scq.one(t), prm.CQEReqErr, prm.SyndromeLocalQPOp, i)
	v := e.f.Violations()
	require.Len(t, v, 1)
	require.Equal(t, ViolationOpcode, v[0].Kind)
}

func TestRNRThenSuccess(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	e.connectRC(a, b, 3, 14) // rnr_retry 3, responder timer code 14 = 1.28 ms
	i := a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("late")))
	for k := 0; k < 2; k++ {
		_, err := e.f.Step()
		require.NoError(t, err)
	}
	require.Empty(t, a.scq.drain())
	require.Equal(t, uint64(1), e.f.Stats().RNRNaks)
	e.f.Advance(time.Millisecond) // not yet due
	_, err := e.f.Step()
	require.NoError(t, err)
	require.Equal(t, uint64(1), e.f.Stats().RNRNaks)
	b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(0)))
	e.run()
	c := a.scq.one(t)
	require.Equal(t, prm.CQEReq, c.op)
	require.Equal(t, i, c.counter)
	require.Equal(t, []byte("late"), e.mem2(0, 4))
	require.GreaterOrEqual(t, e.f.Now(), 1280*time.Microsecond)
}

func TestRNRRetryExceeded(t *testing.T) {
	for _, retries := range []uint8{0, 1, 6} {
		e := newEnv(t, Options{})
		a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
		b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
		e.connectRC(a, b, retries, 1)
		i := a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("nobody listens")))
		a.post(prm.OpRdmaWrite, 0, 0, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte{9}))
		e.run()
		got := a.scq.drain()
		require.Len(t, got, 2)
		requireErr(t, got[0], prm.CQEReqErr, prm.SyndromeRNRRetryExc, i)
		requireErr(t, got[1], prm.CQEReqErr, prm.SyndromeWRFlush, i+1)
		require.Equal(t, uint64(retries), e.f.Stats().RNRNaks)
		require.Zero(t, e.mem2(0, 1)[0], "nothing after the failed WQE executed")
		require.Equal(t, ctx.QPStateRTS, qpState(t, b), "the responder is not affected")
	}
}

func TestRNRRetryForeverIsNotIdle(t *testing.T) {
	e := newEnv(t, Options{MaxRounds: 1000})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	e.connectRC(a, b, 7, 1)
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("x")))
	require.ErrorIs(t, e.f.RunUntilIdle(), ErrNotIdle)
	b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(0)))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
}

func TestTransportRetryExceeded(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	// a is connected; b stays in INIT and drops every packet.
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: b.qp.QPN(), PathMTU: ctx.MTU1024, Path: ctx.AddressAttr{DLID: 2}}))
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 10, RetryCount: 2}))
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
	i := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte{1}))
	e.run()
	c := a.scq.one(t)
	requireErr(t, c, prm.CQEReqErr, prm.SyndromeTransportRetryExc, i)
	require.Equal(t, uint8(0x81), c.vendor, "a ConnectX's vendor syndrome of RETRY_EXC_ERR")
	require.Equal(t, uint64(2), e.f.Stats().Retries, "retry_cnt resends after the first try")
	require.GreaterOrEqual(t, e.f.Now(), 3*ctx.AckTimeoutDuration(10))
}

// __mlx5_ib_modify_qp writes dest_qp_num unchecked: an RC QP connected to
// QPN 0 reaches RTS, and its requests, which no QP takes, end with
// RETRY_EXC_ERR, on a private fabric and on a shared one (where QPN 0 is
// in no process's range).
func TestRemoteQPNZero(t *testing.T) {
	for _, o := range []Options{{}, {Mode: Engine, Fabric: testFabricName(t)}} {
		e := newEnv(t, o)
		a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
		require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
		require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: 0, PathMTU: ctx.MTU1024,
			Path: ctx.AddressAttr{DLID: lidOf(t, e.pd2.Context())}}))
		require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 10, RetryCount: 1}))
		i := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte{1}))
		var c cqe
		if o.Mode == Engine {
			c = waitCQE(t, a.scq, 5*time.Second)
		} else {
			e.run()
			c = a.scq.one(t)
		}
		requireErr(t, c, prm.CQEReqErr, prm.SyndromeTransportRetryExc, i)
		require.Zero(t, e.buf2.Bytes()[0], "nothing written")
	}
}

func TestFlushExactlyOnce(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := e.rcPair(qpOpts{sendDepth: 8})
	var idx []uint16
	for i := 0; i < 5; i++ {
		a.postRecv(dataSeg(64, e.mr.LKey(), e.addr(i*64)))
	}
	// Stop the engine from executing anything: the QP goes to error first.
	require.NoError(t, e.f.FailQP(a.qp.QPN()))
	for i := 0; i < 6; i++ {
		fm := uint8(0)
		if i%2 == 0 {
			fm = prm.FlagCQUpdate
		}
		idx = append(idx, a.post(prm.OpRdmaWrite, 0, fm, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg(make([]byte, 40*i))))
	}
	e.run()
	sq := a.scq.drain()
	require.Len(t, sq, 6, "every outstanding WQE, signaled or not")
	for i, c := range sq {
		requireErr(t, c, prm.CQEReqErr, prm.SyndromeWRFlush, idx[i])
		require.Equal(t, prm.OpRdmaWrite, c.sendOp)
	}
	rq := a.rcq.drain()
	require.Len(t, rq, 5)
	for i, c := range rq {
		requireErr(t, c, prm.CQERespErr, prm.SyndromeWRFlush, uint16(i))
		require.Equal(t, uint8(0xf9), c.vendor, "a ConnectX's vendor syndrome of a flush")
	}
	// Posting after the flush flushes the new WQEs, once.
	j := a.post(prm.OpNop, 0, 0, 0)
	e.run()
	e.run()
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeWRFlush, j)
	require.Empty(t, a.scq.drain())
	requireEvent(t, e.c, ctx.EventQPFatal, anyQPN)

	// RESET and back to RTS: the QP works again.
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateReset}))
	require.Equal(t, uint32(0), prm.Load32(a.d.DBRec))
	a.pi, a.rqHead = 0, 0
	a.scq.drain()
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: b.qp.QPN(), PathMTU: ctx.MTU4096, Path: ctx.AddressAttr{DLID: 2}}))
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7}))
	k := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte{7}))
	e.run()
	c := a.scq.one(t)
	require.Equal(t, prm.CQEReq, c.op)
	require.Equal(t, k, c.counter)
	require.Equal(t, uint16(0), k)
	require.Equal(t, byte(7), e.mem2(0, 1)[0])
}

func TestCQOverrun(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{cqDepth: 3, sendDepth: 16})
	require.Equal(t, uint32(4), a.scq.d.CQECnt)
	for i := 0; i < 6; i++ {
		a.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	}
	e.run()
	require.Error(t, e.f.CQError(a.scq.cq.CQN()))
	got := a.scq.drain()
	require.Len(t, got, 4, "the ring is full; nothing is overwritten")
	for i, c := range got {
		require.Equal(t, prm.CQEReq, c.op)
		require.Equal(t, uint16(i), c.counter)
	}
	require.Equal(t, ctx.QPStateError, qpState(t, a))
	var types []ctx.AsyncEventType
	for {
		ev, ok, err := provider.ReadAsyncEvent(e.c)
		require.NoError(t, err)
		if !ok {
			break
		}
		types = append(types, ev.Type)
	}
	require.Contains(t, types, ctx.EventCQError)
	require.Contains(t, types, ctx.EventQPFatal)
	require.Equal(t, uint64(1), e.f.Stats().CQOverruns)
}

func TestCQNoOverrunWhenConsumed(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{cqDepth: 3, sendDepth: 16})
	for i := 0; i < 100; i++ {
		a.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
		e.run()
		c := a.scq.one(t)
		require.Equal(t, uint16(i), c.counter)
	}
	require.NoError(t, e.f.CQError(a.scq.cq.CQN()))
}

// TestAtomicResultLongerThanOperand: the result data segment of an atomic
// must be exactly the operand size; a longer one is a local length error
// too, and nothing is executed (neither the remote target nor the result
// buffer changes).
func TestAtomicResultLongerThanOperand(t *testing.T) {
	e := newEnv(t, Options{})
	fa32 := make([]byte, 16)
	be.PutUint32(fa32[0:], 1)
	cases := []struct {
		name string
		post func(a *testQP) uint16
	}{
		{"fetch-and-add, 16-byte result", func(a *testQP) uint16 {
			return a.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), atomicSeg(1, 0), dataSeg(16, e.mr.LKey(), e.addr(0)))
		}},
		{"compare-and-swap, 16-byte result", func(a *testQP) uint16 {
			return a.post(prm.OpAtomicCS, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), atomicSeg(9, 5), dataSeg(16, e.mr.LKey(), e.addr(0)))
		}},
		{"compare-and-swap, 9-byte result", func(a *testQP) uint16 {
			return a.post(prm.OpAtomicCS, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), atomicSeg(9, 5), dataSeg(9, e.mr.LKey(), e.addr(0)))
		}},
		{"4-byte masked fetch-and-add, 8-byte result", func(a *testQP) uint16 {
			return a.post(prm.OpAtomicMaskedFA, prm.OpmodMaskedAtomic32, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), fa32, dataSeg(8, e.mr.LKey(), e.addr(0)))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := e.rcPair(qpOpts{})
			be.PutUint64(e.mem2(0, 8), 5)
			copy(e.mem(0, 16), bytes.Repeat([]byte{0xaa}, 16))
			i := c.post(a)
			e.run()
			requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeLocalLength, i)
			require.Equal(t, ctx.QPStateError, qpState(t, a))
			require.Equal(t, ctx.QPStateRTS, qpState(t, b), "the request never left")
			require.Equal(t, uint64(5), be.Uint64(e.mem2(0, 8)), "the target is unchanged")
			require.Equal(t, bytes.Repeat([]byte{0xaa}, 16), e.mem(0, 16), "no result is written")
		})
	}
}

// TestReceiveBufferOfAnotherPD: a receive WQE whose buffer is a region of a
// PD other than the receive queue's (the QP's for an RQ, the SRQ's for an
// SRQ) is a protection error on the responder, even with local write
// access: the receive completes with LOCAL_PROT_ERR, the RC responder moves
// to error, the requester gets REMOTE_OP_ERR, and the buffer is untouched.
func TestReceiveBufferOfAnotherPD(t *testing.T) {
	e := newEnv(t, Options{})
	pd3, err := e.c2.AllocProtectionDomain()
	require.NoError(t, err)
	// Local write on a PD of the responder's HCA, over memory pd2's region
	// covers as well.
	const off = 65536
	other, err := pd3.RegisterMemory(e.mem2(off, 4096), ctx.AccessLocalWrite)
	require.NoError(t, err)
	cases := []struct {
		name  string
		srqPD *ctx.ProtectionDomain // nil: the QP's own RQ
		lkey  uint32                // of a region outside the receive queue's PD
	}{
		{"RQ, region of another PD", nil, other.LKey()},
		{"SRQ, region of another PD", e.pd2, other.LKey()},
		{"SRQ of another PD than the QP's, region of the QP's PD", pd3, e.mr2.LKey()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var srq *testSRQ
			if c.srqPD != nil {
				srq = e.newSRQ(c.srqPD, 4, 1)
			}
			a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
			b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
			e.connectRC(a, b, 7, 1)
			copy(e.mem2(off, 64), make([]byte, 64))
			var ri uint16
			if srq != nil {
				ri = srq.post(dataSeg(64, c.lkey, e.addr2(off)))
			} else {
				ri = b.postRecv(dataSeg(64, c.lkey, e.addr2(off)))
			}
			si := a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("not yours")))
			e.run()
			requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeRemoteOp, si)
			rc := b.rcq.one(t)
			requireErr(t, rc, prm.CQERespErr, prm.SyndromeLocalProt, ri)
			if srq != nil {
				require.Equal(t, srq.srq.SRQN(), rc.srqn)
			}
			require.Equal(t, make([]byte, 64), e.mem2(off, 64), "the buffer is untouched")
			require.Equal(t, ctx.QPStateError, qpState(t, a))
			require.Equal(t, ctx.QPStateError, qpState(t, b))
		})
	}

	// The SRQ's own PD is the one that counts: pd3's region is good for an
	// SRQ on pd3 though the QP is on pd2.
	srq := e.newSRQ(pd3, 4, 1)
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
	e.connectRC(a, b, 7, 1)
	ri := srq.post(dataSeg(64, other.LKey(), e.addr2(off)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("yours")))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	rc := b.rcq.one(t)
	require.Equal(t, prm.CQERespSend, rc.op)
	require.Equal(t, ri, rc.counter)
	require.Equal(t, []byte("yours"), e.mem2(off, 5))
}

// TestOpenUnknownDeviceNamesTheDevices: opening a device the software HCA
// does not have is ErrNotFound, and the error lists those it has.
func TestOpenUnknownDeviceNamesTheDevices(t *testing.T) {
	f := New(Options{Mode: Manual})
	defer f.Close()
	_, err := f.Open("mlx5_0")
	require.ErrorIs(t, err, ctx.ErrNotFound)
	require.ErrorContains(t, err, `"mlx5_0"`)
	require.ErrorContains(t, err, "the software HCA has sim0, sim1")
}

// TestErrorCQEsOnTimestampedCQ: on a CQ created with Timestamps, an error
// CQE still carries its syndromes. They sit where a successful CQE has the
// timestamp (bytes 52..55 of struct mlx5_err_cqe), so stamping an error CQE
// would overwrite them, and rdma-core would report IBV_WC_GENERAL_ERR for a
// remote access error and for the flush after it.
func TestErrorCQEsOnTimestampedCQ(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{timestamps: true})
	i0 := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte{1}))
	i1 := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(64), 0x7777), inlineSeg([]byte{2}))
	i2 := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(128), e.mr2.RKey()), inlineSeg([]byte{3}))
	e.run()
	got := a.scq.drain()
	require.Len(t, got, 3, "CQEs: %+v", got)
	require.Equal(t, prm.CQEReq, got[0].op)
	require.Equal(t, i0, got[0].counter)
	requireErr(t, got[1], prm.CQEReqErr, prm.SyndromeRemoteAccess, i1)
	requireErr(t, got[2], prm.CQEReqErr, prm.SyndromeWRFlush, i2)
	require.Equal(t, []byte{1, 0}, e.mem2(0, 2), "the write before the error landed")
	require.Equal(t, []byte{0, 0}, e.mem2(64, 2))
	require.Equal(t, []byte{0, 0}, e.mem2(128, 2), "the flushed write did not")
}
