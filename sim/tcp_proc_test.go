package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// The tests of this file link two processes over TCP on 127.0.0.1: the
// test binary re-executed to run TestLinkChild, which listens, and the
// test itself, which connects, as two hosts would. They talk as the
// shared fabric's two-process tests do (shm_proc_test.go): JSON lines on
// the child's stdin and stdout.

const (
	envLinkChildRole = "MLX5KIT_SIM_TEST_LINK_CHILD"
	envLinkChildKey  = "MLX5KIT_SIM_TEST_LINK_KEY"
)

// linkChildInfo is the child's first line: its QP and the address its
// Fabric listens on.
type linkChildInfo struct {
	peerInfo
	Link string
}

// linkCommand is a line the parent sends after its QP's address.
type linkCommand struct {
	Cmd string // "ops": the child's requests to the parent; "status": its link
}

// linkOpsResult is the child's answer to "ops".
type linkOpsResult struct {
	Status []uint8 // CQE opcode of each of its requests
	Read   []byte  // what its READ of the parent's memory got
}

// linkStatusLine is the child's answer to "status".
type linkStatusLine struct {
	Refused     int
	LastRefusal string
	Peers       int
}

// TestLinkChild is the child's side; it does nothing unless a parent test
// started it.
func TestLinkChild(t *testing.T) {
	if os.Getenv(envLinkChildRole) == "" {
		t.Skip("the child of the two-process link tests")
	}
	e := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: []byte(os.Getenv(envLinkChildKey))})
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
	st, ok := e.f.Link()
	require.True(t, ok)
	out(linkChildInfo{peerInfo: peerInfo{QPN: q.qp.QPN(), LID: lidOf(t, e.c), Addr: e.addr(0), RKey: e.mr.RKey()}, Link: st.Address})
	cmds := make(chan string)
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			cmds <- in.Text()
		}
		close(cmds)
	}()
	connected := false
	var p peerInfo
	for {
		select {
		case line, ok := <-cmds:
			if !ok {
				return
			}
			if !connected && !strings.Contains(line, `"Cmd"`) {
				require.NoError(t, json.Unmarshal([]byte(line), &p))
				connectTo(t, q, p, 14, 7)
				connected = true
				continue
			}
			var c linkCommand
			require.NoError(t, json.Unmarshal([]byte(line), &c))
			switch c.Cmd {
			case "status":
				s, _ := e.f.Link()
				l := linkStatusLine{Refused: s.Refused, Peers: s.Peers}
				if s.LastRefusal != nil {
					l.LastRefusal = s.LastRefusal.Error()
				}
				out(l)
			case "ops":
				// WRITE 3000 bytes of this memory to the parent, READ
				// 5000 of its bytes, SEND it a message.
				q.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(p.Addr+100000, p.RKey), dataSeg(3000, e.mr.LKey(), e.addr(600000)))
				q.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(p.Addr+200000, p.RKey), dataSeg(5000, e.mr.LKey(), e.addr(700000)))
				q.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("from the child")))
				var r linkOpsResult
				for len(r.Status) < 3 {
					r.Status = append(r.Status, uint8(waitCQE(t, q.scq, 10*time.Second).op))
				}
				r.Read = append([]byte(nil), e.mem(700000, 5000)...)
				out(r)
			}
		default:
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
		}
	}
}

// startLinkChild starts a child that listens with key; its first line
// (its QP and listening address) is read.
func startLinkChild(t *testing.T, key string) (*child, linkChildInfo) {
	if testing.Short() {
		t.Skip("starts a second process")
	}
	skipOnEmulatedCPU(t)
	cx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cmd := exec.CommandContext(cx, os.Args[0], "-test.run=^TestLinkChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envLinkChildRole+"=listen", envLinkChildKey+"="+key)
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
		_ = cmd.Wait()
		cancel()
		if s := stderr.String(); s != "" {
			t.Logf("child stderr: %s", s)
		}
	})
	var info linkChildInfo
	require.NoError(t, json.Unmarshal([]byte(c.line(t)), &info))
	c.info = info.peerInfo
	return c, info
}

func TestLinkTwoProcessesRC(t *testing.T) {
	key := string(testLinkKey)
	ch, info := startLinkChild(t, key)
	e := newEnv(t, Options{Mode: Engine, Link: info.Link, LinkKey: testLinkKey})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	connectTo(t, a, ch.info, 14, 7)
	a.postRecv(dataSeg(4096, e.mr.LKey(), e.addr(800000)))
	ch.send(t, peerInfo{QPN: a.qp.QPN(), LID: lidOf(t, e.c), Addr: e.addr(0), RKey: e.mr.RKey()})
	const wait = 10 * time.Second
	remote := make([]byte, childMemSize)
	fill(remote, childSeed) // what the child's memory holds
	ok := func() {
		t.Helper()
		c := waitCQE(t, a.scq, wait)
		require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	}

	// The parent's requests: SEND, READ, WRITE then READ back, WRITE
	// with immediate, atomics.
	msg := []byte("across two hosts")
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg(msg))
	ok()
	ev := ch.event(t)
	require.Equal(t, uint8(prm.CQERespSend), ev.Op)
	require.Equal(t, msg, ev.Data)
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr+200000, ch.info.RKey), dataSeg(5000, e.mr.LKey(), e.addr(0)))
	ok()
	require.Equal(t, remote[200000:205000], e.mem(0, 5000))
	fill(e.mem(10000, 3000), 5)
	a.post(prm.OpRdmaWrite, 0, 0, 0, raddrSeg(ch.info.Addr+300000, ch.info.RKey), dataSeg(3000, e.mr.LKey(), e.addr(10000)))
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr+299000, ch.info.RKey), dataSeg(5000, e.mr.LKey(), e.addr(20000)))
	ok()
	require.Equal(t, remote[299000:300000], e.mem(20000, 1000))
	require.Equal(t, e.mem(10000, 3000), e.mem(21000, 3000))
	require.Equal(t, remote[303000:304000], e.mem(24000, 1000))
	a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, 9, raddrSeg(ch.info.Addr+400000, ch.info.RKey), inlineSeg([]byte("wimm")))
	ok()
	ev = ch.event(t)
	require.Equal(t, uint8(prm.CQERespWrImm), ev.Op)
	require.Equal(t, uint32(9), ev.Imm)
	old := binary.BigEndian.Uint64(remote[500000:])
	a.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr+500000, ch.info.RKey), atomicSeg(3, 0), dataSeg(8, e.mr.LKey(), e.addr(30000)))
	ok()
	require.Equal(t, old, binary.BigEndian.Uint64(e.mem(30000, 8)))
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr+500000, ch.info.RKey), dataSeg(8, e.mr.LKey(), e.addr(30008)))
	ok()
	require.Equal(t, old+3, binary.BigEndian.Uint64(e.mem(30008, 8)))

	// The child's requests: WRITE, READ and SEND towards the parent.
	fill(e.mem(200000, 5000), 11)
	ch.send(t, linkCommand{Cmd: "ops"})
	var r linkOpsResult
	require.NoError(t, json.Unmarshal([]byte(ch.line(t)), &r))
	require.Equal(t, []uint8{uint8(prm.CQEReq), uint8(prm.CQEReq), uint8(prm.CQEReq)}, r.Status)
	require.Equal(t, e.mem(200000, 5000), r.Read)
	require.Equal(t, remote[600000:603000], e.mem(100000, 3000))
	c := waitCQE(t, a.rcq, wait)
	require.Equal(t, prm.CQERespSend, c.op)
	require.Equal(t, []byte("from the child"), e.mem(800000, int(c.byteCnt)))

	// In order and exactly once: 100 SENDs numbered by immediate (the
	// child reposts its 32 receives as they complete: RNR NAKs and
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

func TestLinkTwoProcessesWrongKey(t *testing.T) {
	ch, info := startLinkChild(t, string(testLinkKey))
	bad := New(Options{Mode: Engine, Link: info.Link, LinkKey: []byte("not-the-key-0123456789abcdef")})
	defer bad.Close()
	_, err := bad.Open("sim0")
	require.ErrorIs(t, err, endpoint.ErrAuth)
	require.Contains(t, err.Error(), "did not prove that it holds the key")

	// The child refused it, gave it nothing, and still takes the right
	// key.
	var st linkStatusLine
	require.Eventually(t, func() bool {
		ch.send(t, linkCommand{Cmd: "status"})
		require.NoError(t, json.Unmarshal([]byte(ch.line(t)), &st))
		return st.Refused == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.Zero(t, st.Peers)
	require.Contains(t, st.LastRefusal, endpoint.ErrAuth.Error())

	e := newEnv(t, Options{Mode: Engine, Link: info.Link, LinkKey: testLinkKey})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	connectTo(t, a, ch.info, 14, 7)
	ch.send(t, peerInfo{QPN: a.qp.QPN(), LID: lidOf(t, e.c), Addr: e.addr(0), RKey: e.mr.RKey()})
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("right key")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 10*time.Second).op)
	require.Equal(t, []byte("right key"), ch.event(t).Data)
}

func TestLinkTwoProcessesPeerKilled(t *testing.T) {
	ch, info := startLinkChild(t, string(testLinkKey))
	e := newEnv(t, Options{Mode: Engine, Link: info.Link, LinkKey: testLinkKey})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC, sendDepth: 256, cqDepth: 1024})
	connectTo(t, a, ch.info, 12, 3) // ACK timeout ~17 ms, 3 retries
	ch.send(t, peerInfo{QPN: a.qp.QPN(), LID: lidOf(t, e.c)})

	// READ targets in [0, 64 KiB), a sentinel in the rest that nothing
	// may touch.
	const target = 64 << 10
	buf := e.buf.Bytes()
	for i := target; i < len(buf); i++ {
		buf[i] = 0xa5
	}
	posted, completed := 0, 0
	post := func() {
		if posted%2 == 0 {
			a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr, ch.info.RKey), dataSeg(target, e.mr.LKey(), e.addr(0)))
		} else {
			a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr+target, ch.info.RKey), dataSeg(target, e.mr.LKey(), e.addr(0)))
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
				require.NoError(t, ch.cmd.Process.Signal(syscall.SIGKILL))
				killed = true
			}
			post()
		}
	}
	require.True(t, killed)
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
	require.Eventually(t, func() bool { s, _ := e.f.Link(); return s.Peers == 0 }, 5*time.Second, time.Millisecond)
}
