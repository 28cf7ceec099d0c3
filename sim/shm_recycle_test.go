package sim

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestSharedReadBurstAfterRingRecycle: a burst of READs as deep as
// max_rd_atomic whose responses meet the requester's inbound ring just
// after its producer went back to the ring's front (ringRecycle) while
// the requester had not drained yet completes at once, without a
// transport retry. Until the consumer passes the pad, the front holds
// only as many bytes as the ring had used before the pad (a little over
// ringRecycle), less than sixteen 4 KiB responses: the responder used to
// drop the answer that did not fit, and the requester waited for its ACK
// timeout (ib_read_bw's default 16 outstanding 4 KiB READs went ten to a
// hundred times slower than 15). The timeout here is 4 s, the wait 2 s.
func TestSharedReadBurstAfterRingRecycle(t *testing.T) {
	e1, e2 := sharedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC, sendDepth: 64})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	const timeout = 20 // 4.096 µs << 20: 4.3 s
	for _, x := range []struct {
		e       *env
		q, peer *testQP
		peerEnv *env
	}{{e1, a, b, e2}, {e2, b, a, e1}} {
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: x.peer.qp.QPN(), PathMTU: ctx.MTU4096,
			Path: ctx.AddressAttr{DLID: lidOf(t, x.peerEnv.c)}, MaxDestRdAtomic: 16}))
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: timeout, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 16}))
	}
	const size, burst = 4096, 16
	read := func(i int) {
		a.write(a.build(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(i*size), e2.mr.RKey()), dataSeg(size, e1.mr.LKey(), e1.addr(i*size))))
	}
	for i := 0; i < burst; i++ {
		fill(e2.mem(i*size, size), int64(i+1))
	}

	// The responses' ring (e2 to e1) walked past ringRecycle, every
	// record read: the next response goes back to the front.
	in, from := e1.f.shm.in, e2.f.shm.slot
	pos := func() uint64 { return atomic.LoadUint64(in.tail(from)) % ringDataSize }
	for pos() < ringRecycle {
		read(0)
		a.ring()
		require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
	}
	record := uint64((ringRecHdr + size + wireAlign - 1) &^ (wireAlign - 1))
	require.Less(t, pos(), uint64(ringRecycle)+record, "the burst must not fit before the pad")

	// The burst leaves while e1's engine is held, so that e1 drains
	// nothing until e2 has answered every READ.
	e2.f.mu.Lock()
	rq := e2.f.qpByNum(b.qp.QPN())
	expect := rq.wire.resp.expect
	e2.f.mu.Unlock()
	e1.f.mu.Lock()
	for i := 0; i < burst; i++ {
		read(i)
	}
	a.ring()
	q := e1.f.qpByNum(a.qp.QPN())
	e1.f.scanQP(q)
	e1.f.runQP(q)
	sent := q.wire.segN
	executed := func() uint32 {
		e2.f.mu.Lock()
		defer e2.f.mu.Unlock()
		return (rq.wire.resp.expect - expect) & ctx.MaxPSN
	}
	end := time.Now().Add(5 * time.Second)
	for executed() < burst && time.Now().Before(end) {
		time.Sleep(time.Millisecond)
	}
	e1.f.mu.Unlock()
	require.Equal(t, burst, sent, "READs sent at once")
	require.EqualValues(t, burst, executed(), "READs executed by the responder")

	for i := 0; i < burst; i++ {
		require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 2*time.Second).op, "READ %d", i)
	}
	for i := 0; i < burst; i++ {
		require.Equal(t, e2.mem(i*size, size), e1.mem(i*size, size), "READ %d", i)
	}
	e1.f.mu.Lock()
	retries := e1.f.stats.Retries
	e1.f.mu.Unlock()
	require.Zero(t, retries, "transport retries")
}

// TestSharedHeldAnswerBlocksOnlyItsRequester: an answer a full ring keeps
// (its requester's process not draining) holds back the later answers to
// that process only. Another process's requests to the same responder are
// answered at once: the responder's ring to it has room, and the order
// that matters is per requester (one ring each). Until the held answers
// were kept per requester, a READ answer held for a stalled process made
// the responder hold every later answer to every process, whose requests
// then timed out and were retried until their QPs failed.
func TestSharedHeldAnswerBlocksOnlyItsRequester(t *testing.T) {
	skipOnEmulatedCPU(t)
	name := testFabricName(t)
	ex := newEnv(t, Options{Mode: Engine, Fabric: name}) // the stalled requester
	er := newEnv(t, Options{Mode: Engine, Fabric: name}) // the responder
	ey := newEnv(t, Options{Mode: Engine, Fabric: name}) // another requester

	const timeout = 20 // 4.096 µs << 20: 4.3 s
	connect := func(a, b *testQP, ea, eb *env) {
		for _, x := range []struct {
			q, peer *testQP
			peerEnv *env
		}{{a, b, eb}, {b, a, ea}} {
			require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
			require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: x.peer.qp.QPN(), PathMTU: ctx.MTU4096,
				Path: ctx.AddressAttr{DLID: lidOf(t, x.peerEnv.c)}, MaxDestRdAtomic: 16}))
			require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: timeout, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 16}))
		}
	}
	x, rx := ex.newQP(ex.pd, qpOpts{typ: ctx.QPTypeRC}), er.newQP(er.pd, qpOpts{typ: ctx.QPTypeRC})
	y, ry := ey.newQP(ey.pd, qpOpts{typ: ctx.QPTypeRC}), er.newQP(er.pd, qpOpts{typ: ctx.QPTypeRC})
	connect(x, rx, ex, er)
	connect(y, ry, ey, er)

	// X stops draining, and the responder's ring to X is filled.
	holdEngine(t, ex.f)
	er.f.mu.Lock()
	p := er.f.shm.peer(ex.f.shm.slot)
	require.NotNil(t, p)
	p.announce(er.f.shm.slot)
	for n := 1 << 20; n >= wireAlign; {
		rec, at, err := p.reserve(er.f.shm.slot, n)
		if err != nil {
			n /= 2
			continue
		}
		h := (*wireHdr)(unsafe.Pointer(&rec[ringMarkSize]))
		*h = wireHdr{Kind: wirePad, Len: uint32(len(rec))}
		p.commit(er.f.shm.slot, at, len(rec))
	}
	er.f.mu.Unlock()

	// X's READ reaches the responder, whose answer the full ring keeps.
	const size = 4096
	fill(er.mem(0, size), 7)
	x.write(x.build(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(er.addr(0), er.mr.RKey()), dataSeg(size, ex.mr.LKey(), ex.addr(0))))
	x.ring()
	ex.f.mu.Lock()
	q := ex.f.qpByNum(x.qp.QPN())
	ex.f.scanQP(q)
	ex.f.runQP(q)
	require.Equal(t, 1, q.wire.segN, "the READ left")
	ex.f.mu.Unlock()
	held := func() int {
		er.f.mu.Lock()
		defer er.f.mu.Unlock()
		return len(er.f.wireAcks)
	}
	end := time.Now().Add(5 * time.Second)
	for held() == 0 && time.Now().Before(end) {
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, 1, held(), "the READ's answer is held")

	// Y's WRITE to the same responder is answered at once.
	fill(ey.mem(0, 64), 9)
	y.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(er.addr(size), er.mr.RKey()), dataSeg(64, ey.mr.LKey(), ey.addr(0)))
	require.Equal(t, prm.CQEReq, waitCQE(t, y.scq, 2*time.Second).op, "Y's WRITE")
	require.Equal(t, ey.mem(0, 64), er.mem(size, 64))

	// X drains again: its READ's answer arrives.
	ex.f.drivenAt.Store(0)
	require.Equal(t, prm.CQEReq, waitCQE(t, x.scq, 10*time.Second).op, "X's READ")
	require.Equal(t, er.mem(0, size), ex.mem(0, size))
}
