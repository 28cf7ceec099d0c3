package sim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

var testFabricSeq atomic.Int64

// sweepOnce runs sweepDeadTestFabrics once per test process.
var sweepOnce sync.Once

// testFabricName returns a fabric name no other test (or test process)
// uses, and removes the fabric's files at the end of the test. The first
// call sweeps the fabrics of test processes that are gone.
func testFabricName(t testing.TB) string {
	sweepOnce.Do(sweepDeadTestFabrics)
	name := fmt.Sprintf("test-%d-%d", os.Getpid(), testFabricSeq.Add(1))
	t.Cleanup(func() { removeFabricFiles(name) })
	return name
}

// sweepDeadTestFabrics removes what test processes that were killed (a
// timeout, a signal: their cleanups never ran) left in /dev/shm: the
// fabrics testFabricName named for a process that no longer exists,
// through SweepFabric, which keeps any a live process still holds. On a
// long-lived machine their ring files (sparse, up to 2 GiB each) would
// otherwise pile up against the tmpfs.
func sweepDeadTestFabrics() {
	files, _ := filepath.Glob(filepath.Join(shmDir, "mlx5kit-test-*"))
	swept := map[string]bool{}
	for _, f := range files {
		// A registry or a ring file (one with no registry left too).
		var pid, seq int
		if n, _ := fmt.Sscanf(strings.TrimPrefix(filepath.Base(f), "mlx5kit-"), "test-%d-%d", &pid, &seq); n != 2 || pid == os.Getpid() || pid <= 0 {
			continue
		}
		name := fmt.Sprintf("test-%d-%d", pid, seq)
		if swept[name] || unix.Kill(pid, 0) != unix.ESRCH {
			continue // done, or alive (or not ours to signal)
		}
		swept[name] = true
		_ = SweepFabric(name)
	}
}

func removeFabricFiles(name string) {
	files, _ := filepath.Glob(filepath.Join(shmDir, "mlx5kit-"+name+"-*"))
	for _, f := range files {
		_ = os.Remove(f)
	}
}

// skipOnEmulatedCPU skips a test of the shared fabric's timing under
// qemu-user (MLX5KIT_EMULATED, set by make test-arm64): there the first
// requests of a DCI or an RC QP to a peer engine in the same process end
// in TRANSPORT_RETRY_EXC_ERR now and then, and whether that is the
// emulator's pace or an arm64 ordering fault is not known yet
// (docs/hardware.md, "A fabric shared by processes").
func skipOnEmulatedCPU(t *testing.T) {
	t.Helper()
	if os.Getenv("MLX5KIT_EMULATED") != "" {
		t.Skip("the shared fabric's timing is not checked under an emulated CPU (qemu-user); see docs/hardware.md")
	}
}

// sharedPair builds two Fabrics in this process that join one shared
// fabric, as two processes would: a on the first, b on the second.
func sharedPair(t *testing.T) (e1, e2 *env) {
	skipOnEmulatedCPU(t)
	name := testFabricName(t)
	e1 = newEnv(t, Options{Mode: Engine, Fabric: name})
	e2 = newEnv(t, Options{Mode: Engine, Fabric: name})
	return e1, e2
}

func TestSharedFabricNumbering(t *testing.T) {
	e1, e2 := sharedPair(t)
	n1, s1 := e1.f.SharedFabric()
	n2, s2 := e2.f.SharedFabric()
	require.Equal(t, n1, n2)
	require.NotEqual(t, s1, s2)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	require.Equal(t, s1, qpnSlot(a.qp.QPN()))
	require.Equal(t, s2, qpnSlot(b.qp.QPN()))
	lids := map[uint16]bool{}
	for _, c := range []*ctx.Context{e1.c, e1.c2, e2.c, e2.c2} {
		lid := lidOf(t, c)
		require.False(t, lids[lid], "LID %d twice", lid)
		lids[lid] = true
	}
	g1, err := e1.c.QueryGIDs(1)
	require.NoError(t, err)
	g2, err := e2.c.QueryGIDs(1)
	require.NoError(t, err)
	require.NotEqual(t, g1[0].GID, g2[0].GID)
}

func TestSharedRCOperations(t *testing.T) {
	e1, e2 := sharedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	e1.connectRC(a, b, 7, 1)
	const wait = 5 * time.Second

	payload := make([]byte, 5000)
	fill(payload, 3)
	copy(e1.mem(0, len(payload)), payload)
	b.postRecv(dataSeg(8192, e2.mr.LKey(), e2.addr(0)))
	b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(10000)))
	b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(10100)))

	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dataSeg(uint32(len(payload)), e1.mr.LKey(), e1.addr(0)))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, wait).op)
	r := waitCQE(t, b.rcq, wait)
	require.Equal(t, prm.CQERespSend, r.op)
	require.Equal(t, uint32(len(payload)), r.byteCnt)
	require.Equal(t, a.qp.QPN(), r.srcQPN)
	require.Equal(t, lidOf(t, e1.c), r.slid)
	require.Equal(t, payload, e2.mem(0, len(payload)))

	a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 0x11223344, inlineSeg([]byte("imm")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, wait).op)
	r = waitCQE(t, b.rcq, wait)
	require.Equal(t, prm.CQERespSendImm, r.op)
	require.Equal(t, uint32(0x11223344), r.imm)
	require.Equal(t, []byte("imm"), e2.mem(10000, 3))

	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(20000), e2.mr.RKey()), dataSeg(1000, e1.mr.LKey(), e1.addr(0)))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, wait).op)
	require.Equal(t, payload[:1000], e2.mem(20000, 1000))
	require.Zero(t, e2.mem(21000, 1)[0])

	a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, 77, raddrSeg(e2.addr(30000), e2.mr.RKey()), inlineSeg([]byte("hello")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, wait).op)
	r = waitCQE(t, b.rcq, wait)
	require.Equal(t, prm.CQERespWrImm, r.op)
	require.Equal(t, uint32(77), r.imm)
	require.Equal(t, []byte("hello"), e2.mem(30000, 5))

	fill(e2.mem(40000, 3000), 9)
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(40000), e2.mr.RKey()), dataSeg(3000, e1.mr.LKey(), e1.addr(50000)))
	c := waitCQE(t, a.scq, wait)
	require.Equal(t, prm.CQEReq, c.op)
	require.Equal(t, prm.OpRdmaRead, c.sendOp)
	require.Equal(t, e2.mem(40000, 3000), e1.mem(50000, 3000))

	binary.NativeEndian.PutUint64(e2.mem(60000, 8), 100)
	a.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(60000), e2.mr.RKey()), atomicSeg(5, 0), dataSeg(8, e1.mr.LKey(), e1.addr(60000)))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, wait).op)
	require.Equal(t, uint64(100), binary.NativeEndian.Uint64(e1.mem(60000, 8)))
	require.Equal(t, uint64(105), binary.NativeEndian.Uint64(e2.mem(60000, 8)))
	a.post(prm.OpAtomicCS, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(60000), e2.mr.RKey()), atomicSeg(7, 105), dataSeg(8, e1.mr.LKey(), e1.addr(60008)))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, wait).op)
	require.Equal(t, uint64(105), binary.NativeEndian.Uint64(e1.mem(60008, 8)))
	require.Equal(t, uint64(7), binary.NativeEndian.Uint64(e2.mem(60000, 8)))

	// In order, each exactly once: a burst of writes with immediate.
	for i := 0; i < 10; i++ {
		b.postRecv()
	}
	for i := 0; i < 10; i++ {
		a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, uint32(i), raddrSeg(e2.addr(70000+i), e2.mr.RKey()), inlineSeg([]byte{byte(i + 1)}))
	}
	for i := 0; i < 10; i++ {
		require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, wait).op)
		r := waitCQE(t, b.rcq, wait)
		require.Equal(t, uint32(i), r.imm)
	}
	time.Sleep(10 * time.Millisecond)
	require.Empty(t, a.scq.drain())
	require.Empty(t, b.rcq.drain())
	for i := 0; i < 10; i++ {
		require.Equal(t, byte(i+1), e2.mem(70000+i, 1)[0])
	}
}

func TestSharedRemoteAccessError(t *testing.T) {
	e1, e2 := sharedPair(t)
	e1.allowViolations, e2.allowViolations = true, true
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	e1.connectRC(a, b, 7, 1)
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(1<<20-4), e2.mr.RKey()), inlineSeg([]byte("past the end")))
	c := waitCQE(t, a.scq, 5*time.Second)
	require.Equal(t, prm.CQEReqErr, c.op)
	require.Equal(t, prm.SyndromeRemoteAccess, c.synd)
	require.Zero(t, e2.buf.Bytes()[1<<20-4], "nothing written")
	st, err := e2.f.QPState(b.qp.QPN())
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateError, st)
}

// A misaligned atomic to another process: REM_INV_REQ_ERR at the
// requester, the RC responder in error with QP_REQ_ERR, as within one.
func TestSharedMisalignedAtomic(t *testing.T) {
	e1, e2 := sharedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	e1.connectRC(a, b, 7, 1)
	binary.NativeEndian.PutUint64(e2.mem(0, 8), 0x1111)
	a.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(4), e2.mr.RKey()), atomicSeg(1, 0), dataSeg(8, e1.mr.LKey(), e1.addr(0)))
	c := waitCQE(t, a.scq, 5*time.Second)
	require.Equal(t, prm.CQEReqErr, c.op)
	require.Equal(t, prm.SyndromeRemoteInvalReq, c.synd)
	require.Equal(t, uint64(0x1111), binary.NativeEndian.Uint64(e2.mem(0, 8)), "nothing written")
	st, err := e2.f.QPState(b.qp.QPN())
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateError, st)
	requireEvent(t, e2.c, ctx.EventQPRequestError, b.qp.QPN())
}

func TestSharedRNR(t *testing.T) {
	e1, e2 := sharedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	e1.connectRC(a, b, 7, 1)
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("late")))
	require.Eventually(t, func() bool { return e1.f.Stats().RNRNaks != 0 }, 5*time.Second, time.Millisecond,
		"the responder never answered with an RNR NAK")
	require.Empty(t, a.scq.drain(), "waits for a receive")
	b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(0)))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
	require.Equal(t, prm.CQERespSend, waitCQE(t, b.rcq, 5*time.Second).op)
	require.Equal(t, []byte("late"), e2.mem(0, 4))

	// rnr_retry 0: the first RNR NAK fails the WQE.
	c := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	d := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	e1.connectRC(c, d, 0, 1)
	c.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("x")))
	x := waitCQE(t, c.scq, 5*time.Second)
	require.Equal(t, prm.CQEReqErr, x.op)
	require.Equal(t, prm.SyndromeRNRRetryExc, x.synd)
}

// connectFast is connectRC with retry count 3 and an ACK timeout of
// about 268 ms (timeout 16), so that a retry test ends in about a
// second, while a live peer slowed down (by the race detector, a loaded
// machine) still answers in time: timeout 12 gave a live peer's engine
// (over a TCP hub, a third Fabric) 67 ms in all four tries, which a
// loaded machine can stall it past.
func connectFast(t *testing.T, a, b *testQP) {
	for _, x := range []struct{ q, peer *testQP }{{a, b}, {b, a}} {
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: x.peer.qp.QPN(), PathMTU: ctx.MTU4096,
			Path: ctx.AddressAttr{DLID: lidOf(t, x.peer.qp.ProtectionDomain().Context())}, MinRNRTimer: 1, MaxDestRdAtomic: 16}))
		require.NoError(t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 16, RetryCount: 3, RNRRetry: 7, MaxRdAtomic: 16}))
	}
}

func TestSharedPeerGone(t *testing.T) {
	// The peer leaves the fabric (its engine stops, its slot is free).
	e1, e2 := sharedPair(t)
	b := peerGone(t, e1, e2)
	require.False(t, e1.f.Reaches(b.qp.QPN()))
}

func TestSharedFabricsApart(t *testing.T) {
	// Two fabric names: a QP of one never reaches the other, although
	// both hand out the same QPNs and LIDs.
	e1 := newEnv(t, Options{Mode: Engine, Fabric: testFabricName(t)})
	e2 := newEnv(t, Options{Mode: Engine, Fabric: testFabricName(t)})
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	other := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	require.Equal(t, a.qp.QPN(), other.qp.QPN(), "each fabric's first slot")
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC}) // a QPN that is nobody's in a's fabric
	connectFast(t, a, b)
	b.postRecv()
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("lost")))
	x := waitCQE(t, a.scq, 5*time.Second)
	require.Equal(t, prm.SyndromeTransportRetryExc, x.synd)
	require.Empty(t, b.rcq.drain())
}

func TestSharedFabricVersionMismatch(t *testing.T) {
	name := testFabricName(t)
	e1 := newEnv(t, Options{Mode: Engine, Fabric: name})
	_ = e1
	r, err := openRegistry(name, ctx.LinkLayerInfiniBand)
	require.NoError(t, err)
	*r.u32(regVersion) = shmVersion + 1
	r.unlock()
	r.close()
	f := New(Options{Mode: Engine, Fabric: name})
	defer f.Close()
	_, err = f.Open("sim0")
	require.Error(t, err)
	require.True(t, errors.Is(err, ErrFabricVersion), "%v", err)
	require.Contains(t, err.Error(), "protocol version")
	require.Contains(t, err.Error(), name)
	require.Contains(t, err.Error(), fmt.Sprintf("process %d still uses it", os.Getpid()))

	// Once no live process uses it, a registry of another version is
	// left behind: the next process starts the fabric afresh.
	require.NoError(t, e1.c.Close())
	require.NoError(t, e1.c2.Close())
	require.NoError(t, e1.f.Close())
	fresh := New(Options{Mode: Engine, Fabric: name})
	defer fresh.Close()
	c, err := fresh.Open("sim0")
	require.NoError(t, err)
	defer c.Close()
	r, err = openRegistry(name, ctx.LinkLayerInfiniBand)
	require.NoError(t, err)
	require.Equal(t, uint32(shmVersion), *r.u32(regVersion))
	r.unlock()
	r.close()

	// A link layer other than the fabric's is refused as well.
	name2 := testFabricName(t)
	e3 := newEnv(t, Options{Mode: Engine, Fabric: name2})
	_ = e3
	g := New(Options{Mode: Engine, Fabric: name2, LinkLayer: ctx.LinkLayerEthernet})
	defer g.Close()
	_, err = g.Open("sim0")
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "has link layer InfiniBand, this process asks for Ethernet")
	require.ErrorContains(t, err, EnvLinkLayer, "the error says how to match them")

	// Manual mode cannot share.
	h := New(Options{Fabric: name2})
	_, err = h.Open("sim0")
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	// Nor can a name that is not a plain file name.
	k := New(Options{Mode: Engine, Fabric: "../x"})
	_, err = k.Open("sim0")
	require.Error(t, err)
}

func TestSharedFabricReclaimsDeadSlots(t *testing.T) {
	name := testFabricName(t)
	// A slot held by a process that is gone: this process's pid with a
	// start time it never had (a reused pid), and a ring file left behind.
	r, err := openRegistry(name, ctx.LinkLayerInfiniBand)
	require.NoError(t, err)
	slot, gen, err := r.claim(name, 0)
	require.NoError(t, err)
	require.Equal(t, 0, slot)
	*r.u64(slotOff(slot) + slotStart) += 12345
	stale := ringPath(name, slot)
	require.NoError(t, os.WriteFile(stale, []byte("left by a crash"), 0o600))
	r.publish(slot, gen)
	r.unlock()
	r.close()

	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	_, got := e.f.SharedFabric()
	require.Equal(t, 0, got, "the dead process's slot is taken again")
	fi, err := os.Stat(stale)
	require.NoError(t, err)
	require.Equal(t, int64(ringFileSize), fi.Size(), "a fresh ring file replaced the stale one")
}

func TestSharedJoinFailureLeavesSlotFree(t *testing.T) {
	// The ring file of the slot cannot be made (a directory with a file
	// in it holds its name): the join fails naming the file, leaves the
	// registry unlocked and the slot free for the next process. (What it
	// no longer does, unlock a descriptor it has closed, no test sees.)
	name := testFabricName(t)
	blocker := ringPath(name, 0)
	require.NoError(t, os.Mkdir(blocker, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(blocker, "x"), nil, 0o600))
	t.Cleanup(func() { _ = os.RemoveAll(blocker) })
	_, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.Error(t, err)
	require.Contains(t, err.Error(), blocker)
	opened := make(chan *registry, 1)
	go func() {
		r, err := openRegistry(name, ctx.LinkLayerInfiniBand)
		assert.NoError(t, err)
		opened <- r
	}()
	var r *registry
	select {
	case r = <-opened:
	case <-time.After(5 * time.Second):
		t.Fatal("the failed join left the registry locked")
	}
	require.NotNil(t, r)
	require.Zero(t, r.gen(0), "the slot was never published")
	r.unlock()
	r.close()
	require.NoError(t, os.RemoveAll(blocker))
	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	_, got := e.f.SharedFabric()
	require.Equal(t, 0, got, "the slot the failed join claimed is taken")
}

func TestSharedResponderExecutesOnce(t *testing.T) {
	e1, e2 := sharedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	e1.connectRC(a, b, 7, 1)
	binary.NativeEndian.PutUint64(e2.mem(0, 8), 10)
	_, s1 := e1.f.SharedFabric()
	h := wireHdr{Kind: wireRequest, Op: uint8(prm.OpAtomicFA), DstQPN: b.qp.QPN(), SrcQPN: a.qp.QPN(), PSN: 0,
		RAddr: e2.addr(0), RKey: e2.mr.RKey(), Total: 8, ASize: 8, DLID: lidOf(t, e2.c)}
	e2.f.mu.Lock()
	e2.f.wireServe(s1, &h, atomicOperands(1))
	e2.f.wireServe(s1, &h, atomicOperands(1)) // a repeat: answered, not executed
	e2.f.mu.Unlock()
	require.Equal(t, uint64(11), binary.NativeEndian.Uint64(e2.mem(0, 8)))
	h.PSN = 1
	e2.f.mu.Lock()
	e2.f.wireServe(s1, &h, atomicOperands(1))
	e2.f.mu.Unlock()
	require.Equal(t, uint64(12), binary.NativeEndian.Uint64(e2.mem(0, 8)))
}

func TestSharedIdleCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("measures for a second")
	}
	e1, e2 := sharedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	e1.connectRC(a, b, 7, 1)
	b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(0)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("wake")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
	time.Sleep(50 * time.Millisecond) // past the engines' spinning
	cpu := func() time.Duration {
		var ru unix.Rusage
		require.NoError(t, unix.Getrusage(unix.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c0, t0 := cpu(), time.Now()
	time.Sleep(time.Second)
	used, wall := cpu()-c0, time.Since(t0)
	share := float64(used) / float64(wall)
	t.Logf("two idle engines: %v of CPU in %v (%.2f%% of a core)", used, wall, 100*share)
	// Both engines of this process are counted: a few percent each.
	require.Less(t, share, 0.10)
	// Still awake: a message after the idle second is answered.
	b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(0)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("again")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
	// Sparse traffic, a message every 50 ms: after each the engines poll
	// for shmSpin, then sleep again.
	c0, t0 = cpu(), time.Now()
	for i := 0; i < 20; i++ {
		b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(0)))
		a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("sparse")))
		require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
		time.Sleep(50 * time.Millisecond)
	}
	used, wall = cpu()-c0, time.Since(t0)
	share = float64(used) / float64(wall)
	t.Logf("two engines, a message every 50 ms: %v of CPU in %v (%.2f%% of a core)", used, wall, 100*share)
	// Within 100 ms of work an engine wakes every IdleSleep (500 µs) to
	// see its own doorbells: some 20% of a core for the two here. An
	// engine that kept polling after the spin would take a whole core.
	require.Less(t, share, 0.5)
}

// TestSharedLargeMessages: WRITEs, SENDs and READs of up to and beyond
// the largest payload a ring record carries cross a ring many times, in
// segments; a message beyond the port's max_msg_sz fails locally.
func TestSharedLargeMessages(t *testing.T) {
	e1, e2 := sharedPair(t)
	const size = 24 << 20
	bufs, mrs := registeredBuffers(t, size, e1.pd, e2.pd)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	e1.connectRC(a, b, 7, 1)
	src, dst := bufs[0].Bytes(), bufs[1].Bytes()
	fill(src, 11)
	la, ra := uint64(mrs[0].Addr()), uint64(mrs[1].Addr())
	for i, n := range []int{wireMaxPayload, 9 << 20, wireMaxPayload, 8 << 20, 5 << 20, wireMaxPayload} {
		off := i * 4096
		a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(ra+uint64(off), mrs[1].RKey()), dataSeg(uint32(n), mrs[0].LKey(), la+uint64(off)))
		c := waitCQE(t, a.scq, 10*time.Second)
		require.Equal(t, prm.CQEReq, c.op, "write %d of %d bytes: %+v", i, n, c)
		require.True(t, bytes.Equal(src[off:off+n], dst[off:off+n]), "write %d of %d bytes", i, n)
	}
	fill(dst[:8<<20], 12)
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(ra, mrs[1].RKey()), dataSeg(8<<20, mrs[0].LKey(), la+(16<<20)))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 10*time.Second).op)
	require.True(t, bytes.Equal(dst[:8<<20], src[16<<20:24<<20]))
	b.postRecv(dataSeg(8<<20, mrs[1].LKey(), ra))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dataSeg(8<<20, mrs[0].LKey(), la))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 10*time.Second).op)
	r := waitCQE(t, b.rcq, 10*time.Second)
	require.Equal(t, uint32(8<<20), r.byteCnt)
	require.True(t, bytes.Equal(src[:8<<20], dst[:8<<20]))
	// Larger than a ring record carries: cut into segments.
	fill(src, 13)
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(ra, mrs[1].RKey()), dataSeg(uint32(wireMaxPayload+1), mrs[0].LKey(), la))
	c := waitCQE(t, a.scq, 10*time.Second)
	require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	require.True(t, bytes.Equal(src[:wireMaxPayload+1], dst[:wireMaxPayload+1]))
	// Larger than the port's max_msg_sz (a zero byte count is 2 GiB): a
	// local length error.
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(ra, mrs[1].RKey()), dataSeg(0, mrs[0].LKey(), la))
	c = waitCQE(t, a.scq, 10*time.Second)
	require.Equal(t, prm.SyndromeLocalLength, c.synd)
}

// atomicOperands is the payload of an atomic request that adds (or swaps
// in) swap, as a requester writes it (putAtomic).
func atomicOperands(swap uint64) []byte {
	b := make([]byte, wireAtomicSize)
	putAtomic(b, &sendWQE{swap: swap})
	return b
}

// TestSharedRegistryRemovedByTheLastToLeave: the registry stays while a
// process uses the fabric and goes with the last one; a process that opened
// it and waited for its lock while the last one left opens the path again
// and joins a fresh registry there, not the removed one.
func TestSharedRegistryRemovedByTheLastToLeave(t *testing.T) {
	name := testFabricName(t)
	p := registryPath(name)
	a, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	b, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	a.leave()
	require.FileExists(t, p, "b still uses the fabric")
	b.leave()
	require.NoFileExists(t, p)

	// A joiner that opened the registry before its last process left,
	// and gets the lock after.
	c, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	require.NoError(t, flockWithin(c.reg.fd, registryLockWait))
	joined := make(chan *shmFabric, 1)
	go func() {
		d, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
		assert.NoError(t, err)
		joined <- d
	}()
	// The joiner holds the file open once it waits for the lock.
	require.Eventually(t, func() bool { return openHere(p) >= 2 }, 5*time.Second, time.Millisecond)
	// c leaves as release does, the lock already held.
	atomic.StoreUint64(c.reg.u64(slotOff(c.slot)+slotGen), 0)
	require.NoError(t, os.Remove(p))
	c.reg.unlock()
	d := <-joined
	require.NotNil(t, d)
	var here, its unix.Stat_t
	require.NoError(t, unix.Stat(p, &here))
	require.NoError(t, unix.Fstat(d.reg.fd, &its))
	require.Equal(t, here.Ino, its.Ino, "the joiner's registry is the one at the path")
	d.leave()
	c.in.close()
	c.reg.close()
	require.NoFileExists(t, p)
}

// TestSharedRegistryStaysWhileAReapedSlotIsHeld: a process found alive by a
// reap and ended before the registry's removal is considered (two
// processes under mlx5kit-emulate exiting together, one's sweeper running
// as the other ends) keeps the registry, so that the next sweep removes its
// ring file with its slot; its file is never left without a registry.
func TestSharedRegistryStaysWhileAReapedSlotIsHeld(t *testing.T) {
	name := testFabricName(t)
	a, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	b, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	// endProcess makes a slot's process gone: its ring file's liveness
	// lock dropped, its pid none.
	endProcess := func(f *shmFabric) {
		f.in.close()
		atomic.StoreUint32(f.reg.u32(slotOff(f.slot)+slotPID), 0)
	}
	// a has exited; its sweeper reaps while b still runs, and b ends
	// before the sweeper looks at the registry.
	endProcess(a)
	r := a.reg
	require.NoError(t, flockWithin(r.fd, registryLockWait))
	r.reap(name)
	require.NoFileExists(t, ringPath(name, a.slot), "a's ring file, reaped")
	require.FileExists(t, ringPath(name, b.slot), "b's ring file, alive at the reap")
	endProcess(b)
	r.removeUnused(name)
	r.unlock()
	require.FileExists(t, registryPath(name), "the registry names b's slot, whose file is still there")

	// b's sweeper.
	require.NoError(t, SweepFabric(name))
	require.NoFileExists(t, ringPath(name, b.slot))
	require.NoFileExists(t, registryPath(name))
	a.reg.close()
	b.reg.close()
}

// openHere counts this process's descriptors open on the file at p.
func openHere(p string) int {
	fds, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && l == p {
			n++
		}
	}
	return n
}

// TestCloseLastDeviceAndFabricAtOnce: a Fabric closed while another
// goroutine closes its last device waits for the engine that close is
// stopping before it leaves the shared fabric. It used to unmap the ring
// under the engine, asleep on it, which then faulted (SIGSEGV) as it woke.
func TestCloseLastDeviceAndFabricAtOnce(t *testing.T) {
	skipOnEmulatedCPU(t)
	for i := 0; i < 10; i++ {
		f := New(Options{Mode: Engine, Fabric: testFabricName(t), IdleSleep: 20 * time.Millisecond})
		c, err := f.Open("sim0")
		require.NoError(t, err)
		time.Sleep(30 * time.Millisecond) // the engine asleep on its ring
		closed := make(chan error, 1)
		go func() { closed <- c.Close() }()
		time.Sleep(100 * time.Microsecond)
		require.NoError(t, f.Close())
		require.NoError(t, <-closed)
		time.Sleep(25 * time.Millisecond) // an engine left running would wake by now
	}
}

// TestCheckFabricName: the names a shared fabric may have, and the error
// for the others.
func TestCheckFabricName(t *testing.T) {
	for _, ok := range []string{"default", "a", "A.b_c-9", strings.Repeat("x", 64)} {
		require.NoError(t, CheckFabricName(ok), ok)
	}
	for _, bad := range []string{"", ".hidden", "a/b", "a b", strings.Repeat("x", 65), "é"} {
		err := CheckFabricName(bad)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, bad)
		require.ErrorContains(t, err, "want 1 to 64 of [A-Za-z0-9._-], not starting with a dot")
	}
}

// TestRegistryLockHeldBounded: a registry lock another process holds for
// good (one stopped while it joins or leaves, or a hostile member) keeps a
// join waiting only registryLockWait, and then fails naming the lock; a
// Close waits as long and then returns, leaving its slot for a process
// to reap once this one has ended. Before, both waited for the lock for ever, Close with
// the Fabric's lock held.
func TestRegistryLockHeldBounded(t *testing.T) {
	old := registryLockWait
	registryLockWait = 200 * time.Millisecond
	t.Cleanup(func() { registryLockWait = old })
	name := testFabricName(t)
	f := newEnv(t, Options{Mode: Engine, Fabric: name}).f
	_, slot := f.SharedFabric()
	holder, err := unix.Open(registryPath(name), unix.O_RDWR|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(holder)
	require.NoError(t, unix.Flock(holder, unix.LOCK_EX))

	start := time.Now()
	_, err = joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.ErrorIs(t, err, unix.EWOULDBLOCK)
	require.Contains(t, err.Error(), registryPath(name))
	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close waits for the registry lock")
	}
	require.Less(t, time.Since(start), 5*time.Second)

	// Once the lock is free, joins work again; the slot Close left stays
	// held while its process runs (the next process reaps it after).
	require.NoError(t, unix.Flock(holder, unix.LOCK_UN))
	s, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	defer s.leave()
	require.NotEqual(t, slot, s.slot)
}

// TestSweepFabricOrphanRings: a fabric with no registry (the last process
// to leave removed it) can still have a ring file no process holds, left
// by one killed while it joined: SweepFabric removes it, keeps a ring file
// a live process holds, and leaves no registry behind. Before, it returned
// at once when there was no registry.
func TestSweepFabricOrphanRings(t *testing.T) {
	name := testFabricName(t)
	orphan := ringPath(name, 3)
	require.NoError(t, os.WriteFile(orphan, make([]byte, 64), 0o600))
	t.Cleanup(func() { _ = os.Remove(orphan) })
	held, err := createRingFile(name, 5, 1) // holds its liveness lock
	require.NoError(t, err)
	t.Cleanup(func() { held.close(); _ = os.Remove(ringPath(name, 5)) })
	require.NoFileExists(t, registryPath(name))

	require.NoError(t, SweepFabric(name))
	require.NoFileExists(t, orphan, "the orphan ring file")
	require.FileExists(t, ringPath(name, 5), "a ring file a live process holds")
	require.NoFileExists(t, registryPath(name))
}

// TestSweepFabricHalfMadeRegistry: a registry of this build's size whose
// header was never written (a join that sized it and then failed, on a
// full /dev/shm, or died before its first store) holds no slot: SweepFabric
// removes it and the ring files no process holds, as openRegistry starts
// it afresh, rather than refuse it as another version's.
func TestSweepFabricHalfMadeRegistry(t *testing.T) {
	name := testFabricName(t)
	require.NoError(t, os.WriteFile(registryPath(name), make([]byte, regSize), 0o600))
	orphan := ringPath(name, 2)
	require.NoError(t, os.WriteFile(orphan, make([]byte, 64), 0o600))
	held, err := createRingFile(name, 5, 1) // holds its liveness lock
	require.NoError(t, err)
	t.Cleanup(func() { held.close(); _ = os.Remove(ringPath(name, 5)) })

	require.NoError(t, SweepFabric(name))
	require.NoFileExists(t, registryPath(name), "the half-made registry")
	require.NoFileExists(t, orphan, "the orphan ring file")
	require.FileExists(t, ringPath(name, 5), "a ring file a live process holds")
}
