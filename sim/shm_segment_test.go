package sim

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"syscall"
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
)

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
	for i := range mem {
		mem[i] = 0x5a
	}
	region := mem[bigGuard : bigGuard+bigSize]
	fill(region, bigSeed)
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
		ok := true
		for _, b := range mem[:bigGuard] {
			ok = ok && b == 0x5a
		}
		for _, b := range mem[bigGuard+bigSize:] {
			ok = ok && b == 0x5a
		}
		out(bigReport{Sum: sha256.Sum256(region), SentinelOK: ok, Recv: recv})
	}
}

// bigLocal is a local region of bigSize bytes before a sentinel.
func bigLocal(t *testing.T, e *env) (*ctx.MemoryRegion, []byte, []byte) {
	buf, err := ctx.AllocBuffer(bigSize+bigGuard, ctx.BufferOptions{Guard: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	mem := buf.Bytes()
	for i := range mem {
		mem[i] = 0xa5
	}
	mr, err := e.pd.RegisterMemory(mem[:bigSize], allAccess)
	require.NoError(t, err)
	return mr, mem[:bigSize], mem[bigSize:]
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
	connectTo(t, a, ch.info, 14, 7)
	ch.send(t, peerInfo{QPN: a.qp.QPN(), LID: lidOf(t, e.c)})
	report := func() bigReport {
		t.Helper()
		ch.send(t, "report")
		var r bigReport
		require.NoError(t, json.Unmarshal([]byte(ch.line(t)), &r))
		return r
	}
	const wait = 60 * time.Second
	la := uint64(mr.Addr())

	// SEND 20 MiB into the child's one receive.
	fill(local, 1)
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dataSeg(20<<20, mr.LKey(), la))
	c := waitCQE(t, a.scq, wait)
	require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	remote := make([]byte, bigSize)
	fill(remote, bigSeed)
	copy(remote, local[:20<<20])
	var r bigReport
	require.Eventually(t, func() bool { r = report(); return len(r.Recv) > 0 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []uint32{20 << 20}, r.Recv, "one receive completion of the whole message")
	require.Equal(t, sha256.Sum256(remote), r.Sum)
	require.True(t, r.SentinelOK)

	// WRITE 64 MiB.
	fill(local, 2)
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr, ch.info.RKey), dataSeg(bigSize, mr.LKey(), la))
	c = waitCQE(t, a.scq, wait)
	require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	require.Equal(t, uint32(bigSize), c.byteCnt)
	r = report()
	require.Equal(t, sha256.Sum256(local), r.Sum, "the child's region holds the 64 MiB written")
	require.True(t, r.SentinelOK)
	want := bytes.Clone(local)

	// READ 64 MiB back (two SGEs, split at an odd offset).
	fill(local, 3)
	const split = 40<<20 + 12345
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr, ch.info.RKey),
		dataSeg(split, mr.LKey(), la), dataSeg(bigSize-split, mr.LKey(), la+split))
	c = waitCQE(t, a.scq, wait)
	require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	require.Equal(t, uint32(bigSize), c.byteCnt)
	require.True(t, bytes.Equal(want, local), "the 64 MiB read back")
	for i, b := range sentinel {
		if b != 0xa5 {
			t.Fatalf("byte %d after the local region written: %#x", i, b)
		}
	}
	require.Empty(t, a.scq.drain(), "each WQE completes once")
	r = report()
	require.Equal(t, []uint32{20 << 20}, r.Recv)
	require.True(t, r.SentinelOK)
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
	connectTo(t, a, ch.info, 12, 3) // ACK timeout ~17 ms, 3 retries
	ch.send(t, peerInfo{QPN: a.qp.QPN(), LID: lidOf(t, e.c)})
	const n = 8
	for i := 0; i < n; i++ {
		op := prm.OpRdmaWrite
		if i%2 == 1 {
			op = prm.OpRdmaRead
		}
		a.post(op, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr, ch.info.RKey), dataSeg(bigSize, mr.LKey(), uint64(mr.Addr())))
	}
	var cqes []cqe
	first := waitCQE(t, a.scq, 60*time.Second)
	cqes = append(cqes, first)
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGKILL))
	for len(cqes) < n {
		cqes = append(cqes, waitCQE(t, a.scq, 30*time.Second))
	}
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, a.scq.drain(), "nothing completes twice")
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
	for j, b := range sentinel {
		if b != 0xa5 {
			t.Fatalf("byte %d after the local region written: %#x", j, b)
		}
	}
	st, err := e.f.QPState(a.qp.QPN())
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateError, st)
}
