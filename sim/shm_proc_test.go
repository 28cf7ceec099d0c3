package sim

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/procstat"
)

// The tests of this file run a second process: the test binary itself,
// re-executed to run TestSharedChild with the role and the fabric in the
// environment. Parent and child exchange their QP's address as JSON lines
// on the child's stdin and stdout (lines of the child start with
// childMark).

const (
	envChildRole   = "MLX5KIT_SIM_TEST_CHILD"
	envChildFabric = "MLX5KIT_SIM_TEST_FABRIC"
	childMark      = "SIMCHILD "
	childSeed      = 42
	childMemSize   = 1 << 20
)

// peerInfo is what one side tells the other.
type peerInfo struct {
	QPN  uint32
	LID  uint16
	Addr uint64
	RKey uint32
	// Timeout is the ACK timeout (the exponent) the child's QP uses
	// towards the parent; 0 means 14 (67 ms).
	Timeout uint8 `json:",omitempty"`
}

// childEvent is a line the child writes for every receive completion.
type childEvent struct {
	Op      uint8
	Imm     uint32
	ByteCnt uint32
	Data    []byte
}

// connectTo brings q to RTS towards the QP p describes.
func connectTo(t testing.TB, q *testQP, p peerInfo, timeout, retry uint8) {
	require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
	require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: p.QPN, PathMTU: ctx.MTU4096,
		Path: ctx.AddressAttr{DLID: p.LID}, MinRNRTimer: 1, MaxDestRdAtomic: 16, RQPSN: 100}))
	require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: timeout, RetryCount: retry, RNRRetry: 7, MaxRdAtomic: 16, SQPSN: 100}))
}

// TestSharedChild is the child's side; it does nothing unless a parent test
// started it.
func TestSharedChild(t *testing.T) {
	role := os.Getenv(envChildRole)
	if role == "" {
		t.Skip("the child of the two-process tests")
	}
	if role == "bounce" {
		bounceChild(t)
		return
	}
	if role == "big" {
		bigChild(t)
		return
	}
	if strings.HasPrefix(role, "dcbig:") {
		dcBigChild(t, role)
		return
	}
	e := newEnv(t, Options{Mode: Engine, Fabric: os.Getenv(envChildFabric)})
	fill(e.buf.Bytes(), childSeed)
	q := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	for i := 0; i < 32; i++ {
		q.postRecv(dataSeg(4096, e.mr.LKey(), e.addr(i*4096)))
	}
	out := func(v any) {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		fmt.Printf("%s%s\n", childMark, b)
	}
	out(peerInfo{QPN: q.qp.QPN(), LID: lidOf(t, e.c), Addr: e.addr(0), RKey: e.mr.RKey()})
	in := bufio.NewScanner(os.Stdin)
	require.True(t, in.Scan())
	var p peerInfo
	require.NoError(t, json.Unmarshal(in.Bytes(), &p))
	connectTo(t, q, p, cmp.Or(p.Timeout, 14), 7)
	// Report every receive completion until the parent closes stdin.
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	if role == "echo" {
		// Connected: the parent's first request finds the QP ready
		// (one sent before would be dropped and wait for a retry).
		out(peerInfo{QPN: q.qp.QPN()})
		echoChild(q, p, stdinClosed)
		// The last line: the child's counters, for the parent to check.
		out(e.f.Stats())
		return
	}
	n := 0
	for {
		select {
		case <-stdinClosed:
			return
		default:
		}
		c, ok := q.rcq.poll()
		if !ok {
			time.Sleep(50 * time.Microsecond)
			continue
		}
		ev := childEvent{Op: uint8(c.op), Imm: c.imm, ByteCnt: c.byteCnt}
		if c.op == prm.CQERespSend || c.op == prm.CQERespSendImm {
			ev.Data = append([]byte(nil), e.mem(int(c.counter%32)*4096, int(min(c.byteCnt, 4096)))...)
		}
		out(ev)
		q.postRecv(dataSeg(4096, e.mr.LKey(), e.addr(int(c.counter%32)*4096)))
		n++
	}
}

// child is a running child process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	info   peerInfo
	cancel context.CancelFunc
}

// startChild starts a child of the shared fabric tests in role on fabric
// and reads its first line (its QP) into info. The child is killed after
// two minutes: the 1 GiB transfers take 15 s alone on a two-core machine
// and twice that beside the other packages' tests.
func startChild(t testing.TB, role, fabric string) *child {
	c := spawnChild(t, "TestSharedChild", 2*time.Minute, envChildRole+"="+role, envChildFabric+"="+fabric)
	require.NoError(t, json.Unmarshal([]byte(c.line(t)), &c.info))
	return c
}

// spawnChild re-executes the test binary to run the test named run, with
// env added to the environment and at most limit to live. The child's
// lines that start with childMark arrive on lines, the others are
// logged; on cleanup its stdin is closed and it is waited for.
func spawnChild(t testing.TB, run string, limit time.Duration, env ...string) *child {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a second process")
	}
	// A child that outlives its parent's test is killed. A benchmark on
	// a loaded machine may take minutes: a child killed in the middle
	// would look to the parent like a peer that stopped answering
	// (eight ACK timeouts, then RETRY_EXC_ERR).
	if _, ok := t.(*testing.B); ok {
		limit = max(limit, 10*time.Minute)
	}
	cx, cancel := context.WithTimeout(context.Background(), limit)
	cmd := exec.CommandContext(cx, os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 1024), cancel: cancel}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), childMark); ok {
				c.lines <- s
			} else {
				t.Logf("child: %s", sc.Text())
			}
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		// Read the child's output to its end before Wait, which closes
		// the pipe (os/exec: Wait only after the reads are done): the
		// reader's last lines are logged while the test still runs, not
		// after it ended (a panic), and a reader blocked on a full lines
		// lets the child finish.
		for range c.lines {
		}
		_ = cmd.Wait()
		cancel()
		if s := stderr.String(); s != "" {
			t.Logf("child stderr: %s", s)
		}
	})
	return c
}

// stats ends the input of an echo child and returns the counters of its
// Fabric, its last line.
func (c *child) stats(t testing.TB) Stats {
	t.Helper()
	require.NoError(t, c.stdin.Close())
	var s Stats
	require.NoError(t, json.Unmarshal([]byte(c.line(t)), &s))
	return s
}

// line returns the child's next line. It waits up to a minute: a report
// of the large-message tests hashes up to 1 GiB, which takes more than
// ten seconds on a loaded two-core machine.
func (c *child) line(t testing.TB) string {
	t.Helper()
	select {
	case s, ok := <-c.lines:
		require.True(t, ok, "the child ended")
		return s
	case <-time.After(time.Minute):
		t.Fatal("no line from the child within a minute")
		return ""
	}
}

func (c *child) event(t *testing.T) childEvent {
	t.Helper()
	var ev childEvent
	require.NoError(t, json.Unmarshal([]byte(c.line(t)), &ev))
	return ev
}

func (c *child) send(t testing.TB, v any) {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	_, err = fmt.Fprintf(c.stdin, "%s\n", b)
	require.NoError(t, err)
}

func TestSharedTwoProcessesRC(t *testing.T) {
	name := testFabricName(t)
	ch := startChild(t, "rc", name)
	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	connectTo(t, a, ch.info, 14, 7)
	ch.send(t, peerInfo{QPN: a.qp.QPN(), LID: lidOf(t, e.c)})
	const wait = 10 * time.Second
	remote := make([]byte, childMemSize)
	fill(remote, childSeed) // what the child's memory holds

	ok := func() cqe {
		t.Helper()
		c := waitCQE(t, a.scq, wait)
		require.Equal(t, prm.CQEReq, c.op, "%+v", c)
		return c
	}
	// SEND and SEND with immediate.
	msg := []byte("across two processes")
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg(msg))
	ok()
	ev := ch.event(t)
	require.Equal(t, uint8(prm.CQERespSend), ev.Op)
	require.Equal(t, msg, ev.Data)
	a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 0xabcdef, inlineSeg([]byte("imm")))
	ok()
	ev = ch.event(t)
	require.Equal(t, uint8(prm.CQERespSendImm), ev.Op)
	require.Equal(t, uint32(0xabcdef), ev.Imm)

	// READ what the child filled.
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr+200000, ch.info.RKey), dataSeg(5000, e.mr.LKey(), e.addr(0)))
	ok()
	require.Equal(t, remote[200000:205000], e.mem(0, 5000))

	// WRITE, then READ it back (RC is in order).
	fill(e.mem(10000, 3000), 5)
	a.post(prm.OpRdmaWrite, 0, 0, 0, raddrSeg(ch.info.Addr+300000, ch.info.RKey), dataSeg(3000, e.mr.LKey(), e.addr(10000)))
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr+299000, ch.info.RKey), dataSeg(5000, e.mr.LKey(), e.addr(20000)))
	ok()
	require.Equal(t, remote[299000:300000], e.mem(20000, 1000))
	require.Equal(t, e.mem(10000, 3000), e.mem(21000, 3000))
	require.Equal(t, remote[303000:304000], e.mem(24000, 1000))

	// WRITE with immediate.
	a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, 9, raddrSeg(ch.info.Addr+400000, ch.info.RKey), inlineSeg([]byte("wimm")))
	ok()
	ev = ch.event(t)
	require.Equal(t, uint8(prm.CQERespWrImm), ev.Op)
	require.Equal(t, uint32(9), ev.Imm)
	require.Equal(t, uint32(4), ev.ByteCnt)

	// Atomics on what the child holds.
	old := binary.NativeEndian.Uint64(remote[500000:])
	a.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr+500000, ch.info.RKey), atomicSeg(3, 0), dataSeg(8, e.mr.LKey(), e.addr(30000)))
	ok()
	require.Equal(t, old, binary.NativeEndian.Uint64(e.mem(30000, 8)))
	a.post(prm.OpAtomicCS, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr+500000, ch.info.RKey), atomicSeg(1234, old+3), dataSeg(8, e.mr.LKey(), e.addr(30008)))
	ok()
	require.Equal(t, old+3, binary.NativeEndian.Uint64(e.mem(30008, 8)))
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr+500000, ch.info.RKey), dataSeg(8, e.mr.LKey(), e.addr(30016)))
	ok()
	require.Equal(t, uint64(1234), binary.NativeEndian.Uint64(e.mem(30016, 8)))

	// In order and exactly once: 100 SENDs numbered by immediate (the
	// child's 32 receives are reposted as they complete: RNR NAKs and
	// retries are expected, duplicates and gaps are not).
	for i := 0; i < 100; i++ {
		a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, uint32(i), inlineSeg([]byte{byte(i)}))
		if i%8 == 7 {
			for j := 0; j < 8; j++ {
				ok()
			}
		}
	}
	for i := 0; i < 4; i++ {
		ok()
	}
	for i := 0; i < 100; i++ {
		ev := ch.event(t)
		require.Equal(t, uint32(i), ev.Imm)
		require.Equal(t, []byte{byte(i)}, ev.Data)
	}
	require.Empty(t, a.scq.drain())
}

func TestSharedTwoProcessesPeerKilled(t *testing.T) {
	name := testFabricName(t)
	ch := startChild(t, "rc", name)
	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC, sendDepth: 256, cqDepth: 1024})
	connectTo(t, a, ch.info, killedPeerTimeout, killedPeerRetry)
	ch.send(t, peerInfo{QPN: a.qp.QPN(), LID: lidOf(t, e.c)})

	streamUntilKilled(t, e, a, ch.info, ch.cmd.Process)
}

// The ACK timeout (268 ms) and retry count of the requester in the tests
// that kill its peer: the peer's process is a live one until the kill,
// and a loaded machine may leave it unscheduled for hundreds of
// milliseconds; its requests must outlast that ((7+1) x 268 ms, about
// 2 s), or the retries run out before the kill and the test sees a
// healthy peer's silence as the death it waits for. After the kill the
// RETRY_EXC_ERR comes those 2 s later.
const killedPeerTimeout, killedPeerRetry = 16, 7

// streamUntilKilled keeps 64 WRITEs and READs of 64 KiB from a (on e) to
// the QP peer describes in flight, kills proc (the peer's process, or the
// one it reaches the survivor through) once 20 have completed, and checks
// the survivor's side: every WQE completes exactly once, every success
// before the first error, that error RETRY_EXC_ERR and every later one a
// flush, nothing written outside the READ target, the QP in error.
func streamUntilKilled(t *testing.T, e *env, a *testQP, peer peerInfo, proc *os.Process) {
	t.Helper()
	// The survivor's buffer: READ targets in [0, 64 KiB), a sentinel in
	// the rest that nothing may touch.
	const target = 64 << 10
	buf := e.buf.Bytes()
	for i := target; i < len(buf); i++ {
		buf[i] = 0xa5
	}
	posted, completed := 0, 0
	post := func() {
		if posted%2 == 0 {
			a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(peer.Addr, peer.RKey), dataSeg(target, e.mr.LKey(), e.addr(0)))
		} else {
			a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(peer.Addr+target, peer.RKey), dataSeg(target, e.mr.LKey(), e.addr(0)))
		}
		posted++
	}
	for i := 0; i < 64; i++ {
		post()
	}
	var errs []cqe
	killed := false
	end := time.Now().Add(20 * time.Second)
	for completed < posted && time.Now().Before(end) {
		c, ok := a.scq.poll()
		if !ok {
			time.Sleep(20 * time.Microsecond)
			continue
		}
		completed++
		if c.op == prm.CQEReqErr {
			errs = append(errs, c)
		} else if !killed {
			if completed == 20 {
				// Mid-transfer: 44 WQEs outstanding.
				require.NoError(t, proc.Signal(syscall.SIGKILL))
				killed = true
			} else if completed > 20 {
				t.Fatalf("completed %d before the kill", completed)
			}
			post()
		}
	}
	require.True(t, killed, "completed %d of %d before the kill; first errors %+v", completed, posted, errs[:min(len(errs), 3)])
	require.Equal(t, posted, completed, "every WQE completes exactly once")
	require.NotEmpty(t, errs)
	require.Equal(t, prm.SyndromeTransportRetryExc, errs[0].synd, "%+v", errs[0])
	for _, c := range errs[1:] {
		require.Equal(t, prm.SyndromeWRFlush, c.synd, "%+v", c)
	}
	time.Sleep(20 * time.Millisecond)
	require.Empty(t, a.scq.drain(), "nothing completes twice")
	for i := target; i < len(buf); i++ {
		if buf[i] != 0xa5 {
			t.Fatalf("byte %d outside the READ target written: %#x", i, buf[i])
		}
	}
	st, err := e.f.QPState(a.qp.QPN())
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateError, st)
}

// TestSharedLeaveRemovesRingsOfProcessesGone: the ring file of a process
// killed before it could leave is removed when the last live process of
// the fabric leaves, not only when a next one joins, and so is the
// registry.
func TestSharedLeaveRemovesRingsOfProcessesGone(t *testing.T) {
	name := testFabricName(t)
	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	ch := startChild(t, "rc", name)
	ring := ringPath(name, qpnSlot(ch.info.QPN))
	require.FileExists(t, ring)
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGKILL))
	_ = ch.cmd.Wait()
	require.FileExists(t, ring, "nothing has removed the killed process's file yet")
	_, own := e.f.SharedFabric()
	require.NoError(t, e.f.Close())
	require.NoFileExists(t, ring, "the killed process's ring file")
	require.NoFileExists(t, ringPath(name, own), "the leaving process's own ring file")
	require.NoFileExists(t, registryPath(name), "the registry, once no live process uses it")
}

// TestSweepFabric: SweepFabric removes a killed process's slot and file,
// keeps a live process's, removes the registry once nobody is left, makes
// nothing where no fabric is, and refuses a registry of another version.
func TestSweepFabric(t *testing.T) {
	name := testFabricName(t)
	require.NoError(t, SweepFabric(name), "a fabric that does not exist")
	require.NoFileExists(t, registryPath(name), "a sweep makes no registry")

	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	_, own := e.f.SharedFabric()
	killed := startChild(t, "rc", name)
	gone := qpnSlot(killed.info.QPN)
	require.NoError(t, killed.cmd.Process.Signal(syscall.SIGKILL))
	_ = killed.cmd.Wait()
	require.FileExists(t, ringPath(name, gone))

	require.NoError(t, SweepFabric(name))
	require.NoFileExists(t, ringPath(name, gone), "the killed process's ring file")
	require.FileExists(t, ringPath(name, own), "the live process's ring file")
	require.FileExists(t, registryPath(name), "the registry a live process uses")

	// The live process leaves as a process under mlx5kit-emulate does:
	// by exiting. Its slot is then a dead process's too.
	child := startChild(t, "rc", name)
	childSlot := qpnSlot(child.info.QPN)
	require.NoError(t, e.f.Close())
	require.FileExists(t, ringPath(name, childSlot))
	require.NoError(t, child.cmd.Process.Signal(syscall.SIGKILL))
	_ = child.cmd.Wait()
	require.NoError(t, SweepFabric(name))
	require.NoFileExists(t, ringPath(name, childSlot))
	require.NoFileExists(t, registryPath(name), "the registry, once no live process uses it")

	require.NoError(t, os.WriteFile(registryPath(name), []byte("not a registry"), 0o600))
	t.Cleanup(func() { _ = os.Remove(registryPath(name)) })
	require.ErrorIs(t, SweepFabric(name), ErrFabricVersion)
	require.FileExists(t, registryPath(name), "another version's registry is left alone")

	require.ErrorIs(t, SweepFabric("../x"), ctx.ErrInvalidArgument)
}

// TestAliveZombie: a process that has exited and that its parent has not
// waited for yet (a zombie) is gone, as far as the fabric is concerned.
func TestAliveZombie(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	start, err := procStart(pid)
	require.NoError(t, err)
	require.True(t, alive(pid, start), "a sleeping process")
	require.NoError(t, cmd.Process.Kill())
	require.Eventually(t, func() bool {
		state, _, err := procstat.Read(pid)
		return err == nil && state == 'Z'
	}, 10*time.Second, time.Millisecond, "the killed process a zombie")
	require.False(t, alive(pid, start), "a zombie")
	_ = cmd.Wait()
	require.False(t, alive(pid, start), "a process waited for")
}
