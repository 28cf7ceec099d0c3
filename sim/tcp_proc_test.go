package sim

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// The tests of this file link processes over TCP on 127.0.0.1: the test
// binary re-executed to run TestLinkChild, which listens or connects, and
// the test itself, which connects, as hosts would. They talk as the
// shared fabric's two-process tests do (shm_proc_test.go): JSON lines on
// the child's stdin and stdout.

const (
	envLinkChildRole = "MLX5KIT_SIM_TEST_LINK_CHILD" // "listen", or the address to connect to
	envLinkChildKey  = "MLX5KIT_SIM_TEST_LINK_KEY"

	// The child's UD QP: its qkey, and where its receives land.
	linkChildQKey  = 0x3333
	linkChildUDBuf = 900000
)

// linkChildInfo is the child's first line: its RC QP, its UD QP and the
// address its Fabric listens on or connected to.
type linkChildInfo struct {
	peerInfo
	UDQPN uint32
	Link  string
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
	Members     int
	Forwarded   uint64
}

// TestLinkChild is the child's side; it does nothing unless a parent test
// started it.
func TestLinkChild(t *testing.T) {
	role := os.Getenv(envLinkChildRole)
	if role == "" {
		t.Skip("the child of the multi-process link tests")
	}
	link := role
	if role == "listen" {
		link = "listen:127.0.0.1:0"
	}
	e := newEnv(t, Options{Mode: Engine, Link: link, LinkKey: []byte(os.Getenv(envLinkChildKey))})
	fill(e.buf.Bytes(), childSeed)
	q := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	for i := 0; i < 32; i++ {
		q.postRecv(dataSeg(4096, e.mr.LKey(), e.addr(i*4096)))
	}
	u := e.udQP(e.pd, linkChildQKey, qpOpts{})
	for i := 0; i < 8; i++ {
		u.postRecv(dataSeg(256, e.mr.LKey(), e.addr(linkChildUDBuf+i*256)))
	}
	out := func(v any) {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		fmt.Printf("%s%s\n", childMark, b)
	}
	st, ok := e.f.Link()
	require.True(t, ok)
	out(linkChildInfo{peerInfo: peerInfo{QPN: q.qp.QPN(), LID: lidOf(t, e.c), Addr: e.addr(0), RKey: e.mr.RKey()}, UDQPN: u.qp.QPN(), Link: st.Address})
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
				l := linkStatusLine{Refused: s.Refused, Peers: s.Peers, Members: s.Members, Forwarded: s.Forwarded}
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
			if c, ok := u.rcq.poll(); ok {
				// A datagram: its payload follows the GRH space.
				at := linkChildUDBuf + int(c.counter%8)*256
				out(childEvent{Op: uint8(c.op), Imm: c.imm, ByteCnt: c.byteCnt, Data: append([]byte(nil), e.mem(at+40, int(min(c.byteCnt, 256))-40)...)})
				u.postRecv(dataSeg(256, e.mr.LKey(), e.addr(at)))
				continue
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
		}
	}
}

// startLinkChild starts a child that listens with key, or connects with
// it to the Fabric listening at addr; its first line (its QPs and link
// address) is read.
func startLinkChild(t *testing.T, key, addr string) (*child, linkChildInfo) {
	skipOnEmulatedCPU(t)
	role := "listen"
	if addr != "" {
		role = addr
	}
	c := spawnChild(t, "TestLinkChild", 60*time.Second, envLinkChildRole+"="+role, envLinkChildKey+"="+key)
	var info linkChildInfo
	require.NoError(t, json.Unmarshal([]byte(c.line(t)), &info))
	c.info = info.peerInfo
	return c, info
}

func TestLinkTwoProcessesRC(t *testing.T) {
	key := string(testLinkKey)
	ch, info := startLinkChild(t, key, "")
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
	old := binary.NativeEndian.Uint64(remote[500000:])
	a.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr+500000, ch.info.RKey), atomicSeg(3, 0), dataSeg(8, e.mr.LKey(), e.addr(30000)))
	ok()
	require.Equal(t, old, binary.NativeEndian.Uint64(e.mem(30000, 8)))
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr+500000, ch.info.RKey), dataSeg(8, e.mr.LKey(), e.addr(30008)))
	ok()
	require.Equal(t, old+3, binary.NativeEndian.Uint64(e.mem(30008, 8)))

	// The child's requests: WRITE, READ and SEND towards the parent.
	childOps(t, ch, e, a)

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
	ch, info := startLinkChild(t, string(testLinkKey), "")
	bad := New(Options{Mode: Engine, Link: info.Link, LinkKey: []byte("not-the-key-0123456789abcdef")})
	defer bad.Close()
	_, err := bad.Open("sim0")
	require.ErrorIs(t, err, endpoint.ErrAuth)
	require.Contains(t, err.Error(), "did not prove that it holds the key")
	require.Contains(t, err.Error(), "$"+EnvLinkKey)

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
	ch, info := startLinkChild(t, string(testLinkKey), "")
	e := newEnv(t, Options{Mode: Engine, Link: info.Link, LinkKey: testLinkKey})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC, sendDepth: 256, cqDepth: 1024})
	connectTo(t, a, ch.info, killedPeerTimeout, killedPeerRetry)
	ch.send(t, peerInfo{QPN: a.qp.QPN(), LID: lidOf(t, e.c)})

	streamUntilKilled(t, e, a, ch.info, ch.cmd.Process)
	require.Eventually(t, func() bool { s, _ := e.f.Link(); return s.Peers == 0 }, 5*time.Second, time.Millisecond)
}

// linkedThree starts a child that listens (the hub) and one that connects
// to it, then links this process to the hub too: three hosts on one link.
// It returns the connecting child, this process's environment with an RC
// QP connected to the child's, and the hub.
func linkedThree(t *testing.T, timeout, retry uint8) (hub, b *child, binfo linkChildInfo, e *env, a *testQP) {
	hub, hinfo := startLinkChild(t, string(testLinkKey), "")
	b, binfo = startLinkChild(t, string(testLinkKey), hinfo.Link)
	e = newEnv(t, Options{Mode: Engine, Link: hinfo.Link, LinkKey: testLinkKey})
	require.True(t, e.f.Reaches(binfo.QPN), "the other connecting process, through the hub")
	a = e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC, sendDepth: 256, cqDepth: 1024})
	connectTo(t, a, b.info, timeout, retry)
	a.postRecv(dataSeg(4096, e.mr.LKey(), e.addr(800000)))
	b.send(t, peerInfo{QPN: a.qp.QPN(), LID: lidOf(t, e.c), Addr: e.addr(0), RKey: e.mr.RKey()})
	return hub, b, binfo, e, a
}

// linkStatus asks a link child for its link's state.
func linkStatus(t *testing.T, c *child) linkStatusLine {
	c.send(t, linkCommand{Cmd: "status"})
	var st linkStatusLine
	require.NoError(t, json.Unmarshal([]byte(c.line(t)), &st))
	return st
}

func TestLinkThreeProcesses(t *testing.T) {
	hub, b, binfo, e, a := linkedThree(t, 14, 7)
	const wait = 10 * time.Second
	remote := make([]byte, childMemSize)
	fill(remote, childSeed) // what the other client's memory holds
	ok := func() {
		t.Helper()
		c := waitCQE(t, a.scq, wait)
		require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	}

	// RC from this process to the other client: WRITE with immediate,
	// READ, atomic.
	a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, 21, raddrSeg(b.info.Addr+400000, b.info.RKey), inlineSeg([]byte("via the hub")))
	ok()
	ev := b.event(t)
	require.Equal(t, uint8(prm.CQERespWrImm), ev.Op)
	require.Equal(t, uint32(21), ev.Imm)
	require.Equal(t, uint32(11), ev.ByteCnt)
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(b.info.Addr+200000, b.info.RKey), dataSeg(70000, e.mr.LKey(), e.addr(0)))
	ok()
	require.Equal(t, remote[200000:270000], e.mem(0, 70000))
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(b.info.Addr+400000, b.info.RKey), dataSeg(11, e.mr.LKey(), e.addr(100000)))
	ok()
	require.Equal(t, []byte("via the hub"), e.mem(100000, 11))
	old := binary.NativeEndian.Uint64(remote[500000:])
	a.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, raddrSeg(b.info.Addr+500000, b.info.RKey), atomicSeg(3, 0), dataSeg(8, e.mr.LKey(), e.addr(110000)))
	ok()
	require.Equal(t, old, binary.NativeEndian.Uint64(e.mem(110000, 8)))

	// UD from this process to the other client.
	u := e.udQP(e.pd, 0x1111, qpOpts{})
	u.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 0x77, udAV(linkChildQKey, binfo.UDQPN, b.info.LID), inlineSeg([]byte("datagram via the hub")))
	require.Equal(t, prm.CQEReq, waitCQE(t, u.scq, wait).op)
	ev = b.event(t)
	require.Equal(t, uint8(prm.CQERespSendImm), ev.Op)
	require.Equal(t, uint32(0x77), ev.Imm)
	require.Equal(t, []byte("datagram via the hub"), ev.Data)

	// The other client's requests to this process: WRITE, READ, SEND.
	childOps(t, b, e, a)

	// Every message went through the hub's process: of each of the 7 RC
	// operations at least a request and its response, and the datagram.
	st := linkStatus(t, hub)
	require.Equal(t, 2, st.Peers)
	require.Equal(t, 3, st.Members)
	require.GreaterOrEqual(t, st.Forwarded, uint64(2*7+1))
	s, _ := e.f.Link()
	require.Equal(t, 3, s.Members)
	require.Equal(t, 1, s.Peers)
}

func TestLinkThreeProcessesPeerKilled(t *testing.T) {
	hub, b, binfo, e, a := linkedThree(t, killedPeerTimeout, killedPeerRetry)
	streamUntilKilled(t, e, a, b.info, b.cmd.Process)
	require.Eventually(t, func() bool { s, _ := e.f.Link(); return s.Members == 2 }, 5*time.Second, time.Millisecond)
	require.False(t, e.f.Reaches(binfo.QPN))
	st := linkStatus(t, hub)
	require.Equal(t, 1, st.Peers)
	require.Equal(t, 2, st.Members)

	// The survivor and the hub still talk.
	h := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	hubInfo := hub.info
	connectTo(t, h, hubInfo, 14, 7)
	hub.send(t, peerInfo{QPN: h.qp.QPN(), LID: lidOf(t, e.c), Addr: e.addr(0), RKey: e.mr.RKey()})
	h.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("still here")))
	require.Equal(t, prm.CQEReq, waitCQE(t, h.scq, 10*time.Second).op)
	require.Equal(t, []byte("still here"), hub.event(t).Data)
}

// childOps has the link child ch run its requests ("ops") to the QP a on
// e, which has a receive posted at 800000, and checks both memories.
func childOps(t *testing.T, ch *child, e *env, a *testQP) {
	t.Helper()
	remote := make([]byte, childMemSize)
	fill(remote, childSeed) // what the child's memory holds
	fill(e.mem(200000, 5000), 11)
	ch.send(t, linkCommand{Cmd: "ops"})
	var r linkOpsResult
	require.NoError(t, json.Unmarshal([]byte(ch.line(t)), &r))
	require.Equal(t, []uint8{uint8(prm.CQEReq), uint8(prm.CQEReq), uint8(prm.CQEReq)}, r.Status)
	require.Equal(t, e.mem(200000, 5000), r.Read)
	require.Equal(t, remote[600000:603000], e.mem(100000, 3000))
	c := waitCQE(t, a.rcq, 10*time.Second)
	require.Equal(t, prm.CQERespSend, c.op)
	require.Equal(t, []byte("from the child"), e.mem(800000, int(c.byteCnt)))
}
