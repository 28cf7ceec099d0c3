package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

func (e *env) udQP(pd *ctx.ProtectionDomain, qkey uint32, o qpOpts) *testQP {
	e.t.Helper()
	o.typ = ctx.QPTypeUD
	q := e.newQP(pd, o)
	require.NoError(e.t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, QKey: qkey}))
	require.NoError(e.t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR}))
	require.NoError(e.t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS}))
	return q
}

func TestUDSendAndGRHSpace(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.udQP(e.pd, 0x1111, qpOpts{})
	b := e.udQP(e.pd2, 0x2222, qpOpts{})
	for i := 0; i < 3; i++ {
		b.postRecv(dataSeg(40+100, e.mr2.LKey(), e.addr2(i*256)))
	}
	copy(e.mem2(0, 40), make([]byte, 40))
	e.mem2(0, 1)[0] = 0xee // the GRH space is left alone without a GRH
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, udAV(0x2222, b.qp.QPN(), 2), inlineSeg([]byte("datagram")))
	a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 0x55, udAV(0x9999, b.qp.QPN(), 2), inlineSeg([]byte("bad qkey")))
	a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 0x66, udAV(0x2222, b.qp.QPN(), 2), inlineSeg([]byte("second")))
	e.run()
	require.Len(t, a.scq.drain(), 3, "UD sends complete whatever happens to the packet")
	got := b.rcq.drain()
	require.Len(t, got, 2, "the wrong qkey is dropped silently")
	require.Equal(t, prm.CQERespSend, got[0].op)
	require.Equal(t, uint32(40+8), got[0].byteCnt)
	require.Equal(t, a.qp.QPN(), got[0].srcQPN)
	require.Equal(t, uint16(1), got[0].slid)
	require.False(t, got[0].grh)
	require.Equal(t, byte(0xee), e.mem2(0, 1)[0])
	require.Equal(t, []byte("datagram"), e.mem2(40, 8))
	require.Equal(t, prm.CQERespSendImm, got[1].op)
	require.Equal(t, uint32(0x66), got[1].imm)
	require.Equal(t, uint16(1), got[1].counter)
	require.Equal(t, []byte("second"), e.mem2(256+40, 6))
	require.Equal(t, uint64(1), e.f.Stats().UDDropped)
}

func TestUDWithGRH(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.udQP(e.pd, 1, qpOpts{})
	b := e.udQP(e.pd2, 1, qpOpts{})
	gids, err := e.c2.QueryGIDs(1)
	require.NoError(t, err)
	ah, err := e.pd.CreateAddressHandle(ctx.AddressAttr{GlobalRoute: true, DGID: gids[0].GID, DLID: lidOf(t, e.c2), HopLimit: 64, TrafficClass: 3})
	require.NoError(t, err)
	av := ah.AV()
	be.PutUint32(av[prm.AVKey:], 1)
	be.PutUint32(av[prm.AVDQPDCT:], b.qp.QPN()|prm.ExtendedUDAV)
	b.postRecv(dataSeg(100, e.mr2.LKey(), e.addr2(0)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, av[:], inlineSeg([]byte("routed")))
	e.run()
	c := b.rcq.one(t)
	require.True(t, c.grh)
	require.Equal(t, uint32(46), c.byteCnt)
	grh := e.mem2(0, 40)
	require.Equal(t, byte(6<<4), grh[0]&0xf0)
	require.Equal(t, byte(64), grh[7])
	require.Equal(t, gids[0].GID[:], grh[24:40])
	mine, err := e.c.QueryGIDs(1)
	require.NoError(t, err)
	require.Equal(t, mine[0].GID[:], grh[8:24])
	require.Equal(t, []byte("routed"), e.mem2(40, 6))
}

func TestUDNoReceiveAndTooLarge(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.udQP(e.pd, 1, qpOpts{})
	b := e.udQP(e.pd2, 1, qpOpts{})
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, udAV(1, b.qp.QPN(), 2), inlineSeg([]byte("no receive")))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	require.Empty(t, b.rcq.drain())
	// More than the MTU.
	i := a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, udAV(1, b.qp.QPN(), 2), dataSeg(4097, e.mr.LKey(), e.addr(0)))
	e.run()
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeLocalLength, i)
	// Receive buffer without room for GRH + payload.
	b.postRecv(dataSeg(45, e.mr2.LKey(), e.addr2(0)))
	a2 := e.udQP(e.pd, 1, qpOpts{})
	a2.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, udAV(1, b.qp.QPN(), 2), inlineSeg([]byte("123456")))
	e.run()
	require.Equal(t, prm.CQEReq, a2.scq.one(t).op)
	requireErr(t, b.rcq.one(t), prm.CQERespErr, prm.SyndromeLocalLength, 0)
}

func TestUDFaults(t *testing.T) {
	e := newEnv(t, Options{Seed: 42})
	a := e.udQP(e.pd, 1, qpOpts{sendDepth: 64})
	b := e.udQP(e.pd2, 1, qpOpts{recvDepth: 512, cqDepth: 1024})
	const n = 200
	for i := 0; i < 2*n; i++ {
		b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(i*64)))
	}
	require.NoError(t, e.f.InjectUDFaults(UDFaults{Drop: 0.1, Duplicate: 0.1, Reorder: 0.1}))
	for i := 0; i < n; i++ {
		a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, uint32(i), udAV(1, b.qp.QPN(), 2), inlineSeg([]byte{byte(i)}))
		if i%16 == 15 {
			e.run()
			require.Len(t, a.scq.drain(), 16)
		}
	}
	e.run()
	a.scq.drain()
	got := b.rcq.drain()
	st := e.f.Stats()
	require.Greater(t, st.UDDropped, uint64(0))
	require.Greater(t, st.UDDuplicated, uint64(0))
	require.Greater(t, st.UDReordered, uint64(0))
	require.Equal(t, n-int(st.UDDropped)+int(st.UDDuplicated), len(got))
	seen := map[uint32]int{}
	inversions := 0
	for i, c := range got {
		require.Equal(t, prm.CQERespSendImm, c.op)
		seen[c.imm]++
		require.Equal(t, byte(c.imm), e.mem2(int(c.counter)*64+40, 1)[0])
		if i > 0 && c.imm < got[i-1].imm {
			inversions++
		}
	}
	require.Greater(t, inversions, 0, "reordering shows")
	dups := 0
	for _, k := range seen {
		require.LessOrEqual(t, k, 2)
		if k == 2 {
			dups++
		}
	}
	require.Equal(t, int(st.UDDuplicated), dups)

	// Deterministic: the same seed gives the same counts.
	e2 := newEnv(t, Options{Seed: 42})
	a2 := e2.udQP(e2.pd, 1, qpOpts{sendDepth: 64})
	b2 := e2.udQP(e2.pd2, 1, qpOpts{recvDepth: 512, cqDepth: 1024})
	for i := 0; i < 2*n; i++ {
		b2.postRecv(dataSeg(64, e2.mr2.LKey(), e2.addr2(i*64)))
	}
	require.NoError(t, e2.f.InjectUDFaults(UDFaults{Drop: 0.1, Duplicate: 0.1, Reorder: 0.1}))
	for i := 0; i < n; i++ {
		a2.post(prm.OpSendImm, 0, prm.FlagCQUpdate, uint32(i), udAV(1, b2.qp.QPN(), 2), inlineSeg([]byte{byte(i)}))
		if i%16 == 15 {
			e2.run()
			a2.scq.drain()
		}
	}
	e2.run()
	st2 := e2.f.Stats()
	require.Equal(t, st.UDDropped, st2.UDDropped)
	require.Equal(t, st.UDDuplicated, st2.UDDuplicated)
}

func TestDropNextUD(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.udQP(e.pd, 1, qpOpts{})
	b := e.udQP(e.pd2, 1, qpOpts{})
	for i := 0; i < 3; i++ {
		b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(i*64)))
	}
	e.f.dropNextUD(2)
	for i := 0; i < 3; i++ {
		a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, uint32(i), udAV(1, b.qp.QPN(), 2), inlineSeg([]byte{1}))
	}
	e.run()
	c := b.rcq.one(t)
	require.Equal(t, uint32(2), c.imm)
}

func (e *env) dct(pd *ctx.ProtectionDomain, srq *testSRQ, key uint64) *testQP {
	e.t.Helper()
	q := e.newQP(pd, qpOpts{typ: ctx.QPTypeDCT, srq: srq, dcKey: key})
	require.NoError(e.t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
	require.NoError(e.t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU4096, MinRNRTimer: 1}))
	return q
}

func (e *env) dci(pd *ctx.ProtectionDomain) *testQP {
	e.t.Helper()
	q := e.newQP(pd, qpOpts{typ: ctx.QPTypeDCI, sendDepth: 32})
	require.NoError(e.t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit}))
	require.NoError(e.t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU4096}))
	require.NoError(e.t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 10, RetryCount: 2, RNRRetry: 2}))
	return q
}

func TestDCOneInitiatorManyTargets(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 16, 1)
	t1 := e.dct(e.pd2, srq, 0xfeed)
	t2 := e.dct(e.pd2, srq, 0xbeef)
	d := e.dci(e.pd)
	require.Zero(t, d.d.RQ.WQECnt, "a DCI has no receive queue")
	for i := 0; i < 4; i++ {
		srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(i*64)))
	}
	d.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dcAV(0xfeed, t1.qp.QPN(), 2), inlineSeg([]byte("to t1")))
	d.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 7, dcAV(0xbeef, t2.qp.QPN(), 2), inlineSeg([]byte("to t2")))
	d.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, dcAV(0xbeef, t2.qp.QPN(), 2), raddrSeg(e.addr2(4096), e.mr2.RKey()), inlineSeg([]byte("written")))
	host.PutUint64(e.mem2(8192, 8), 10)
	d.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, dcAV(0xfeed, t1.qp.QPN(), 2), raddrSeg(e.addr2(8192), e.mr2.RKey()), atomicSeg(3, 0), dataSeg(8, e.mr.LKey(), e.addr(0)))
	e.run()
	req := d.scq.drain()
	require.Len(t, req, 4)
	for _, c := range req {
		require.Equal(t, prm.CQEReq, c.op)
	}
	r1 := t1.rcq.one(t)
	require.Equal(t, t1.qp.QPN(), r1.qpn)
	require.Equal(t, d.qp.QPN(), r1.srcQPN)
	require.Equal(t, srq.srq.SRQN(), r1.srqn)
	require.Equal(t, []byte("to t1"), e.mem2(int(r1.counter)*64, 5))
	r2 := t2.rcq.one(t)
	require.Equal(t, prm.CQERespSendImm, r2.op)
	require.Equal(t, []byte("to t2"), e.mem2(int(r2.counter)*64, 5))
	require.Equal(t, []byte("written"), e.mem2(4096, 7))
	require.Equal(t, uint64(10), host.Uint64(e.mem(0, 8)))
	require.Equal(t, uint64(13), host.Uint64(e.mem2(8192, 8)))
}

// TestDCWrongKeyAndUnknownTarget: a wrong DC key completes the DCI's WQE
// with REMOTE_ACCESS_ERR, the DCT writes nothing, stays in RTR, counts
// the violation and raises no event (mlx5_ib passes on none of a DCT);
// a DCT number or LID that reaches no DCT ends in RETRY_EXC_ERR.
func TestDCWrongKeyAndUnknownTarget(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 16, 1)
	t1 := e.dct(e.pd2, srq, 0xfeed)
	d := e.dci(e.pd)
	srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(0)))
	i := d.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dcAV(0xbad, t1.qp.QPN(), 2), inlineSeg([]byte("x")))
	e.run()
	requireErr(t, d.scq.one(t), prm.CQEReqErr, prm.SyndromeRemoteAccess, i)
	require.Empty(t, t1.rcq.drain())
	st, err := t1.qp.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTR, st, "a DCT does not go to error")
	require.Empty(t, readEvents(t, e.c2), "no event of a DCT")
	require.Equal(t, uint64(1), e.f.Stats().DCKeyViolations)

	d2 := e.dci(e.pd)
	i = d2.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dcAV(0xfeed, 0xabcdef, 2), inlineSeg([]byte("x")))
	e.run()
	requireErr(t, d2.scq.one(t), prm.CQEReqErr, prm.SyndromeTransportRetryExc, i)
	// The right DCT number but the wrong LID is lost too.
	d3 := e.dci(e.pd)
	i = d3.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dcAV(0xfeed, t1.qp.QPN(), 1), inlineSeg([]byte("x")))
	e.run()
	requireErr(t, d3.scq.one(t), prm.CQEReqErr, prm.SyndromeTransportRetryExc, i)
}

// TestDCTResponderErrorsRaiseNoEvent: a WRITE under an rkey the DCT's PD
// does not know and a misaligned atomic complete the DCI's WQE with
// REMOTE_ACCESS_ERR and REMOTE_INVAL_REQ_ERR, the DCT's memory untouched;
// the DCT stays in RTR, serves the next DCI, and raises no event, where an
// RC responder raises QP_ACCESS_ERR or QP_REQ_ERR: mlx5_ib's event
// dispatch (qpc.c) lets a DCT have none but DCT_DRAINED, which it keeps.
func TestDCTResponderErrorsRaiseNoEvent(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 16, 1)
	t1 := e.dct(e.pd2, srq, 0xfeed)
	host.PutUint64(e.mem2(0, 8), 0x1111)
	host.PutUint64(e.mem2(8, 8), 0x2222)

	d := e.dci(e.pd)
	i := d.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, dcAV(0xfeed, t1.qp.QPN(), 2), raddrSeg(e.addr2(0), 0x4242), inlineSeg([]byte("bad rkey")))
	e.run()
	requireErr(t, d.scq.one(t), prm.CQEReqErr, prm.SyndromeRemoteAccess, i)

	d2 := e.dci(e.pd)
	i = d2.post(prm.OpAtomicCS, 0, prm.FlagCQUpdate, 0, dcAV(0xfeed, t1.qp.QPN(), 2), raddrSeg(e.addr2(4), e.mr2.RKey()), atomicSeg(1, 0), dataSeg(8, e.mr.LKey(), e.addr(0)))
	e.run()
	requireErr(t, d2.scq.one(t), prm.CQEReqErr, prm.SyndromeRemoteInvalReq, i)

	require.Equal(t, uint64(0x1111), host.Uint64(e.mem2(0, 8)))
	require.Equal(t, uint64(0x2222), host.Uint64(e.mem2(8, 8)))
	require.Equal(t, ctx.QPStateRTR, qpState(t, t1), "a DCT does not go to error")
	require.Empty(t, readEvents(t, e.c2), "no event of a DCT")
	require.Zero(t, e.f.Stats().DCKeyViolations, "the key was right")

	d3 := e.dci(e.pd)
	i = d3.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, dcAV(0xfeed, t1.qp.QPN(), 2), raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte("served")))
	e.run()
	c := d3.scq.one(t)
	require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	require.Equal(t, uint16(i), c.counter)
	require.Equal(t, []byte("served"), e.mem2(0, 6))
}

func TestDCRNR(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 16, 1)
	t1 := e.dct(e.pd2, srq, 1)
	d := e.dci(e.pd) // rnr_retry 2
	i := d.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dcAV(1, t1.qp.QPN(), 2), inlineSeg([]byte("x")))
	e.run()
	requireErr(t, d.scq.one(t), prm.CQEReqErr, prm.SyndromeRNRRetryExc, i)
	require.Equal(t, uint64(2), e.f.Stats().RNRNaks)
}

func TestRoCEAddressing(t *testing.T) {
	e := newEnv(t, Options{LinkLayer: ctx.LinkLayerEthernet})
	pa, err := e.c.QueryPort(1)
	require.NoError(t, err)
	require.Equal(t, ctx.LinkLayerEthernet, pa.LinkLayer)
	gids2, err := e.c2.QueryGIDs(1)
	require.NoError(t, err)
	gids1, err := e.c.QueryGIDs(1)
	require.NoError(t, err)
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	// Without a GRH RTR is refused on RoCE.
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
	err = a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: b.qp.QPN(), PathMTU: ctx.MTU1024, Path: ctx.AddressAttr{DLID: 2}})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: b.qp.QPN(), PathMTU: ctx.MTU1024,
		Path: ctx.AddressAttr{GlobalRoute: true, DGID: gids2[3].GID, SGIDIndex: 3, HopLimit: 64}}))
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7}))
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: a.qp.QPN(), PathMTU: ctx.MTU1024,
		Path: ctx.AddressAttr{GlobalRoute: true, DGID: gids1[3].GID, SGIDIndex: 3, HopLimit: 64}}))
	require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7}))
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte("roce")))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	require.Equal(t, []byte("roce"), e.mem2(0, 4))

	// Address handles on RoCE need a GRH; the AV carries no GRH bit.
	_, err = e.pd.CreateAddressHandle(ctx.AddressAttr{DLID: 2})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	ah, err := e.pd.CreateAddressHandle(ctx.AddressAttr{GlobalRoute: true, DGID: gids2[3].GID, SGIDIndex: 3})
	require.NoError(t, err)
	av := ah.AV()
	require.Zero(t, be.Uint32(av[prm.AVGRHGIDFL:])&prm.AVGRHBit)
	require.Equal(t, uint32(3), be.Uint32(av[prm.AVGRHGIDFL:])>>prm.AVSGIDShift&prm.AVSGIDMask)
	require.Equal(t, gids2[3].GID[:], av[prm.AVRGID:])
	require.Equal(t, uint16(0xc000), be.Uint16(av[prm.AVRLID:])&0xc000, "RoCE v2 UDP source port")
}

func TestAddressHandleIB(t *testing.T) {
	e := newEnv(t, Options{})
	// Source path bits have 7 bits: wider is refused, not masked.
	_, err := e.pd.CreateAddressHandle(ctx.AddressAttr{DLID: 0x1234, SL: 5, SrcPathBits: 0x81})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	ah, err := e.pd.CreateAddressHandle(ctx.AddressAttr{DLID: 0x1234, SL: 5, SrcPathBits: 0x7f})
	require.NoError(t, err)
	av := ah.AV()
	require.Equal(t, uint16(0x1234), be.Uint16(av[prm.AVRLID:]))
	require.Equal(t, byte(5), av[prm.AVStatRateSL])
	require.Equal(t, byte(0x7f), av[prm.AVFlMLID])
	require.Zero(t, be.Uint32(av[prm.AVGRHGIDFL:]))
	var g ctx.GID
	g[15] = 9
	ah, err = e.pd.CreateAddressHandle(ctx.AddressAttr{DLID: 2, GlobalRoute: true, DGID: g, FlowLabel: 0x12345, TrafficClass: 7, HopLimit: 3})
	require.NoError(t, err)
	av = ah.AV()
	require.Equal(t, uint32(prm.AVGRHBit|0x12345), be.Uint32(av[prm.AVGRHGIDFL:]))
	require.Equal(t, byte(7), av[prm.AVTClass])
	require.Equal(t, byte(3), av[prm.AVHopLimit])
	require.Equal(t, g[:], av[prm.AVRGID:])
}

// TestUDControlledQKey: a Q_Key with bit 31 set in the datagram segment is
// a controlled Q_Key; the device sends the QP's own Q_Key in its place, so
// the packet reaches a QP whose Q_Key is the sender's and no other, whatever
// the low 31 bits of the segment's value.
func TestUDControlledQKey(t *testing.T) {
	e := newEnv(t, Options{})
	const k = 0x1234
	a := e.udQP(e.pd, k, qpOpts{})
	same := e.udQP(e.pd2, k, qpOpts{})
	other := e.udQP(e.pd2, 0x5678, qpOpts{})
	for j, q := range []*testQP{same, other} {
		for i := 0; i < 2; i++ {
			q.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(j*256+i*64)))
		}
	}
	a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 1, udAV(0x80000000, same.qp.QPN(), 2), inlineSeg([]byte("x")))
	a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 2, udAV(0x80000000|0x5678, same.qp.QPN(), 2), inlineSeg([]byte("y")))
	a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 3, udAV(0x80000000, other.qp.QPN(), 2), inlineSeg([]byte("z")))
	a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 4, udAV(0x80000000|0x5678, other.qp.QPN(), 2), inlineSeg([]byte("w")))
	e.run()
	require.Len(t, a.scq.drain(), 4)
	got := same.rcq.drain()
	require.Len(t, got, 2, "the sender's own Q_Key replaces a controlled one")
	require.Equal(t, uint32(1), got[0].imm)
	require.Equal(t, uint32(2), got[1].imm)
	require.Empty(t, other.rcq.drain(), "the sender's Q_Key is not the receiver's")
	require.Equal(t, uint64(2), e.f.Stats().UDDropped)
}

// TestDCTScatterToCQE checks that a DCT asking for scatter-to-CQE gets it
// only over 128-byte CQEs, as mlx5_ib's create_dct grants it: in a 64-byte
// CQE the payload would cover the DCI's QPN.
func TestDCTScatterToCQE(t *testing.T) {
	for _, size := range []uint32{64, 128} {
		e := newEnv(t, Options{})
		srq := e.newSRQ(e.pd2, 16, 1)
		q := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeDCT, srq: srq, dcKey: 0xfeed, scatterToCQE: true, cqeSize: size})
		require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
		require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU4096, MinRNRTimer: 1}))
		d := e.dci(e.pd)
		srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(0)))
		payload := []byte("a short message")
		d.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dcAV(0xfeed, q.qp.QPN(), 2), inlineSeg(payload))
		e.run()
		require.Len(t, d.scq.drain(), 1)
		r := q.rcq.one(t)
		require.Equal(t, d.qp.QPN(), r.srcQPN, "CQE size %d", size)
		require.Equal(t, uint32(len(payload)), r.byteCnt)
		if size == 64 {
			require.Equal(t, uint8(prm.CQEFormatNone), r.format)
			require.Equal(t, payload, e.mem2(0, len(payload)))
		} else {
			require.Equal(t, uint8(prm.CQEFormatScatter64), r.format)
			require.Equal(t, payload, r.scatter[:len(payload)])
			require.Zero(t, e.mem2(0, 1)[0], "a scattered payload is not written to the buffer")
		}
	}
}
