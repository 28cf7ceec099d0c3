package sim

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// Messages larger than a ring record between two processes: the child of
// role "big" registers a region of bigSize bytes between two sentinels of
// bigGuard bytes, posts one receive over the whole region, and answers
// every line of the parent with a bigReport.

const (
	bigSize  = 64 << 20
	bigGuard = 1 << 20
	bigSeed  = 77
	// bigTimeout is the ACK timeout code of the requesters of big
	// messages (4.3 s, eight tries): the tests are about sizes, and a
	// child touching a GiB on a loaded machine stalls for seconds (2.1 s
	// of code 16's eight tries ran out under a full test run beside
	// others on two CPUs).
	bigTimeout = 20
)

// fillBig fills b with a pseudo-random pattern of period 4093 bytes (a
// prime: a segment misplaced by a multiple of a MiB shows), by copies, so
// that it is quick under the race detector too.
func fillBig(b []byte, seed int64) {
	n := min(len(b), 4093)
	fill(b[:n], seed)
	for n < len(b) {
		n += copy(b[n:], b[:n])
	}
}

// setBytes sets every byte of b to v.
func setBytes(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for n := 1; n < len(b); {
		n += copy(b[n:], b[:n])
	}
}

// allBytes reports whether every byte of b is v.
func allBytes(b []byte, v byte) bool { return bytes.Count(b, []byte{v}) == len(b) }

// bigReport is what the child says of its region when asked.
type bigReport struct {
	Sum        [32]byte // SHA-256 of the region
	SentinelOK bool     // both sentinels untouched
	Recv       []uint32 // byte counts of the receives completed so far
}

func bigChild(t *testing.T) {
	e := newEnv(t, Options{Mode: Engine, Fabric: os.Getenv(envChildFabric)})
	buf, err := ctx.AllocBuffer(bigSize+2*bigGuard, ctx.BufferOptions{Guard: true})
	require.NoError(t, err)
	defer buf.Close()
	mem := buf.Bytes()
	setBytes(mem, 0x5a)
	region := mem[bigGuard : bigGuard+bigSize]
	fillBig(region, bigSeed)
	mr, err := e.pd.RegisterMemory(region, allAccess)
	require.NoError(t, err)
	q := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 4})
	q.postRecv(dataSeg(bigSize, mr.LKey(), uint64(mr.Addr())))
	out := func(v any) {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		fmt.Printf("%s%s\n", childMark, b)
	}
	out(peerInfo{QPN: q.qp.QPN(), LID: lidOf(t, e.c), Addr: uint64(mr.Addr()), RKey: mr.RKey()})
	in := bufio.NewScanner(os.Stdin)
	require.True(t, in.Scan())
	var p peerInfo
	require.NoError(t, json.Unmarshal(in.Bytes(), &p))
	connectTo(t, q, p, 14, 7)
	var recv []uint32
	for in.Scan() {
		for _, c := range q.rcq.drain() {
			recv = append(recv, c.byteCnt)
		}
		ok := allBytes(mem[:bigGuard], 0x5a) && allBytes(mem[bigGuard+bigSize:], 0x5a)
		out(bigReport{Sum: sha256.Sum256(region), SentinelOK: ok, Recv: recv})
	}
}

// bigLocal is a local region of bigSize bytes before a sentinel.
func bigLocal(t *testing.T, e *env) (*ctx.MemoryRegion, []byte, []byte) {
	return bigLocalOf(t, e, bigSize)
}

// TestSharedTwoProcessesBigMessages: a 20 MiB SEND, a 64 MiB WRITE and a
// 64 MiB READ between two processes, each more than a ring record
// carries, arrive whole and once, and nothing outside the regions is
// written.
func TestSharedTwoProcessesBigMessages(t *testing.T) {
	name := testFabricName(t)
	ch := startChild(t, "big", name)
	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	mr, local, sentinel := bigLocal(t, e)
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	connectTo(t, a, ch.info, bigTimeout, 7)
	ch.send(t, peerInfo{QPN: a.qp.QPN(), LID: lidOf(t, e.c)})
	post := func(op prm.Opcode, segs ...[]byte) { a.post(op, 0, prm.FlagCQUpdate, 0, segs...) }
	bigMessages(t, a.scq, post, ch.info, mr, local, sentinel, func() bigReport {
		t.Helper()
		ch.send(t, "report")
		var r bigReport
		require.NoError(t, json.Unmarshal([]byte(ch.line(t)), &r))
		return r
	})
}

// TestSharedTwoProcessesBigPeerKilled: the peer killed while 64 MiB WRITEs
// and READs are in flight: the first WQE not done completes with
// RETRY_EXC_ERR, the rest flush, each once, and nothing outside the local
// region is written.
func TestSharedTwoProcessesBigPeerKilled(t *testing.T) {
	name := testFabricName(t)
	ch := startChild(t, "big", name)
	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	mr, _, sentinel := bigLocal(t, e)
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	connectTo(t, a, ch.info, killedPeerTimeout, killedPeerRetry)
	ch.send(t, peerInfo{QPN: a.qp.QPN(), LID: lidOf(t, e.c)})
	post := func(op prm.Opcode, segs ...[]byte) { a.post(op, 0, prm.FlagCQUpdate, 0, segs...) }
	bigPeerKilled(t, ch, e, a, post, mr, sentinel)
}

// ringRecords counts the requests of the process in slot from waiting in
// ring file rf, and how many of them are READs.
func ringRecords(rf *ringFile, from int) (reqs, reads int) {
	walkRing(rf, from, func(h *wireHdr, _ []byte) {
		if h.Kind == wireRequest {
			reqs++
			if prm.Opcode(h.Op) == prm.OpRdmaRead {
				reads++
			}
		}
	})
	return reqs, reads
}

// TestSharedSeveralInFlight: an RC requester sends the WQEs of its send
// queue without waiting for each answer, READs no more than its
// max_rd_atomic at once; the answers complete them in order, once.
func TestSharedSeveralInFlight(t *testing.T) {
	e1, e2 := sharedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC, sendDepth: 64, cqDepth: 128})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	for _, x := range []struct {
		q, peer *testQP
		rd      uint8
	}{{a, b, 4}, {b, a, 16}} {
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: x.peer.qp.QPN(), PathMTU: ctx.MTU4096,
			Path: ctx.AddressAttr{DLID: lidOf(t, x.peer.qp.ProtectionDomain().Context())}, MinRNRTimer: 1, MaxDestRdAtomic: 16}))
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 20, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: x.rd}))
	}
	fill(e1.mem(0, 64<<10), 9)
	fill(e2.mem(512<<10, 64<<10), 10)
	_, slot1 := e1.f.SharedFabric()
	// The responder's engine held: what the requester sends waits in the
	// responder's ring.
	e2.f.mu.Lock()
	locked := true
	defer func() {
		if locked {
			e2.f.mu.Unlock()
		}
	}()
	const writes, reads = 16, 8
	for i := 0; i < writes; i++ {
		a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(i*4096), e2.mr.RKey()), dataSeg(4096, e1.mr.LKey(), e1.addr(i*4096)))
	}
	for i := 0; i < reads; i++ {
		a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(512<<10+i*4096), e2.mr.RKey()), dataSeg(4096, e1.mr.LKey(), e1.addr(256<<10+i*4096)))
	}
	var reqs, rds int
	require.Eventually(t, func() bool {
		reqs, rds = ringRecords(e2.f.shm.in, slot1)
		return reqs >= writes+4
	}, 5*time.Second, time.Millisecond, "the requests never reached the ring")
	time.Sleep(20 * time.Millisecond)
	reqs, rds = ringRecords(e2.f.shm.in, slot1)
	require.Equal(t, writes+4, reqs, "every WRITE and max_rd_atomic READs in flight")
	require.Equal(t, 4, rds)
	require.Empty(t, a.scq.drain(), "nothing completes before its answer")
	e2.f.mu.Unlock()
	locked = false
	for i := 0; i < writes+reads; i++ {
		c := waitCQE(t, a.scq, 10*time.Second)
		require.Equal(t, prm.CQEReq, c.op, "%+v", c)
		require.Equal(t, uint16(i), c.counter, "in order")
	}
	require.Empty(t, a.scq.drain())
	require.Equal(t, e1.mem(0, 64<<10), e2.mem(0, 64<<10))
	require.Equal(t, e2.mem(512<<10, 32<<10), e1.mem(256<<10, 32<<10))
}

// TestSharedFullRingTimesOut: a peer that lives but takes nothing from its
// ring: the segments that fit time out, and those sent again find the ring
// still full; the WQE completes with RETRY_EXC_ERR after the retries, as
// over a network, instead of waiting for ever.
func TestSharedFullRingTimesOut(t *testing.T) {
	e1, e2 := sharedPair(t)
	const size = 48 << 20 // more than a ring holds
	buf, err := ctx.AllocBuffer(size, ctx.BufferOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	mr, err := e1.pd.RegisterBuffer(buf, allAccess)
	require.NoError(t, err)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	for _, x := range []struct{ q, peer *testQP }{{a, b}, {b, a}} {
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: x.peer.qp.QPN(), PathMTU: ctx.MTU4096,
			Path: ctx.AddressAttr{DLID: lidOf(t, x.peer.qp.ProtectionDomain().Context())}, MinRNRTimer: 1, MaxDestRdAtomic: 16}))
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 10, RetryCount: 2, RNRRetry: 7, MaxRdAtomic: 16}))
	}
	e2.f.mu.Lock() // the peer's engine takes nothing
	locked := true
	defer func() {
		if locked {
			e2.f.mu.Unlock()
		}
	}()
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(0), e2.mr.RKey()), dataSeg(size, mr.LKey(), uint64(mr.Addr())))
	c := waitCQE(t, a.scq, 10*time.Second)
	require.Equal(t, prm.CQEReqErr, c.op, "%+v", c)
	require.Equal(t, prm.SyndromeTransportRetryExc, c.synd, "%+v", c)
	e2.f.mu.Unlock()
	locked = false
}

// TestSharedResponderRepeatsInWindow: an RC responder with several
// requests in flight executes each PSN once, in order: a repeat of one
// several PSNs back is answered (an atomic with its first original value)
// without being executed, one from the future is ignored, and the
// segments of a WRITE land at their offsets.
func TestSharedResponderRepeatsInWindow(t *testing.T) {
	e1, e2 := sharedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	e1.connectRC(a, b, 7, 1)
	binary.NativeEndian.PutUint64(e2.mem(0, 8), 10)
	_, s1 := e1.f.SharedFabric()
	_, s2 := e2.f.SharedFabric()
	dlid := lidOf(t, e2.c) // before the fabrics' locks are held
	gen := e1.f.shm.gen    // the requester's, as drainRing checks it
	atomicFA := func(psn uint32) wireHdr {
		return wireHdr{Kind: wireRequest, Op: uint8(prm.OpAtomicFA), DstQPN: b.qp.QPN(), SrcQPN: a.qp.QPN(), PSN: psn,
			RAddr: e2.addr(0), RKey: e2.mr.RKey(), Total: 8, Seg: 8, ASize: 8, DLID: dlid, SrcGen: gen}
	}
	write := func(psn, off uint32) wireHdr {
		return wireHdr{Kind: wireRequest, Op: uint8(prm.OpRdmaWrite), DstQPN: b.qp.QPN(), SrcQPN: a.qp.QPN(), PSN: psn,
			RAddr: e2.addr(64), RKey: e2.mr.RKey(), Total: 8, Off: off, Seg: 4, DLID: dlid, SrcGen: gen}
	}
	// The requester's engine held: the answers stay in its ring.
	e1.f.mu.Lock()
	defer e1.f.mu.Unlock()
	e2.f.mu.Lock()
	for _, r := range []struct {
		h   wireHdr
		pay string
	}{
		{atomicFA(0), string(atomicOperands(1))},
		{atomicFA(1), string(atomicOperands(1))},
		{write(2, 0), "abcd"},
		{atomicFA(0), string(atomicOperands(1))}, // a repeat
		{write(5, 4), "ZZZZ"},                    // from the future
		{write(3, 4), "efgh"},
		{write(2, 0), "XXXX"}, // a repeat
	} {
		e2.f.wireServe(s1, &r.h, []byte(r.pay))
	}
	e2.f.mu.Unlock()
	require.Equal(t, uint64(12), binary.NativeEndian.Uint64(e2.mem(0, 8)), "each atomic executed once")
	require.Equal(t, "abcdefgh", string(e2.mem(64, 8)))

	// The answers, in order.
	rf := e1.f.shm.in
	type answer struct {
		psn uint32
		old uint64
	}
	var got []answer
	walkRing(rf, s2, func(h *wireHdr, payload []byte) {
		if h.Kind == wireResponse {
			require.Equal(t, uint8(wireAck), h.Status)
			var old uint64
			if prm.Opcode(h.Op).IsAtomic() {
				old = binary.NativeEndian.Uint64(payload)
			}
			got = append(got, answer{h.PSN, old})
		}
	})
	require.Equal(t, []answer{{0, 10}, {1, 11}, {2, 0}, {0, 10}, {3, 0}, {2, 0}}, got)
}

// TestSharedRNRMidMessage: a 2.5 MiB WRITE with immediate meets no
// receive at its last segment: after the RNR timer the requester sends
// that segment again, not the message from its start (the first MiB,
// changed in the local buffer meanwhile, is not sent twice).
func TestSharedRNRMidMessage(t *testing.T) {
	e1, e2 := sharedPair(t)
	const size = 5 << 19
	bufs, mrs := registeredBuffers(t, size, e1.pd, e2.pd)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	// RNR timer code 0: 655 ms.
	e1.connectRC(a, b, 7, 0)
	src, dst := bufs[0].Bytes(), bufs[1].Bytes()
	fill(src, 21)
	want := bytes.Clone(src)
	a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, 5, raddrSeg(uint64(mrs[1].Addr()), mrs[1].RKey()), dataSeg(size, mrs[0].LKey(), uint64(mrs[0].Addr())))
	require.Eventually(t, func() bool { return e1.f.Stats().RNRNaks > 0 }, 5*time.Second, time.Millisecond)
	fill(src[:1<<20], 22) // what a resend from the start would carry
	b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(0)))
	c := waitCQE(t, a.scq, 10*time.Second)
	require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	r := waitCQE(t, b.rcq, 5*time.Second)
	require.Equal(t, prm.CQERespWrImm, r.op)
	require.Equal(t, uint32(size), r.byteCnt)
	require.True(t, bytes.Equal(want, dst), "the message as first sent, each segment once")
}

// TestSharedRepeatedAtomicAfterPSNWrap: the responder remembers the
// original values of its last 16 atomics by PSN, and a PSN comes round
// again every 2^24 requests. An atomic executed at a PSN that one of those
// 16 had a wrap before (fewer than 16 atomics in between) and then
// repeated gets the value it found itself, not the older atomic's.
func TestSharedRepeatedAtomicAfterPSNWrap(t *testing.T) {
	e1, e2 := sharedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	e1.connectRC(a, b, 7, 1)
	binary.NativeEndian.PutUint64(e2.mem(0, 8), 100)
	_, s1 := e1.f.SharedFabric()
	_, s2 := e2.f.SharedFabric()
	dlid := lidOf(t, e2.c)
	gen := e1.f.shm.gen
	const psn = 0x123456
	atomicFA := func(p uint32) wireHdr {
		return wireHdr{Kind: wireRequest, Op: uint8(prm.OpAtomicFA), DstQPN: b.qp.QPN(), SrcQPN: a.qp.QPN(), PSN: p & ctx.MaxPSN,
			RAddr: e2.addr(0), RKey: e2.mr.RKey(), Total: 8, Seg: 8, ASize: 8, DLID: dlid, SrcGen: gen}
	}
	// The requester's engine held: the answers stay in its ring.
	e1.f.mu.Lock()
	defer e1.f.mu.Unlock()
	e2.f.mu.Lock()
	rs := &e2.f.qpByNum(b.qp.QPN()).wire.resp
	// Sixteen atomics, the last at psn (it finds 115) ...
	rs.expect = psn - 15
	for p := uint32(psn - 15); p <= psn; p++ {
		h := atomicFA(p)
		e2.f.wireServe(s1, &h, atomicOperands(1))
	}
	// ... then 2^24 - 1 requests that are no atomics, and an atomic at
	// psn again (it finds 116), repeated.
	rs.expect = psn
	for i := 0; i < 2; i++ {
		h := atomicFA(psn)
		e2.f.wireServe(s1, &h, atomicOperands(1))
	}
	e2.f.mu.Unlock()
	require.Equal(t, uint64(117), binary.NativeEndian.Uint64(e2.mem(0, 8)), "the last atomic executed once")
	var olds []uint64
	walkRing(e1.f.shm.in, s2, func(h *wireHdr, payload []byte) {
		if h.Kind == wireResponse && h.PSN == psn {
			require.Equal(t, uint8(wireAck), h.Status)
			olds = append(olds, binary.NativeEndian.Uint64(payload))
		}
	})
	require.Equal(t, []uint64{115, 116, 116}, olds, "the first atomic at psn, the second, and the second's repeat")
}
