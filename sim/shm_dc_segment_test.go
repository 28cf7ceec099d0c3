package sim

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// DC messages larger than a ring record between two processes: the child
// of role "dcbig:<size>" registers a region of size bytes between two
// sentinels of bigGuard bytes, posts one receive over the whole region in
// the SRQ of a DCT of key dcBigKey, and answers every line of the parent
// with a bigReport (its DCT's state and async events included).

const dcBigKey = 0xdc0ffee

// dcBigReport is what the DC child says of its region and DCT.
type dcBigReport struct {
	bigReport
	Events        []string // the types of the async events read so far
	State         string   // the DCT's state
	KeyViolations uint64   // the child's Stats.DCKeyViolations
}

func dcBigChild(t *testing.T, role string) {
	size, err := strconv.Atoi(strings.TrimPrefix(role, "dcbig:"))
	require.NoError(t, err)
	e := newEnv(t, Options{Mode: Engine, Fabric: os.Getenv(envChildFabric)})
	buf, err := ctx.AllocBuffer(size+2*bigGuard, ctx.BufferOptions{Guard: true})
	require.NoError(t, err)
	defer buf.Close()
	mem := buf.Bytes()
	setBytes(mem, 0x5a)
	region := mem[bigGuard : bigGuard+size]
	fillBig(region, bigSeed)
	mr, err := e.pd.RegisterMemory(region, allAccess)
	require.NoError(t, err)
	srq := e.newSRQ(e.pd, 4, 1)
	srq.post(dataSeg(uint32(size), mr.LKey(), uint64(mr.Addr())))
	dct := e.dct(e.pd, srq, dcBigKey)
	out := func(v any) {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		fmt.Printf("%s%s\n", childMark, b)
	}
	out(peerInfo{QPN: dct.qp.QPN(), LID: lidOf(t, e.c), Addr: uint64(mr.Addr()), RKey: mr.RKey()})
	in := bufio.NewScanner(os.Stdin)
	var r dcBigReport
	for in.Scan() {
		for _, c := range dct.rcq.drain() {
			r.Recv = append(r.Recv, c.byteCnt)
		}
		for {
			ev, ok, err := provider.ReadAsyncEvent(e.c)
			require.NoError(t, err)
			if !ok {
				break
			}
			r.Events = append(r.Events, ev.Type.String())
		}
		st, err := dct.qp.State()
		require.NoError(t, err)
		r.State = st.String()
		r.KeyViolations = e.f.Stats().DCKeyViolations
		r.SentinelOK = allBytes(mem[:bigGuard], 0x5a) && allBytes(mem[bigGuard+size:], 0x5a)
		r.Sum = sha256.Sum256(region)
		out(r)
	}
}

// dcBigPeer starts a "dcbig" child of a region of size bytes on a fabric
// shared with a new env of the parent.
func dcBigPeer(t *testing.T, size int) (*child, *env) {
	name := testFabricName(t)
	ch := startChild(t, "dcbig:"+strconv.Itoa(size), name)
	return ch, newEnv(t, Options{Mode: Engine, Fabric: name})
}

// report asks the dcbig child for its report.
func (c *child) dcReport(t *testing.T) dcBigReport {
	t.Helper()
	c.send(t, "report")
	var r dcBigReport
	require.NoError(t, json.Unmarshal([]byte(c.line(t)), &r))
	return r
}

// dciTo makes a DCI at RTS with the given ACK timeout code and retry
// counts (RNR retries unlimited).
func (e *env) dciTo(pd *ctx.ProtectionDomain, depth uint32, timeout, retry uint8) *testQP {
	e.t.Helper()
	q := e.newQP(pd, qpOpts{typ: ctx.QPTypeDCI, sendDepth: depth})
	require.NoError(e.t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit}))
	require.NoError(e.t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU4096}))
	require.NoError(e.t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: timeout, RetryCount: retry, RNRRetry: 7, MaxRdAtomic: 8}))
	return q
}

// bigLocalOf is a local region of size bytes before a sentinel.
func bigLocalOf(t *testing.T, e *env, size int) (*ctx.MemoryRegion, []byte, []byte) {
	buf, err := ctx.AllocBuffer(size+bigGuard, ctx.BufferOptions{Guard: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	mem := buf.Bytes()
	setBytes(mem, 0xa5)
	mr, err := e.pd.RegisterMemory(mem[:size], allAccess)
	require.NoError(t, err)
	return mr, mem[:size], mem[size:]
}

// TestSharedTwoProcessesDCBigMessages: a 20 MiB SEND, a 64 MiB WRITE and
// a 64 MiB READ from a DCI to a DCT in another process, each more than a
// ring record carries, arrive whole and once, and nothing outside the
// regions is written.
func TestSharedTwoProcessesDCBigMessages(t *testing.T) {
	ch, e := dcBigPeer(t, bigSize)
	mr, local, sentinel := bigLocal(t, e)
	d := e.dciTo(e.pd, 16, bigTimeout, 7)
	av := dcAV(dcBigKey, ch.info.QPN, ch.info.LID)
	post := func(op prm.Opcode, segs ...[]byte) {
		d.post(op, 0, prm.FlagCQUpdate, 0, append([][]byte{av}, segs...)...)
	}
	bigMessages(t, d.scq, post, ch.info, mr, local, sentinel, func() bigReport { return ch.dcReport(t).bigReport })
	r := ch.dcReport(t)
	require.Empty(t, r.Events)
	require.Equal(t, ctx.QPStateRTR.String(), r.State)
}

// TestSharedTwoProcessesDCMaxMessage: a WRITE of the port's max_msg_sz,
// 1 GiB, from a DCI to a DCT in another process lands whole; a byte more
// fails locally with LOCAL_LENGTH_ERR. Two regions of 1 GiB: not under
// -short.
func TestSharedTwoProcessesDCMaxMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 1 GiB between two processes")
	}
	const size = maxMessageSize
	ch, e := dcBigPeer(t, size)
	mr, local, sentinel := bigLocalOf(t, e, size)
	d := e.dciTo(e.pd, 16, bigTimeout, 7)
	av := dcAV(dcBigKey, ch.info.QPN, ch.info.LID)
	fillBig(local, 5)
	want := sha256.Sum256(local)
	d.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, av, raddrSeg(ch.info.Addr, ch.info.RKey), dataSeg(size, mr.LKey(), uint64(mr.Addr())))
	c := waitCQE(t, d.scq, 120*time.Second)
	require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	require.Equal(t, uint32(size), c.byteCnt)
	r := ch.dcReport(t)
	require.Equal(t, want, r.Sum, "the child's region holds the 1 GiB written")
	require.True(t, r.SentinelOK)
	require.True(t, allBytes(sentinel, 0xa5))
	// One byte over max_msg_sz (two SGEs): nothing leaves.
	d.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, av, raddrSeg(ch.info.Addr, ch.info.RKey),
		dataSeg(size, mr.LKey(), uint64(mr.Addr())), dataSeg(1, mr.LKey(), uint64(mr.Addr())))
	c = waitCQE(t, d.scq, 10*time.Second)
	require.Equal(t, prm.SyndromeLocalLength, c.synd, "%+v", c)
	require.Equal(t, want, ch.dcReport(t).Sum)
}

// TestSharedTwoProcessesDCWrongKey: a 64 MiB WRITE with a wrong DC key to
// a DCT in another process completes with REMOTE_ACCESS_ERR (as in one
// process), the WQEs after it flush, each once; the DCT writes nothing,
// stays ready, counts the message once as a key violation and raises no
// event (mlx5_ib passes on none of a DCT); a DCI with the right key still
// reaches it.
func TestSharedTwoProcessesDCWrongKey(t *testing.T) {
	ch, e := dcBigPeer(t, bigSize)
	mr, local, _ := bigLocal(t, e)
	before := ch.dcReport(t)
	d := e.dciTo(e.pd, 16, bigTimeout, 7)
	bad := dcAV(dcBigKey+1, ch.info.QPN, ch.info.LID)
	fillBig(local, 4)
	const n = 4
	for i := 0; i < n; i++ {
		d.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, bad, raddrSeg(ch.info.Addr, ch.info.RKey), dataSeg(bigSize, mr.LKey(), uint64(mr.Addr())))
	}
	c := waitCQE(t, d.scq, 30*time.Second)
	require.Equal(t, prm.CQEReqErr, c.op, "%+v", c)
	require.Equal(t, prm.SyndromeRemoteAccess, c.synd, "%+v", c)
	for i := 1; i < n; i++ {
		c = waitCQE(t, d.scq, 10*time.Second)
		require.Equal(t, prm.SyndromeWRFlush, c.synd, "%+v", c)
	}
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, d.scq.drain(), "nothing completes twice")
	st, err := e.f.QPState(d.qp.QPN())
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateError, st)
	r := ch.dcReport(t)
	require.Equal(t, before.Sum, r.Sum, "nothing written with a wrong key")
	require.True(t, r.SentinelOK)
	require.Equal(t, ctx.QPStateRTR.String(), r.State)
	require.Empty(t, r.Events, "no event of a DCT")
	require.Equal(t, before.KeyViolations+1, r.KeyViolations, "one key violation for the message")

	// The right key: written.
	d2 := e.dciTo(e.pd, 16, bigTimeout, 7)
	d2.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, dcAV(dcBigKey, ch.info.QPN, ch.info.LID), raddrSeg(ch.info.Addr, ch.info.RKey), dataSeg(bigSize, mr.LKey(), uint64(mr.Addr())))
	c = waitCQE(t, d2.scq, 30*time.Second)
	require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	require.Equal(t, sha256.Sum256(local), ch.dcReport(t).Sum)
}

// TestSharedTwoProcessesDCPeerKilled: the DCT's process killed while
// 64 MiB WRITEs and READs of a DCI are in flight: the first WQE not done
// completes with RETRY_EXC_ERR, the rest flush, each once, and nothing
// outside the local region is written.
func TestSharedTwoProcessesDCPeerKilled(t *testing.T) {
	ch, e := dcBigPeer(t, bigSize)
	mr, _, sentinel := bigLocal(t, e)
	d := e.dciTo(e.pd, 32, killedPeerTimeout, killedPeerRetry)
	av := dcAV(dcBigKey, ch.info.QPN, ch.info.LID)
	post := func(op prm.Opcode, segs ...[]byte) {
		d.post(op, 0, prm.FlagCQUpdate, 0, append([][]byte{av}, segs...)...)
	}
	bigPeerKilled(t, ch, e, d, post, mr, sentinel)
}

// dcRequests lists the requests of the process in slot from waiting in
// ring file rf: their destination QPNs and flags.
func dcRequests(rf *ringFile, from int) (dst []uint32, flags []uint16) {
	walkRing(rf, from, func(h *wireHdr, _ []byte) {
		if h.Kind == wireRequest {
			dst = append(dst, h.DstQPN)
			flags = append(flags, h.Flags)
		}
	})
	return dst, flags
}

// TestSharedDCSeveralInFlight: a DCI sends the WQEs to one DCT in another
// process without waiting for each answer; a WQE to another DCT waits
// until they are answered (one connection at a time), and each change of
// DCT starts a new stream; the answers complete every WQE in order, once.
func TestSharedDCSeveralInFlight(t *testing.T) {
	e1, e2 := sharedPair(t)
	srq := e2.newSRQ(e2.pd, 16, 1)
	ta := e2.dct(e2.pd, srq, 0xfeed)
	tb := e2.dct(e2.pd, srq, 0xbeef)
	d := e1.dciTo(e1.pd, 64, 20, 7)
	lid := lidOf(t, e2.c)
	avA, avB := dcAV(0xfeed, ta.qp.QPN(), lid), dcAV(0xbeef, tb.qp.QPN(), lid)
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
	const writes, reads = 8, 4
	var idx []uint16
	for i := 0; i < writes; i++ {
		a := avA
		if i >= writes/2 {
			a = avB
		}
		idx = append(idx, d.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, a, raddrSeg(e2.addr(i*4096), e2.mr.RKey()), dataSeg(4096, e1.mr.LKey(), e1.addr(i*4096))))
	}
	for i := 0; i < reads; i++ {
		idx = append(idx, d.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, avA, raddrSeg(e2.addr(512<<10+i*4096), e2.mr.RKey()), dataSeg(4096, e1.mr.LKey(), e1.addr(256<<10+i*4096))))
	}
	var dst []uint32
	var flags []uint16
	require.Eventually(t, func() bool {
		dst, _ = dcRequests(e2.f.shm.in, slot1)
		return len(dst) >= writes/2
	}, 5*time.Second, time.Millisecond, "the requests never reached the ring")
	time.Sleep(20 * time.Millisecond)
	dst, flags = dcRequests(e2.f.shm.in, slot1)
	require.Equal(t, []uint32{ta.qp.QPN(), ta.qp.QPN(), ta.qp.QPN(), ta.qp.QPN()}, dst, "the WRITEs to the first DCT in flight, none to the second")
	require.Equal(t, []uint16{wireFirst, 0, 0, 0}, flags, "one stream")
	require.Empty(t, d.scq.drain(), "nothing completes before its answer")
	e2.f.mu.Unlock()
	locked = false
	for i := 0; i < writes+reads; i++ {
		c := waitCQE(t, d.scq, 10*time.Second)
		require.Equal(t, prm.CQEReq, c.op, "%+v", c)
		require.Equal(t, idx[i], c.counter, "in order")
	}
	require.Empty(t, d.scq.drain())
	require.Equal(t, e1.mem(0, writes*4096), e2.mem(0, writes*4096))
	require.Equal(t, e2.mem(512<<10, reads*4096), e1.mem(256<<10, reads*4096))
	require.Zero(t, e1.f.Stats().Retries, "no request was lost")
}

// TestSharedDCRNRMidMessage: a 20 MiB WRITE with immediate from a DCI
// meets no receive in the DCT's SRQ at its last segment: after the RNR
// timer the DCI sends that segment again, not the message from its start
// (the first MiB, changed in the local buffer meanwhile, is not sent
// twice).
func TestSharedDCRNRMidMessage(t *testing.T) {
	e1, e2 := sharedPair(t)
	const size = 20 << 20
	bufs, mrs := registeredBuffers(t, size, e1.pd, e2.pd)
	srq := e2.newSRQ(e2.pd, 16, 1)
	dct := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeDCT, srq: srq, dcKey: 0xfeed})
	require.NoError(t, dct.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
	// RNR timer code 0: 655 ms.
	require.NoError(t, dct.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU4096, MinRNRTimer: 0}))
	d := e1.dciTo(e1.pd, 16, 20, 7)
	src, dst := bufs[0].Bytes(), bufs[1].Bytes()
	fill(src, 21)
	want := bytes.Clone(src)
	d.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, 5, dcAV(0xfeed, dct.qp.QPN(), lidOf(t, e2.c)),
		raddrSeg(uint64(mrs[1].Addr()), mrs[1].RKey()), dataSeg(size, mrs[0].LKey(), uint64(mrs[0].Addr())))
	require.Eventually(t, func() bool { return e1.f.Stats().RNRNaks > 0 }, 5*time.Second, time.Millisecond)
	fill(src[:1<<20], 22) // what a resend from the start would carry
	srq.post(dataSeg(64, e2.mr.LKey(), e2.addr(0)))
	c := waitCQE(t, d.scq, 10*time.Second)
	require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	r := waitCQE(t, dct.rcq, 5*time.Second)
	require.Equal(t, prm.CQERespWrImm, r.op)
	require.Equal(t, uint32(size), r.byteCnt)
	require.Equal(t, uint32(5), r.imm)
	require.Equal(t, d.qp.QPN(), r.srcQPN)
	require.True(t, bytes.Equal(want, dst), "the message as first sent, each segment once")
}

// registeredBuffers allocates a buffer of size bytes for each of pds and
// registers it there.
func registeredBuffers(t *testing.T, size int, pds ...*ctx.ProtectionDomain) ([]*ctx.Buffer, []*ctx.MemoryRegion) {
	bufs := make([]*ctx.Buffer, len(pds))
	mrs := make([]*ctx.MemoryRegion, len(pds))
	for i, pd := range pds {
		var err error
		bufs[i], err = ctx.AllocBuffer(size, ctx.BufferOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = bufs[i].Close() })
		mrs[i], err = pd.RegisterBuffer(bufs[i], allAccess)
		require.NoError(t, err)
	}
	return bufs, mrs
}

// bigMessages sends a 20 MiB SEND, a 64 MiB WRITE and a 64 MiB READ with
// post (an RC QP's or a DCI's, completing on scq) to the region of a
// "big" or "dcbig" child of bigSize bytes (one receive posted over it),
// from local (registered as mr, before sentinel), and checks with report
// that each arrives whole and once and nothing outside the regions is
// written.
func bigMessages(t *testing.T, scq *testCQ, post func(prm.Opcode, ...[]byte), info peerInfo, mr *ctx.MemoryRegion, local, sentinel []byte, report func() bigReport) {
	t.Helper()
	const wait = 60 * time.Second
	la := uint64(mr.Addr())

	// SEND 20 MiB into the child's one receive.
	fillBig(local, 1)
	post(prm.OpSend, dataSeg(20<<20, mr.LKey(), la))
	c := waitCQE(t, scq, wait)
	require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	require.Equal(t, uint32(20<<20), c.byteCnt)
	remote := make([]byte, bigSize)
	fillBig(remote, bigSeed)
	copy(remote, local[:20<<20])
	var r bigReport
	require.Eventually(t, func() bool { r = report(); return len(r.Recv) > 0 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []uint32{20 << 20}, r.Recv, "one receive completion of the whole message")
	require.Equal(t, sha256.Sum256(remote), r.Sum)
	require.True(t, r.SentinelOK)

	// WRITE 64 MiB.
	fillBig(local, 2)
	post(prm.OpRdmaWrite, raddrSeg(info.Addr, info.RKey), dataSeg(bigSize, mr.LKey(), la))
	c = waitCQE(t, scq, wait)
	require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	require.Equal(t, uint32(bigSize), c.byteCnt)
	r = report()
	require.Equal(t, sha256.Sum256(local), r.Sum, "the child's region holds the 64 MiB written")
	require.True(t, r.SentinelOK)
	want := bytes.Clone(local)

	// READ 64 MiB back (two SGEs, split at an odd offset).
	fillBig(local, 3)
	const split = 40<<20 + 12345
	post(prm.OpRdmaRead, raddrSeg(info.Addr, info.RKey), dataSeg(split, mr.LKey(), la), dataSeg(bigSize-split, mr.LKey(), la+split))
	c = waitCQE(t, scq, wait)
	require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	require.Equal(t, uint32(bigSize), c.byteCnt)
	require.True(t, bytes.Equal(want, local), "the 64 MiB read back")
	require.True(t, allBytes(sentinel, 0xa5), "bytes after the local region written")
	require.Empty(t, scq.drain(), "each WQE completes once")
	r = report()
	require.Equal(t, []uint32{20 << 20}, r.Recv)
	require.True(t, r.SentinelOK)
}

// bigPeerKilled posts eight 64 MiB WRITEs and READs with post (q's), to
// the region of a "big" or "dcbig" child, and kills the child once the
// first has completed: the first WQE not done completes with
// RETRY_EXC_ERR, the rest flush, each once, nothing outside the local
// region (mr, before sentinel) is written, and q ends in error.
func bigPeerKilled(t *testing.T, ch *child, e *env, q *testQP, post func(prm.Opcode, ...[]byte), mr *ctx.MemoryRegion, sentinel []byte) {
	t.Helper()
	const n = 8
	for i := 0; i < n; i++ {
		op := prm.OpRdmaWrite
		if i%2 == 1 {
			op = prm.OpRdmaRead
		}
		post(op, raddrSeg(ch.info.Addr, ch.info.RKey), dataSeg(bigSize, mr.LKey(), uint64(mr.Addr())))
	}
	cqes := []cqe{waitCQE(t, q.scq, 60*time.Second)}
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGKILL))
	for len(cqes) < n {
		cqes = append(cqes, waitCQE(t, q.scq, 30*time.Second))
	}
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, q.scq.drain(), "nothing completes twice")
	i := 0
	for i < n && cqes[i].op == prm.CQEReq {
		i++
	}
	require.Less(t, i, n, "the kill came after every WQE completed")
	require.Equal(t, prm.SyndromeTransportRetryExc, cqes[i].synd, "%+v", cqes[i])
	for _, c := range cqes[i+1:] {
		require.Equal(t, prm.CQEReqErr, c.op)
		require.Equal(t, prm.SyndromeWRFlush, c.synd, "%+v", c)
	}
	require.True(t, allBytes(sentinel, 0xa5), "bytes after the local region written")
	st, err := e.f.QPState(q.qp.QPN())
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateError, st)
}
