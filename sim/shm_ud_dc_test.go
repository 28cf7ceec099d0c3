package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// sharedUDPair returns two Fabrics of one shared fabric, a UD QP of each
// (qkeys 0x1111 and 0x2222), and recvs receives of 140 bytes posted on
// the second, 256 bytes apart from its region's start.
func sharedUDPair(t *testing.T, recvs int) (e1, e2 *env, a, b *testQP) {
	e1, e2 = sharedPair(t)
	a = e1.udQP(e1.pd, 0x1111, qpOpts{})
	b = e2.udQP(e2.pd, 0x2222, qpOpts{})
	for i := 0; i < recvs; i++ {
		b.postRecv(dataSeg(40+100, e2.mr.LKey(), e2.addr(i*256)))
	}
	return e1, e2, a, b
}

func TestSharedUD(t *testing.T) {
	e1, e2, a, b := sharedUDPair(t, 4)
	lid := lidOf(t, e2.c)
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, udAV(0x2222, b.qp.QPN(), lid), inlineSeg([]byte("datagram")))
	a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 0x55, udAV(0x9999, b.qp.QPN(), lid), inlineSeg([]byte("bad qkey")))
	a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 0x66, udAV(0x2222, b.qp.QPN(), lid+1), inlineSeg([]byte("bad lid")))
	a.post(prm.OpSendImm, 0, prm.FlagCQUpdate|prm.FlagSolicited, 0x77, udAV(0x2222, b.qp.QPN(), lid), inlineSeg([]byte("second")))
	for i := 0; i < 4; i++ {
		require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op, "UD sends complete whatever happens")
	}
	c := waitCQE(t, b.rcq, 5*time.Second)
	require.Equal(t, prm.CQERespSend, c.op)
	require.Equal(t, uint32(40+8), c.byteCnt)
	require.Equal(t, a.qp.QPN(), c.srcQPN)
	require.Equal(t, lidOf(t, e1.c), c.slid)
	require.False(t, c.grh)
	require.Equal(t, []byte("datagram"), e2.mem(40, 8))
	c = waitCQE(t, b.rcq, 5*time.Second)
	require.Equal(t, prm.CQERespSendImm, c.op)
	require.Equal(t, uint32(0x77), c.imm)
	require.True(t, c.solicited)
	require.Equal(t, []byte("second"), e2.mem(256+40, 6))
	time.Sleep(10 * time.Millisecond)
	require.Empty(t, b.rcq.drain(), "a wrong qkey or LID is dropped silently")
	require.Equal(t, uint64(2), e2.f.Stats().UDDropped)

	// With a GRH: the receive buffer holds the sender's GID and the hop
	// limit of the address handle.
	gids, err := e2.c.QueryGIDs(1)
	require.NoError(t, err)
	ah, err := e1.pd.CreateAddressHandle(ctx.AddressAttr{GlobalRoute: true, DGID: gids[0].GID, DLID: lid, HopLimit: 64, TrafficClass: 3})
	require.NoError(t, err)
	av := ah.AV()
	be.PutUint32(av[prm.AVKey:], 0x2222)
	be.PutUint32(av[prm.AVDQPDCT:], b.qp.QPN()|prm.ExtendedUDAV)
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, av[:], inlineSeg([]byte("routed")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
	c = waitCQE(t, b.rcq, 5*time.Second)
	require.True(t, c.grh)
	require.Equal(t, uint32(46), c.byteCnt)
	grh := e2.mem(512, 40)
	require.Equal(t, byte(64), grh[7])
	require.Equal(t, gids[0].GID[:], grh[24:40])
	mine, err := e1.c.QueryGIDs(1)
	require.NoError(t, err)
	require.Equal(t, mine[0].GID[:], grh[8:24])
	require.Equal(t, []byte("routed"), e2.mem(512+40, 6))

	// The sender's fault injector drops what it sends to another process.
	require.NoError(t, e1.f.InjectUDFaults(UDFaults{Drop: 1}))
	b.postRecv(dataSeg(140, e2.mr.LKey(), e2.addr(1024)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, udAV(0x2222, b.qp.QPN(), lid), inlineSeg([]byte("dropped")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
	time.Sleep(10 * time.Millisecond)
	require.Empty(t, b.rcq.drain())
	require.Equal(t, uint64(1), e1.f.Stats().UDDropped)
}

func TestSharedDCAndSRQ(t *testing.T) {
	e1, e2 := sharedPair(t)
	srq := e2.newSRQ(e2.pd, 16, 1)
	t1 := e2.dct(e2.pd, srq, 0xfeed)
	// An ACK timeout of about a second (env.dci's is 4 ms: three tries
	// ran out under a loaded run before the other Fabric's engine
	// answered).
	d := e1.dciTo(e1.pd, 32, 18, 2)
	for i := 0; i < 4; i++ {
		srq.post(dataSeg(64, e2.mr.LKey(), e2.addr(i*64)))
	}
	lid := lidOf(t, e2.c)
	d.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dcAV(0xfeed, t1.qp.QPN(), lid), inlineSeg([]byte("to t1")))
	d.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, dcAV(0xfeed, t1.qp.QPN(), lid), raddrSeg(e2.addr(4096), e2.mr.RKey()), inlineSeg([]byte("written")))
	host.PutUint64(e2.mem(8192, 8), 10)
	d.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, dcAV(0xfeed, t1.qp.QPN(), lid), raddrSeg(e2.addr(8192), e2.mr.RKey()), atomicSeg(3, 0), dataSeg(8, e1.mr.LKey(), e1.addr(0)))
	for i := 0; i < 3; i++ {
		c := waitCQE(t, d.scq, 5*time.Second)
		require.Equal(t, prm.CQEReq, c.op, "WQE %d: syndrome %v", c.counter, c.synd)
	}
	r := waitCQE(t, t1.rcq, 5*time.Second)
	require.Equal(t, d.qp.QPN(), r.srcQPN)
	require.Equal(t, srq.srq.SRQN(), r.srqn)
	require.Equal(t, []byte("to t1"), e2.mem(int(r.counter)*64, 5))
	require.Equal(t, []byte("written"), e2.mem(4096, 7))
	require.Equal(t, uint64(10), host.Uint64(e1.mem(0, 8)))
	require.Equal(t, uint64(13), host.Uint64(e2.mem(8192, 8)))

	// A wrong DC key: REMOTE_ACCESS_ERR, the DCT stays, counts it and
	// raises no event. The DCI's ACK timeout is about a second: a
	// request repeated after a timeout counts again, as a packet
	// arriving again does, and dci's 4 ms ran out under a loaded test
	// run (two violations counted).
	d2 := e1.dciTo(e1.pd, 32, 18, 2)
	d2.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dcAV(0xbad, t1.qp.QPN(), lid), inlineSeg([]byte("x")))
	c := waitCQE(t, d2.scq, 5*time.Second)
	require.Equal(t, prm.SyndromeRemoteAccess, c.synd)
	st, err := t1.qp.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTR, st)
	require.Empty(t, readEvents(t, e2.c), "no event of a DCT")
	require.Equal(t, uint64(1), e2.f.Stats().DCKeyViolations)

	// RC into an SRQ across processes.
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC, srq: srq})
	e1.connectRC(a, b, 7, 1)
	a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 5, inlineSeg([]byte("via srq")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
	r = waitCQE(t, b.rcq, 5*time.Second)
	require.Equal(t, srq.srq.SRQN(), r.srqn)
	require.Equal(t, uint32(5), r.imm)
	require.Equal(t, []byte("via srq"), e2.mem(int(r.counter)*64, 7))
}

// TestSharedUDReceivePostedWhileAsleep: a receive posted while the
// receiver's engine sleeps is there for a datagram that wakes it (the
// engine reads doorbell records before it takes messages).
func TestSharedUDReceivePostedWhileAsleep(t *testing.T) {
	e1, e2 := sharedPair(t)
	a := e1.udQP(e1.pd, 1, qpOpts{})
	b := e2.udQP(e2.pd, 1, qpOpts{})
	lid := lidOf(t, e2.c)
	for i := 0; i < 20; i++ {
		time.Sleep(3 * time.Millisecond) // both engines back to sleeping
		b.postRecv(dataSeg(140, e2.mr.LKey(), e2.addr(0)))
		a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, uint32(i), udAV(1, b.qp.QPN(), lid), inlineSeg([]byte("x")))
		require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
		c := waitCQE(t, b.rcq, 5*time.Second)
		require.Equal(t, uint32(i), c.imm)
	}
	require.Zero(t, e2.f.Stats().UDDropped)
}

// TestSharedDCTExecutesOnce: a DCT answers a DCI's repeated request (same
// stream epoch and PSN) without executing it again, executes the same PSN
// of a new stream (the DCI reset or sending to another DCT, or a new DCI
// with its number), and ignores a request of a stream whose first segment
// it did not see.
func TestSharedDCTExecutesOnce(t *testing.T) {
	e1, e2 := sharedPair(t)
	srq := e2.newSRQ(e2.pd, 16, 1)
	dct := e2.dct(e2.pd, srq, 0xfeed)
	d := e1.dci(e1.pd)
	host.PutUint64(e2.mem(0, 8), 10)
	_, s1 := e1.f.SharedFabric()
	h := wireHdr{Kind: wireRequest, Op: uint8(prm.OpAtomicFA), DstQPN: dct.qp.QPN(), SrcQPN: d.qp.QPN(), PSN: 7, Epoch: 1, Flags: wireFirst,
		RAddr: e2.addr(0), RKey: e2.mr.RKey(), Total: 8, Seg: 8, ASize: 8, DLID: lidOf(t, e2.c), DCKey: 0xfeed}
	serve := func() {
		e2.f.mu.Lock()
		defer e2.f.mu.Unlock()
		e2.f.wireServe(s1, &h, atomicOperands(1))
	}
	serve()
	serve() // a retry: answered, not executed
	require.Equal(t, uint64(11), host.Uint64(e2.mem(0, 8)))
	h.PSN, h.Flags = 8, 0
	serve()
	require.Equal(t, uint64(12), host.Uint64(e2.mem(0, 8)))
	h.Epoch, h.PSN, h.Flags = 2, 8, wireFirst // a new stream that happens to reuse the PSN
	serve()
	require.Equal(t, uint64(13), host.Uint64(e2.mem(0, 8)))
	h.Epoch, h.PSN, h.Flags = 3, 20, 0 // a stream begun elsewhere
	serve()
	require.Equal(t, uint64(13), host.Uint64(e2.mem(0, 8)))
}

// TestSharedUDFaults: the sender's fault injector drops, duplicates and
// reorders datagrams to another process; every datagram not dropped
// arrives, the duplicated twice, some out of order.
func TestSharedUDFaults(t *testing.T) {
	name := testFabricName(t)
	e1 := newEnv(t, Options{Mode: Engine, Fabric: name, Seed: 42})
	e2 := newEnv(t, Options{Mode: Engine, Fabric: name})
	a := e1.udQP(e1.pd, 1, qpOpts{sendDepth: 64})
	b := e2.udQP(e2.pd, 1, qpOpts{recvDepth: 512, cqDepth: 1024})
	const n = 208
	for i := 0; i < 2*n; i++ {
		b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(i*64)))
	}
	require.NoError(t, e1.f.InjectUDFaults(UDFaults{Drop: 0.1, Duplicate: 0.1, Reorder: 0.1}))
	lid := lidOf(t, e2.c)
	// Batches of 16 behind one doorbell: the engine is busy through a
	// batch, so a held datagram leaves after the next one, not when idle.
	for i := 0; i < n; i += 16 {
		for j := i; j < i+16; j++ {
			a.write(a.build(prm.OpSendImm, 0, prm.FlagCQUpdate, uint32(j), udAV(1, b.qp.QPN(), lid), inlineSeg([]byte{byte(j)})))
		}
		a.ring()
		for j := 0; j < 16; j++ {
			require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
		}
	}
	st := e1.f.Stats()
	require.Greater(t, st.UDDropped, uint64(0))
	require.Greater(t, st.UDDuplicated, uint64(0))
	require.Greater(t, st.UDReordered, uint64(0))
	want := n - int(st.UDDropped) + int(st.UDDuplicated)
	var got []cqe
	for len(got) < want {
		got = append(got, waitCQE(t, b.rcq, 5*time.Second))
	}
	time.Sleep(10 * time.Millisecond)
	require.Empty(t, b.rcq.drain())
	seen := map[uint32]int{}
	inversions := 0
	for i, c := range got {
		seen[c.imm]++
		if i > 0 && c.imm < got[i-1].imm {
			inversions++
		}
	}
	require.Greater(t, inversions, 0)
	require.Equal(t, n-int(st.UDDropped), len(seen))
}

// fillRing fills the ring from f's process to the process in slot with
// pads (which the consumer skips), until it takes not even an empty one.
func fillRing(f *Fabric, slot int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pad := func(*wireHdr, []byte) {} // Kind wirePad
	for n := wireMaxPayload; n > 0; n /= 2 {
		for f.shm.send(slot, n, pad) {
		}
	}
	for f.shm.send(slot, 0, pad) {
	}
}

// fullUDPair is sharedUDPair with both engines held off (the rounds run
// where the test steps them) and the ring from the first Fabric's process
// to the second's (slot s2) full.
func fullUDPair(t *testing.T, recvs int) (e1, e2 *env, a, b *testQP, s2 int) {
	e1, e2, a, b = sharedUDPair(t, recvs)
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	_, s2 = e2.f.SharedFabric()
	fillRing(e1.f, s2)
	return e1, e2, a, b, s2
}

// TestSharedUDWaitsForRoom: a datagram to a process whose ring is full is
// not lost: the SEND waits at the head of its queue, uncompleted, and
// leaves once the consumer has made room, as a link's credits hold an
// InfiniBand sender back. (perftest's UD ib_send_bw waits forever for a
// datagram lost that way.) Only a datagram to a process that is gone is
// dropped.
func TestSharedUDWaitsForRoom(t *testing.T) {
	e1, e2, a, b, s2 := fullUDPair(t, 1)

	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, udAV(0x2222, b.qp.QPN(), lidOf(t, e2.c)), inlineSeg([]byte("held back")))
	for i := 0; i < 3; i++ {
		stepRound(e1.f)
		time.Sleep(2 * wireShortRetry * time.Nanosecond)
	}
	_, ok := a.scq.poll()
	require.False(t, ok, "the SEND waits for room")
	require.Zero(t, e1.f.Stats().UDDropped)

	stepRound(e2.f) // takes the pads
	stepUntilSendCQE(t, e1.f, a, "the SEND leaves once there is room")
	stepRound(e2.f)
	c, ok := b.rcq.poll()
	require.True(t, ok, "the datagram arrives")
	require.Equal(t, prm.CQERespSend, c.op)
	require.Equal(t, []byte("held back"), e2.mem(40, 9))
	require.Zero(t, e1.f.Stats().UDDropped)
	require.Zero(t, e2.f.Stats().UDDropped)

	// A SEND waiting for room when the process leaves: dropped, and
	// completed.
	fillRing(e1.f, s2)
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, udAV(0x2222, b.qp.QPN(), lidOf(t, e2.c)), inlineSeg([]byte("lost")))
	stepRound(e1.f)
	_, ok = a.scq.poll()
	require.False(t, ok, "the SEND waits for room")
	require.NoError(t, e2.f.Close())
	stepUntilSendCQE(t, e1.f, a, "a datagram to a process that is gone completes")
	require.Equal(t, uint64(1), e1.f.Stats().UDDropped)
}

// TestSharedUDWaitIsStill: a UD SEND waiting for room is no progress of
// the round (the engine backs off and sleeps rather than spin on it) and
// counts as no WQE executed; the fault injector is drawn once, when the
// datagram leaves (a duplicate is counted, and sent, once); and a SEND
// that waited udWaitLimit is dropped and completed, as a switch drops a
// packet past its head-of-queue lifetime.
func TestSharedUDWaitIsStill(t *testing.T) {
	e1, e2, a, b, s2 := fullUDPair(t, 4)
	require.NoError(t, e1.f.InjectUDFaults(UDFaults{Duplicate: 1}))
	av := udAV(0x2222, b.qp.QPN(), lidOf(t, e2.c))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, av, inlineSeg([]byte("twice")))
	wqes := e1.f.Stats().WQEs
	for i := 0; i < 5; i++ {
		e1.f.mu.Lock()
		progressed := e1.f.stepLocked()
		e1.f.mu.Unlock()
		require.False(t, progressed, "a SEND waiting for room is no progress")
		time.Sleep(2 * wireShortRetry * time.Nanosecond)
	}
	st := e1.f.Stats()
	require.Equal(t, wqes, st.WQEs, "no WQE executed while it waits")
	require.Zero(t, st.UDDuplicated, "the faults are drawn when the datagram leaves")

	stepRound(e2.f) // room
	require.Eventually(t, func() bool {
		stepRound(e1.f)
		_, ok := a.scq.poll()
		return ok
	}, 5*time.Second, time.Millisecond)
	require.Equal(t, uint64(1), e1.f.Stats().UDDuplicated)
	stepRound(e2.f) // the first (a round ends at a completion)
	stepRound(e2.f)
	require.Len(t, b.rcq.drain(), 2, "the datagram and its one copy")

	// The wait's bound: a SEND that has waited udWaitLimit is dropped.
	require.NoError(t, e1.f.InjectUDFaults(UDFaults{}))
	fillRing(e1.f, s2)
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, av, inlineSeg([]byte("too late")))
	stepRound(e1.f)
	_, ok := a.scq.poll()
	require.False(t, ok, "the SEND waits for room")
	e1.f.mu.Lock()
	var q *qp
	for _, x := range e1.f.qpList {
		if x.qpn == a.qp.QPN() {
			q = x
		}
	}
	require.NotZero(t, q.udWaitSince, "the wait is noted")
	q.udWaitSince -= int64(udWaitLimit) // as if it had waited that long
	q.blockedUntil = 0
	e1.f.mu.Unlock()
	dropped := e1.f.Stats().UDDropped
	stepRound(e1.f)
	c, ok := a.scq.poll()
	require.True(t, ok, "dropped after udWaitLimit, and completed")
	require.Equal(t, prm.CQEReq, c.op)
	require.Equal(t, dropped+1, e1.f.Stats().UDDropped)
}

// streamStarter locks e's Fabric until the test ends and returns the DCI
// stream state of its DCT dct and a function that begins a stream there
// from DCI qpn of generation gen, as a request from another process would.
func streamStarter(t *testing.T, e *env, dct *testQP) (*wireQP, func(qpn uint32, gen uint64) *wireResp) {
	e.f.mu.Lock()
	t.Cleanup(e.f.mu.Unlock)
	t0 := e.f.qpByNum(dct.qp.QPN())
	return &t0.wire, func(qpn uint32, gen uint64) *wireResp {
		h := wireHdr{Kind: wireRequest, DstQPN: dct.qp.QPN(), SrcQPN: qpn, SrcGen: gen, PSN: 5, Epoch: 1, Flags: wireFirst}
		return e.f.dcStream(t0, &h)
	}
}

// requireLiveStreams requires the streams of DCIs first..first+n-1, of
// generation gen, to be as they began.
func requireLiveStreams(t *testing.T, ws *wireQP, first uint32, n int, gen uint64) {
	t.Helper()
	for i := range uint32(n) {
		st := ws.streams[first+i]
		require.NotNil(t, st, "live stream %#x dropped", first+i)
		require.Equal(t, gen, st.gen)
		require.Equal(t, uint32(5), st.expect)
	}
}

// TestSharedDCTDropsStreamsOfProcessesGone: a DCT that has seen the DCIs
// of many processes keeps, besides the streams of live processes, at most
// as many of processes that are gone, so that DCIs that come and go do not
// pile up; the live streams stay as they were.
func TestSharedDCTDropsStreamsOfProcessesGone(t *testing.T) {
	e1, e2 := sharedPair(t)
	srq := e2.newSRQ(e2.pd, 16, 1)
	dct := e2.dct(e2.pd, srq, 0xfeed)
	_, s1 := e1.f.SharedFabric()
	base := uint32(s1+1) * shmSlotQPNs
	live := e1.f.shm.gen
	ws, begin := streamStarter(t, e2, dct)
	const nLive = 3 * dcStreamsSweepMin / 2
	for i := range uint32(nLive) {
		require.NotNil(t, begin(base+i, live))
	}
	require.Len(t, ws.streams, nLive, "live streams are kept")
	// Streams of earlier processes in e1's slot, whose QPNs are not
	// reused: never more of them than live ones.
	most := 0
	for i := range uint32(4 * nLive) {
		require.NotNil(t, begin(base+nLive+i, live-1-uint64(i%3)))
		most = max(most, len(ws.streams))
	}
	require.LessOrEqual(t, most, 2*nLive, "streams held")
	requireLiveStreams(t, ws, base, nLive, live)
	// A stream of a slot no process holds is gone too.
	for _, s := range []int{s1 + 2, s1 + 3} {
		require.Zero(t, e1.f.shm.reg.gen(s), "slot %d is free", s)
	}
	free := uint32(s1+3) * shmSlotQPNs
	for i := range uint32(4 * nLive) {
		require.NotNil(t, begin(free+i, 7))
	}
	require.LessOrEqual(t, len(ws.streams), 2*nLive)
	require.GreaterOrEqual(t, len(ws.streams), nLive)
}

// stepUntilSendCQE runs rounds of f (its engine held off) until q has
// polled a send CQE, for up to 5 s; why says what completes it.
func stepUntilSendCQE(t *testing.T, f *Fabric, q *testQP, why string) {
	t.Helper()
	require.Eventually(t, func() bool {
		stepRound(f)
		_, ok := q.scq.poll()
		return ok
	}, 5*time.Second, time.Millisecond, why)
}

// fillRingLeaving fills the ring from f's process to slot with pads until
// records of n and m bytes (mark and header included) no longer fit
// together, while one of n bytes still does.
func fillRingLeaving(t *testing.T, f *Fabric, slot, n, m int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	p, me := f.shm.peer(slot), f.shm.slot
	pad := func(*wireHdr, []byte) {} // Kind wirePad
	for size := wireMaxPayload; size > 0; size /= 2 {
		for p.fits(me, ringRecHdr+size+n+m) {
			require.True(t, f.shm.send(slot, size, pad))
		}
	}
	for p.fits(me, n+m) {
		require.True(t, f.shm.send(slot, 0, pad))
	}
	require.True(t, p.fits(me, n), "no room left for a record of %d bytes", n)
}

// TestSharedUDBehindHeldAck: a datagram to a process this one holds an ACK
// for goes behind that ACK; where the ring has room for the datagram but
// not for both, the SEND waits for room, as at a full ring, instead of
// being lost.
func TestSharedUDBehindHeldAck(t *testing.T) {
	e1, e2, a, q := heldRCPair(t)
	ua := e1.udQP(e1.pd, 0x1111, qpOpts{})
	ub := e2.udQP(e2.pd, 0x2222, qpOpts{})
	ub.postRecv(dataSeg(140, e2.mr.LKey(), e2.addr(1024)))
	_, s2 := e2.f.SharedFabric()
	a.postRecv()
	q.postWQE(writeImmWQE(q, e1.addr(0), e1.mr.RKey()), 1)
	stepRound(e2.f) // q's write with immediate out
	stepRound(e1.f) // executed (a's receive CQE), its ACK held
	_, ok := a.rcq.poll()
	require.True(t, ok)
	e1.f.mu.Lock()
	require.Len(t, e1.f.wireAcks, 1, "the ACK held")
	e1.f.mu.Unlock()

	payload := []byte("behind the ACK")
	fillRingLeaving(t, e1.f, s2, ringRecHdr+len(payload), ringRecHdr)
	ua.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, udAV(0x2222, ub.qp.QPN(), lidOf(t, e2.c)), inlineSeg(payload))
	stepRound(e1.f)
	_, ok = ua.scq.poll()
	require.False(t, ok, "the SEND waits for room behind the ACK")
	require.Zero(t, e1.f.Stats().UDDropped)

	stepRound(e2.f) // the pads, then the ACK (q's send completes)
	c, ok := q.scq.poll()
	require.True(t, ok, "the ACK arrived")
	require.Equal(t, prm.CQEReq, c.op)
	stepUntilSendCQE(t, e1.f, ua, "the SEND leaves once there is room")
	stepRound(e2.f)
	c, ok = ub.rcq.poll()
	require.True(t, ok, "the datagram arrives")
	require.Equal(t, payload, e2.mem(1024+40, len(payload)))
	require.Zero(t, e1.f.Stats().UDDropped)
}

// TestSharedDCNopThenOtherDestination: a DCI's NOP whose address vector
// names a DCT of another process completes at once; the WQE behind it
// goes where its own address vector says: to a third process, or to a DCT
// of this one. Before, it went into the NOP's process's ring, to a DCT
// number that process lacks, and ended in RETRY_EXC_ERR.
func TestSharedDCNopThenOtherDestination(t *testing.T) {
	skipOnEmulatedCPU(t)
	name := testFabricName(t)
	e1 := newEnv(t, Options{Mode: Engine, Fabric: name})
	e2 := newEnv(t, Options{Mode: Engine, Fabric: name})
	e3 := newEnv(t, Options{Mode: Engine, Fabric: name})
	s2 := e2.newSRQ(e2.pd, 16, 1)
	d2 := e2.dct(e2.pd, s2, 0xa)
	s3 := e3.newSRQ(e3.pd, 16, 1)
	d3 := e3.dct(e3.pd, s3, 0xb)
	s3.post(dataSeg(64, e3.mr.LKey(), e3.addr(0)))
	sl := e1.newSRQ(e1.pd2, 16, 1)
	dl := e1.dct(e1.pd2, sl, 0xc)
	sl.post(dataSeg(64, e1.mr2.LKey(), e1.addr2(0)))
	// An ACK timeout of about 268 ms: 1 ms ran out under a loaded run
	// before the third process's engine answered; the WQE sent to the
	// wrong process still ends in RETRY_EXC_ERR within waitCQE's 5 s.
	d := e1.dciTo(e1.pd, 64, 16, 2)
	av2 := dcAV(0xa, d2.qp.QPN(), lidOf(t, e2.c))
	d.write(d.build(prm.OpNop, 0, prm.FlagCQUpdate, 0, av2))
	d.write(d.build(prm.OpSend, 0, prm.FlagCQUpdate, 0, dcAV(0xb, d3.qp.QPN(), lidOf(t, e3.c)), inlineSeg([]byte("to e3"))))
	d.write(d.build(prm.OpNop, 0, prm.FlagCQUpdate, 0, av2))
	d.write(d.build(prm.OpSend, 0, prm.FlagCQUpdate, 0, dcAV(0xc, dl.qp.QPN(), lidOf(t, e1.c2)), inlineSeg([]byte("local"))))
	d.ring()
	for i := 0; i < 4; i++ {
		c := waitCQE(t, d.scq, 5*time.Second)
		require.Equal(t, prm.CQEReq, c.op, "%d: %+v", i, c)
	}
	require.Equal(t, []byte("to e3"), e3.mem(0, 5))
	require.Equal(t, []byte("local"), e1.mem2(0, 5))
}
