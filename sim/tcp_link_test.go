package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/sealed"
)

var testLinkKey = []byte("link-test-key-0123456789abcdef")

// linkedPair builds two Fabrics in this process linked over TCP on
// 127.0.0.1, as two hosts would be: e1 listens, e2 connects.
func linkedPair(t *testing.T) (e1, e2 *env) {
	skipOnEmulatedCPU(t)
	e1 = newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	st, ok := e1.f.Link()
	require.True(t, ok)
	e2 = newEnv(t, Options{Mode: Engine, Link: st.Address, LinkKey: testLinkKey})
	// The connecting end returns once it is authenticated; the listening
	// end admits it a moment later. A datagram sent before then is lost,
	// as to any QP the Fabric does not reach.
	require.Eventually(t, func() bool { s, _ := e1.f.Link(); return s.Peers == 1 }, 10*time.Second, time.Millisecond)
	return e1, e2
}

func TestLinkNumbering(t *testing.T) {
	e1, e2 := linkedPair(t)
	s1, ok := e1.f.Link()
	require.True(t, ok)
	s2, ok := e2.f.Link()
	require.True(t, ok)
	require.True(t, s1.Listening)
	require.False(t, s2.Listening)
	require.NotEqual(t, s1.Slot, s2.Slot)
	require.Equal(t, 1, s2.Peers)
	require.Eventually(t, func() bool { s, _ := e1.f.Link(); return s.Peers == 1 }, 5*time.Second, time.Millisecond)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	require.Equal(t, s1.Slot, tcpQPNSlot(a.qp.QPN()))
	require.Equal(t, s2.Slot, tcpQPNSlot(b.qp.QPN()))
	require.Equal(t, -1, qpnSlot(a.qp.QPN()), "apart from a shared fabric's QPNs")
	require.True(t, e1.f.Reaches(b.qp.QPN()))
	require.True(t, e2.f.Reaches(a.qp.QPN()))
	require.False(t, e2.f.Reaches(0x100))
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

// rcOps runs SEND, WRITE, WRITE with immediate, READ and atomics from a
// (on ea) to b (on eb), checking both memories.
func rcOps(t *testing.T, ea, eb *env, a, b *testQP, seed int64) {
	t.Helper()
	const wait = 5 * time.Second
	payload := make([]byte, 5000)
	fill(payload, seed)
	copy(ea.mem(0, len(payload)), payload)
	b.postRecv(dataSeg(8192, eb.mr.LKey(), eb.addr(0)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dataSeg(uint32(len(payload)), ea.mr.LKey(), ea.addr(0)))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, wait).op)
	r := waitCQE(t, b.rcq, wait)
	require.Equal(t, prm.CQERespSend, r.op)
	require.Equal(t, uint32(len(payload)), r.byteCnt)
	require.Equal(t, a.qp.QPN(), r.srcQPN)
	require.Equal(t, lidOf(t, ea.c), r.slid)
	require.Equal(t, payload, eb.mem(0, len(payload)))

	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(eb.addr(20000), eb.mr.RKey()), dataSeg(1000, ea.mr.LKey(), ea.addr(0)))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, wait).op)
	require.Equal(t, payload[:1000], eb.mem(20000, 1000))

	b.postRecv()
	a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, 77, raddrSeg(eb.addr(30000), eb.mr.RKey()), inlineSeg([]byte("hello")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, wait).op)
	r = waitCQE(t, b.rcq, wait)
	require.Equal(t, prm.CQERespWrImm, r.op)
	require.Equal(t, uint32(77), r.imm)
	require.Equal(t, []byte("hello"), eb.mem(30000, 5))

	fill(eb.mem(40000, 3000), seed+1)
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(eb.addr(40000), eb.mr.RKey()), dataSeg(3000, ea.mr.LKey(), ea.addr(50000)))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, wait).op)
	require.Equal(t, eb.mem(40000, 3000), ea.mem(50000, 3000))

	binary.NativeEndian.PutUint64(eb.mem(60000, 8), 100)
	a.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, raddrSeg(eb.addr(60000), eb.mr.RKey()), atomicSeg(5, 0), dataSeg(8, ea.mr.LKey(), ea.addr(60000)))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, wait).op)
	require.Equal(t, uint64(100), binary.NativeEndian.Uint64(ea.mem(60000, 8)))
	require.Equal(t, uint64(105), binary.NativeEndian.Uint64(eb.mem(60000, 8)))
}

func TestLinkRCBothWays(t *testing.T) {
	e1, e2 := linkedPair(t)
	a, b := rcBothWays(t, e1, e2, 3)
	writeImmBursts(t, e1, e2, a, b)
}

// rcBothWays connects an RC QP a on ea to one b on eb and runs rcOps
// from a to b, then from b to a.
func rcBothWays(t *testing.T, ea, eb *env, seed int64) (a, b *testQP) {
	t.Helper()
	a = ea.newQP(ea.pd, qpOpts{typ: ctx.QPTypeRC})
	b = eb.newQP(eb.pd, qpOpts{typ: ctx.QPTypeRC})
	require.True(t, ea.f.Reaches(b.qp.QPN()))
	require.True(t, eb.f.Reaches(a.qp.QPN()))
	// ACK timeout ~0.5 s: three engines in one process (-race, a loaded
	// machine) can stall a round trip past env.connectRC's 67 ms.
	connectTo(t, a, peerInfo{QPN: b.qp.QPN(), LID: lidOf(t, eb.c)}, 17, 7)
	connectTo(t, b, peerInfo{QPN: a.qp.QPN(), LID: lidOf(t, ea.c)}, 17, 7)
	rcOps(t, ea, eb, a, b, seed)
	rcOps(t, eb, ea, b, a, seed+4)
	return a, b
}

// writeImmBursts checks that RC delivers in order, each exactly once:
// bursts of writes with immediate from a (on ea) to b (on eb), half of
// whose receives are posted late (RNR NAKs and retries).
func writeImmBursts(t *testing.T, ea, eb *env, a, b *testQP) {
	t.Helper()
	const n = 48
	for i := 0; i < n; i += 8 {
		for j := 0; j < 4; j++ {
			b.postRecv()
		}
		naks := ea.f.Stats().RNRNaks
		for j := i; j < i+8; j++ {
			a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, uint32(j), raddrSeg(eb.addr(70000+j), eb.mr.RKey()), inlineSeg([]byte{byte(j + 1)}))
		}
		require.Eventually(t, func() bool { return ea.f.Stats().RNRNaks > naks }, 5*time.Second, 100*time.Microsecond)
		for j := 0; j < 4; j++ {
			b.postRecv()
		}
		for j := i; j < i+8; j++ {
			require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
			r := waitCQE(t, b.rcq, 5*time.Second)
			require.Equal(t, uint32(j), r.imm)
		}
	}
	time.Sleep(10 * time.Millisecond)
	require.Empty(t, a.scq.drain())
	require.Empty(t, b.rcq.drain())
	for i := 0; i < n; i++ {
		require.Equal(t, byte(i+1), eb.mem(70000+i, 1)[0])
	}
}

func TestLinkUDAndDC(t *testing.T) {
	e1, e2 := linkedPair(t)
	linkUD(t, e1, e2)
	linkDC(t, e2, e1)
}

// linkUD sends datagrams from a UD QP on ea to one on eb, one with a
// wrong qkey, and checks what eb receives and drops.
func linkUD(t *testing.T, ea, eb *env) {
	t.Helper()
	a := ea.udQP(ea.pd, 0x1111, qpOpts{})
	b := eb.udQP(eb.pd, 0x2222, qpOpts{})
	b.postRecv(dataSeg(140, eb.mr.LKey(), eb.addr(0)))
	b.postRecv(dataSeg(140, eb.mr.LKey(), eb.addr(256)))
	lid := lidOf(t, eb.c)
	dropped := eb.f.Stats().UDDropped
	a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 0x55, udAV(0x9999, b.qp.QPN(), lid), inlineSeg([]byte("bad qkey")))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, udAV(0x2222, b.qp.QPN(), lid), inlineSeg([]byte("datagram")))
	for i := 0; i < 2; i++ {
		require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
	}
	c := waitCQE(t, b.rcq, 5*time.Second)
	require.Equal(t, prm.CQERespSend, c.op)
	require.Equal(t, uint32(40+8), c.byteCnt)
	require.Equal(t, a.qp.QPN(), c.srcQPN)
	require.Equal(t, lidOf(t, ea.c), c.slid)
	require.Equal(t, []byte("datagram"), eb.mem(40, 8))
	time.Sleep(10 * time.Millisecond)
	require.Empty(t, b.rcq.drain(), "a wrong qkey is dropped")
	require.Equal(t, dropped+1, eb.f.Stats().UDDropped)
}

// linkDC runs SEND, WRITE, READ and an atomic from a DCI on ei to a DCT
// on et, and a DCI with the wrong key.
func linkDC(t *testing.T, ei, et *env) {
	t.Helper()
	srq := et.newSRQ(et.pd, 16, 1)
	dct := et.dct(et.pd, srq, 0xfeed)
	// Patient initiators: under a loaded machine (-race) a link round
	// trip can outlast the 12 ms of retries of env.dci's.
	dci := func() *testQP {
		d := ei.newQP(ei.pd, qpOpts{typ: ctx.QPTypeDCI, sendDepth: 32})
		require.NoError(t, d.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit}))
		require.NoError(t, d.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU4096}))
		require.NoError(t, d.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 18, RetryCount: 7, RNRRetry: 2}))
		return d
	}
	d := dci()
	srq.post(dataSeg(64, et.mr.LKey(), et.addr(0)))
	lid := lidOf(t, et.c)
	binary.NativeEndian.PutUint64(et.mem(8192, 8), 40)
	av := dcAV(0xfeed, dct.qp.QPN(), lid)
	d.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, av, inlineSeg([]byte("to dct")))
	d.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, av, raddrSeg(et.addr(4096), et.mr.RKey()), inlineSeg([]byte("written")))
	d.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, av, raddrSeg(et.addr(4096), et.mr.RKey()), dataSeg(7, ei.mr.LKey(), ei.addr(9000)))
	d.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, av, raddrSeg(et.addr(8192), et.mr.RKey()), atomicSeg(2, 0), dataSeg(8, ei.mr.LKey(), ei.addr(9100)))
	for i := 0; i < 4; i++ {
		c := waitCQE(t, d.scq, 5*time.Second)
		require.Equal(t, prm.CQEReq, c.op, "WQE %d: syndrome %v", c.counter, c.synd)
	}
	r := waitCQE(t, dct.rcq, 5*time.Second)
	require.Equal(t, d.qp.QPN(), r.srcQPN)
	require.Equal(t, []byte("to dct"), et.mem(int(r.counter)*64, 6))
	require.Equal(t, []byte("written"), et.mem(4096, 7))
	require.Equal(t, []byte("written"), ei.mem(9000, 7))
	require.Equal(t, uint64(40), binary.NativeEndian.Uint64(ei.mem(9100, 8)))
	require.Equal(t, uint64(42), binary.NativeEndian.Uint64(et.mem(8192, 8)))

	d2 := dci()
	d2.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dcAV(0xbad, dct.qp.QPN(), lid), inlineSeg([]byte("x")))
	require.Equal(t, prm.SyndromeRemoteAccess, waitCQE(t, d2.scq, 5*time.Second).synd)
}

func TestLinkPeerClosed(t *testing.T) {
	e1, e2 := linkedPair(t)
	b := peerGone(t, e1, e2)
	require.False(t, e1.f.Reaches(b.qp.QPN()))
	st, _ := e1.f.Link()
	require.Zero(t, st.Peers)
}

// peerGone connects an RC QP a on e1 to one on e2, SENDs once, closes e2's
// Fabric and checks that a's next requests end once each: RETRY_EXC_ERR,
// then flushes. It returns the closed end's QP.
func peerGone(t *testing.T, e1, e2 *env) (b *testQP) {
	t.Helper()
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b = e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	connectFast(t, a, b)
	b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(0)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("one")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)

	require.NoError(t, e2.f.Close())
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("two")))
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(0), e2.mr.RKey()), dataSeg(64, e1.mr.LKey(), e1.addr(0)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("three")))
	x := waitCQE(t, a.scq, 5*time.Second)
	require.Equal(t, prm.CQEReqErr, x.op)
	require.Equal(t, prm.SyndromeTransportRetryExc, x.synd)
	for i := 0; i < 2; i++ {
		y := waitCQE(t, a.scq, 5*time.Second)
		require.Equal(t, prm.SyndromeWRFlush, y.synd)
	}
	time.Sleep(10 * time.Millisecond)
	require.Empty(t, a.scq.drain(), "each WQE completes exactly once")
	require.GreaterOrEqual(t, e1.f.Stats().Retries, uint64(3))
	return b
}

func TestLinkWrongKeyRefused(t *testing.T) {
	skipOnEmulatedCPU(t)
	e1 := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	st, _ := e1.f.Link()
	bad := New(Options{Mode: Engine, Link: st.Address, LinkKey: []byte("not-the-key-0123456789abcdef")})
	defer bad.Close()
	_, err := bad.Open("sim0")
	require.ErrorIs(t, err, endpoint.ErrAuth, "the listener proves the key first: the connecting end finds it wrong")
	require.Contains(t, err.Error(), "link fabric over TCP")
	_, ok := bad.Link()
	require.False(t, ok, "no link made")
	require.Eventually(t, func() bool { s, _ := e1.f.Link(); return s.Refused == 1 }, 5*time.Second, time.Millisecond)
	st, _ = e1.f.Link()
	require.ErrorIs(t, st.LastRefusal, endpoint.ErrAuth)
	require.Zero(t, st.Peers, "the refused end got nothing")

	// The listener is unchanged: the right key links.
	good := newEnv(t, Options{Mode: Engine, Link: st.Address, LinkKey: testLinkKey})
	s2, ok := good.f.Link()
	require.True(t, ok)
	require.Equal(t, tcpSlotBase+1, s2.Slot, "the refused end was given no slot")
}

func TestLinkOptionErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
		want error
	}{
		{"no key", Options{Mode: Engine, Link: "listen:127.0.0.1:0"}, endpoint.ErrBadKey},
		{"manual", Options{Mode: Manual, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey}, ctx.ErrInvalidArgument},
		{"both", Options{Mode: Engine, Fabric: "x", Link: "listen:127.0.0.1:0", LinkKey: testLinkKey}, ctx.ErrInvalidArgument},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvLinkKey, "")
			f := New(c.opts)
			defer f.Close()
			_, err := f.Open("sim0")
			require.ErrorIs(t, err, c.want)
			_, ok := f.Link()
			require.False(t, ok)
		})
	}
}

func TestLinkVersionRefused(t *testing.T) {
	skipOnEmulatedCPU(t)
	e1 := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	st, _ := e1.f.Link()
	for _, c := range []struct {
		name   string
		edit   func(h []byte)
		status byte
	}{
		{"version", func(h []byte) { binary.BigEndian.PutUint16(h, tcpVersion+1) }, tcpBadVer},
		{"header", func(h []byte) { binary.BigEndian.PutUint16(h[2:], uint16(wireHdrSize+8)) }, tcpBadHeader},
		{"link layer", func(h []byte) { binary.BigEndian.PutUint32(h[8:], uint32(ctx.LinkLayerEthernet)) }, tcpBadLayer},
		{"devices", func(h []byte) { binary.BigEndian.PutUint32(h[12:], tcpMaxDevices+1) }, tcpBadDevices},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", st.Address)
			require.NoError(t, err)
			sc, err := sealed.Dial(conn, testLinkKey, sealed.FabricLink, 5*time.Second)
			require.NoError(t, err)
			defer sc.Close()
			h := hello(ctx.LinkLayerInfiniBand, 2)
			c.edit(h)
			require.NoError(t, sc.WriteFrame(h))
			b, err := sc.ReadFrame(tcpReplySize)
			require.NoError(t, err)
			require.Equal(t, c.status, b[0])
			require.Equal(t, uint16(tcpVersion), binary.BigEndian.Uint16(b[2:]), "the listener names its version")
			require.ErrorIs(t, refusal(b[0], h), ErrLinkRefused)
		})
	}
	require.Eventually(t, func() bool { s, _ := e1.f.Link(); return s.Refused == 4 }, 5*time.Second, time.Millisecond)
	s, _ := e1.f.Link()
	require.ErrorIs(t, s.LastRefusal, ErrLinkRefused)
	require.Zero(t, s.Peers)
}

// linkedStar builds three Fabrics in this process on one TCP link, as
// three hosts would be: hub listens, a and b connect to it.
func linkedStar(t *testing.T) (hub, a, b *env) {
	skipOnEmulatedCPU(t)
	hub = newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	st, ok := hub.f.Link()
	require.True(t, ok)
	a = newEnv(t, Options{Mode: Engine, Link: st.Address, LinkKey: testLinkKey})
	b = newEnv(t, Options{Mode: Engine, Link: st.Address, LinkKey: testLinkKey})
	for _, e := range []*env{hub, a, b} {
		require.Eventually(t, func() bool { s, _ := e.f.Link(); return s.Members == 3 }, 10*time.Second, time.Millisecond)
	}
	return hub, a, b
}

// linkedStarSending is linkedStar with an RC QP on each connecting end,
// a on e1 and b on e2, connected to each other through the hub, and one
// SEND from a to b completed.
func linkedStarSending(t *testing.T) (hub, e1, e2 *env, a, b *testQP) {
	hub, e1, e2 = linkedStar(t)
	a = e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b = e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	connectFast(t, a, b)
	b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(0)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("before")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
	return hub, e1, e2, a, b
}

func TestLinkHubForwardsRC(t *testing.T) {
	hub, e1, e2 := linkedStar(t)
	s0, _ := hub.f.Link()
	s1, _ := e1.f.Link()
	s2, _ := e2.f.Link()
	require.Equal(t, 2, s0.Peers)
	require.Equal(t, 1, s1.Peers, "a connecting end's one connection: the listener")
	require.Len(t, map[int]bool{s0.Slot: true, s1.Slot: true, s2.Slot: true}, 3)

	a, b := rcBothWays(t, e1, e2, 3)
	s0, _ = hub.f.Link()
	require.NotZero(t, s0.Forwarded)
	require.Zero(t, s0.NotForwarded)

	// The hub's own QPs still reach both, through the same connections.
	rcBothWays(t, hub, e2, 11)

	// In order, each exactly once, between the two connecting ends.
	writeImmBursts(t, e1, e2, a, b)
}

func TestLinkHubForwardsUDAndDC(t *testing.T) {
	hub, e1, e2 := linkedStar(t)
	linkUD(t, e1, e2)
	linkDC(t, e1, e2)
	linkDC(t, e2, e1)
	s, _ := hub.f.Link()
	require.NotZero(t, s.Forwarded)
}

func TestLinkHubPeerLeaves(t *testing.T) {
	hub, e1, e2 := linkedStar(t)
	b := peerGone(t, e1, e2)
	require.Eventually(t, func() bool { s, _ := e1.f.Link(); return s.Members == 2 }, 5*time.Second, time.Millisecond)
	require.False(t, e1.f.Reaches(b.qp.QPN()))
	s0, _ := hub.f.Link()
	require.Equal(t, 1, s0.Peers)
	require.Equal(t, 2, s0.Members)

	// The survivor and the hub still talk.
	rcBothWays(t, e1, hub, 5)
}

func TestLinkHubDropsForeignSource(t *testing.T) {
	hub, e1, e2 := linkedStar(t)
	b := e2.udQP(e2.pd, 0x2222, qpOpts{})
	b.postRecv(dataSeg(140, e2.mr.LKey(), e2.addr(0)))
	b.postRecv(dataSeg(140, e2.mr.LKey(), e2.addr(256)))
	s1, _ := e1.f.Link()
	s2, _ := e2.f.Link()
	s0, _ := hub.f.Link()
	// A datagram e1 sends in the name of a QP of another slot (the hub's),
	// then one from a QPN of its own slot.
	dlid, slid := lidOf(t, e2.c), lidOf(t, e1.c)
	datagram := func(src uint32, text string) {
		e1.f.mu.Lock()
		defer e1.f.mu.Unlock()
		require.True(t, e1.f.wireOut(s2.Slot, len(text), func(h *wireHdr, p []byte) {
			h.Kind, h.Op = wireUD, uint8(prm.OpSend)
			h.DstQPN, h.SrcQPN, h.RKey, h.Total = b.qp.QPN(), src, 0x2222, uint32(len(text))
			h.DLID, h.SrcLID = dlid, slid
			copy(p, text)
		}))
	}
	first, _ := tcpQPNRange(s0.Slot)
	datagram(first, "spoofed")
	require.Eventually(t, func() bool { s, _ := hub.f.Link(); return s.NotForwarded == 1 }, 5*time.Second, time.Millisecond)
	own, _ := tcpQPNRange(s1.Slot)
	datagram(own+0x42, "genuine")
	c := waitCQE(t, b.rcq, 5*time.Second)
	require.Equal(t, own+0x42, c.srcQPN)
	require.Equal(t, []byte("genuine"), e2.mem(prm.GRHSize, 7))
	time.Sleep(10 * time.Millisecond)
	require.Empty(t, b.rcq.drain(), "the spoofed datagram never arrives")
	s, _ := hub.f.Link()
	require.Equal(t, uint64(1), s.NotForwarded)
	require.Equal(t, uint64(1), s.Forwarded)
}

func TestLinkHubClosed(t *testing.T) {
	hub, e1, e2, a, b := linkedStarSending(t)
	require.NoError(t, hub.f.Close())
	for _, e := range []*env{e1, e2} {
		require.Eventually(t, func() bool { s, _ := e.f.Link(); return s.Members == 0 && s.Peers == 0 }, 5*time.Second, time.Millisecond)
	}
	require.False(t, e1.f.Reaches(b.qp.QPN()), "the link ended with its listener")
	require.False(t, e2.f.Reaches(a.qp.QPN()))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("after")))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("after")))
	x := waitCQE(t, a.scq, 10*time.Second)
	require.Equal(t, prm.SyndromeTransportRetryExc, x.synd, "%+v", x)
	require.Equal(t, prm.SyndromeWRFlush, waitCQE(t, a.scq, 5*time.Second).synd)
	time.Sleep(10 * time.Millisecond)
	require.Empty(t, a.scq.drain(), "each WQE completes exactly once")
}

// TestLinkHubWithoutDevices: the listening Fabric's engine keeps running
// when its own devices close (its Fabric and the link stay), so that it
// still passes the messages of the Fabrics connected to it on. It used to
// stop with the last device: the hub still counted three members, and
// every message between the other two was lost (RETRY_EXC_ERR).
func TestLinkHubWithoutDevices(t *testing.T) {
	hub, e1, e2, a, b := linkedStarSending(t)

	require.NoError(t, hub.c.Close())
	require.NoError(t, hub.c2.Close())
	s, _ := hub.f.Link()
	require.Equal(t, 3, s.Members)
	b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(64)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("after")))
	x := waitCQE(t, a.scq, 10*time.Second)
	require.Equal(t, prm.CQEReq, x.op, "%+v", x)
	r := waitCQE(t, b.rcq, 5*time.Second)
	require.Equal(t, prm.CQERespSend, r.op)
	require.Equal(t, []byte("after"), e2.mem(64, 5))

	// A Fabric that connects now is told of and reached, too.
	st, _ := hub.f.Link()
	e3 := newEnv(t, Options{Mode: Engine, Link: st.Address, LinkKey: testLinkKey})
	require.Eventually(t, func() bool { s, _ := e1.f.Link(); return s.Members == 4 }, 10*time.Second, time.Millisecond,
		"the hub without devices announces a new member")
	require.True(t, e3.f.Reaches(a.qp.QPN()))
}

// TestLinkCloseWakesEngine: Close of a Fabric on a TCP link returns at
// once, not at the end of the idle engine's sleep on the peers' sockets
// (up to IdleSleep, here 1 s, which the back-off reaches within the 2.5 s
// idle): the sleep's poll set holds an eventfd that Close writes.
func TestLinkCloseWakesEngine(t *testing.T) {
	skipOnEmulatedCPU(t)
	if testing.Short() {
		t.Skip("idles for the engine's back-off")
	}
	f := New(Options{Mode: Engine, IdleSleep: time.Second, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	c, err := f.Open("sim0")
	require.NoError(t, err)
	time.Sleep(2500 * time.Millisecond)
	require.NoError(t, c.Close())
	start := time.Now()
	require.NoError(t, f.Close())
	require.Less(t, time.Since(start), 100*time.Millisecond, "Close waited for the engine's sleep")
}

// TestLinkDropReason: a link that ends other than by this end's Close is
// counted, and why is kept: an altered frame (endpoint.ErrAuth), a peer
// that hangs up (EOF), each naming the peer's slot.
func TestLinkDropReason(t *testing.T) {
	skipOnEmulatedCPU(t)
	e := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	linked := func(p *linkPeer) bool { return peerLinked(e, p) }
	altered := dialLinkPeer(t, e)
	b, err := altered.sc.Seal(nil, linkMessage(wireHdr{Kind: wireUD, DstQPN: 0x100, SrcQPN: altered.qpn}, nil))
	require.NoError(t, err)
	b[len(b)-1] ^= 1
	_, err = altered.conn.Write(b)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !linked(altered) }, 10*time.Second, time.Millisecond)
	st, _ := e.f.Link()
	require.Equal(t, 1, st.Dropped)
	require.ErrorIs(t, st.LastDrop, endpoint.ErrAuth)
	require.Contains(t, st.LastDrop.Error(), fmt.Sprintf("link to slot %d", altered.slot))
	require.Zero(t, st.Refused, "a drop is not a refusal")

	gone := dialLinkPeer(t, e)
	require.NoError(t, gone.conn.Close())
	require.Eventually(t, func() bool { return !linked(gone) }, 10*time.Second, time.Millisecond)
	st, _ = e.f.Link()
	require.Equal(t, 2, st.Dropped)
	// A hang-up: EOF, or a reset when bytes it did not read were left.
	require.True(t, errors.Is(st.LastDrop, io.EOF) || errors.Is(st.LastDrop, unix.ECONNRESET), "%v", st.LastDrop)
	require.Contains(t, st.LastDrop.Error(), fmt.Sprintf("link to slot %d: recv", gone.slot))

	// This end's own Close drops nothing it counts.
	good := dialLinkPeer(t, e)
	require.Eventually(t, func() bool { return linked(good) }, 10*time.Second, time.Millisecond)
	require.NoError(t, e.f.Close())
	st, _ = e.f.Link()
	require.Equal(t, 2, st.Dropped)
}

// TestLinkSocketErrorsNamed: the errors of the link's socket calls name
// the call and wrap the errno.
func TestLinkSocketErrorsNamed(t *testing.T) {
	c := &fdConn{fd: -1}
	err := c.SetReadDeadline(time.Now().Add(time.Second))
	require.ErrorIs(t, err, unix.EBADF)
	require.Contains(t, err.Error(), "setsockopt SO_RCVTIMEO")
	err = c.SetWriteDeadline(time.Now().Add(time.Second))
	require.Contains(t, err.Error(), "setsockopt SO_SNDTIMEO")
	err = c.CloseWrite()
	require.ErrorIs(t, err, unix.EBADF)
	require.Contains(t, err.Error(), "shutdown")
}

// TestLinkedDCTDropsStreamsOfFabricsGone: over a TCP link a DCT drops the
// DCI streams of slots with no linked Fabric once they are as many as the
// live ones, and keeps the live ones.
func TestLinkedDCTDropsStreamsOfFabricsGone(t *testing.T) {
	e1, e2 := linkedPair(t)
	srq := e1.newSRQ(e1.pd, 16, 1)
	dct := e1.dct(e1.pd, srq, 0xfeed)
	st, _ := e2.f.Link()
	live, _ := tcpQPNRange(st.Slot)
	gone, _ := tcpQPNRange(st.Slot + 1)
	e1.f.tcp.mu.Lock()
	gen := e1.f.tcp.peers[st.Slot].gen
	e1.f.tcp.mu.Unlock()
	require.NotZero(t, gen)
	ws, begin := streamStarter(t, e1, dct)
	const nLive = dcStreamsSweepMin
	for i := range uint32(nLive) {
		require.NotNil(t, begin(live+i, gen))
	}
	most := 0
	for i := range uint32(4 * nLive) {
		// A slot no Fabric holds, and the live one's slot in an earlier
		// Fabric's generation (the listener numbers them).
		require.NotNil(t, begin(gone+i, 0))
		require.NotNil(t, begin(live+nLive+i, gen-1))
		most = max(most, len(ws.streams))
	}
	require.LessOrEqual(t, most, 2*nLive, "streams held")
	requireLiveStreams(t, ws, live, nLive, gen)
}

// TestLinkedDCTNewFabricInReusedSlot: a Fabric that links into the slot a
// closed one held, and whose first DCI has the QPN of the closed one's,
// begins a stream of its own at the DCT: its requests are executed, not
// taken for the old stream's duplicates.
func TestLinkedDCTNewFabricInReusedSlot(t *testing.T) {
	e1, e2 := linkedPair(t)
	srq := e1.newSRQ(e1.pd, 16, 1)
	dct := e1.dct(e1.pd, srq, 0xfeed)
	lid := lidOf(t, e1.c)
	av := dcAV(0xfeed, dct.qp.QPN(), lid)
	write := func(e *env, msg string) *testQP {
		d := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeDCI, sendDepth: 32})
		require.NoError(t, d.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit}))
		require.NoError(t, d.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU4096}))
		require.NoError(t, d.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 18, RetryCount: 7, RNRRetry: 2}))
		d.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, av, raddrSeg(e1.addr(4096), e1.mr.RKey()), inlineSeg([]byte(msg)))
		c := waitCQE(t, d.scq, 5*time.Second)
		require.Equal(t, prm.CQEReq, c.op, "syndrome %v", c.synd)
		return d
	}
	old := write(e2, "first")
	require.Equal(t, []byte("first"), e1.mem(4096, 5))
	st2, _ := e2.f.Link()
	require.NoError(t, e2.f.Close())
	require.Eventually(t, func() bool { s, _ := e1.f.Link(); return s.Peers == 0 }, 10*time.Second, time.Millisecond)

	// The listener hands the slots out in turn: Fabrics link and leave
	// until one gets the old slot again.
	s1, _ := e1.f.Link()
	var e3 *env
	for range tcpSlots {
		e := newEnv(t, Options{Mode: Engine, Link: s1.Address, LinkKey: testLinkKey})
		require.Eventually(t, func() bool { s, _ := e1.f.Link(); return s.Peers == 1 }, 10*time.Second, time.Millisecond)
		if st, _ := e.f.Link(); st.Slot == st2.Slot {
			e3 = e
			break
		}
		require.NoError(t, e.f.Close())
		require.Eventually(t, func() bool { s, _ := e1.f.Link(); return s.Peers == 0 }, 10*time.Second, time.Millisecond)
	}
	require.NotNil(t, e3, "the slot is reused")
	d := write(e3, "again")
	require.Equal(t, old.qp.QPN(), d.qp.QPN(), "the new Fabric's DCI has the old one's QPN")
	require.Equal(t, []byte("again"), e1.mem(4096, 5), "the new stream's WRITE executed")
}

// TestConnectingDCTDropsStreamsOfEarlierFabrics: a DCT on a connecting end
// learns from the messages the listener forwards which Fabric now holds a
// slot, and drops the streams that earlier Fabrics in that slot began.
func TestConnectingDCTDropsStreamsOfEarlierFabrics(t *testing.T) {
	e1, e2 := linkedPair(t)
	s1, _ := e1.f.Link()
	e3 := newEnv(t, Options{Mode: Engine, Link: s1.Address, LinkKey: testLinkKey})
	require.Eventually(t, func() bool { s, _ := e1.f.Link(); return s.Peers == 2 }, 10*time.Second, time.Millisecond)
	srq := e2.newSRQ(e2.pd, 16, 1)
	dct := e2.dct(e2.pd, srq, 0xfeed)
	d := e3.newQP(e3.pd, qpOpts{typ: ctx.QPTypeDCI, sendDepth: 32})
	require.NoError(t, d.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit}))
	require.NoError(t, d.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU4096}))
	require.NoError(t, d.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 18, RetryCount: 7, RNRRetry: 2}))
	require.Eventually(t, func() bool { return e3.f.Reaches(dct.qp.QPN()) }, 10*time.Second, time.Millisecond)
	av := dcAV(0xfeed, dct.qp.QPN(), lidOf(t, e2.c))
	d.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, av, raddrSeg(e2.addr(4096), e2.mr.RKey()), inlineSeg([]byte("now")))
	c := waitCQE(t, d.scq, 5*time.Second)
	require.Equal(t, prm.CQEReq, c.op, "syndrome %v", c.synd)

	st3, _ := e3.f.Link()
	e1.f.tcp.mu.Lock()
	gen := e1.f.tcp.peers[st3.Slot].gen
	e1.f.tcp.mu.Unlock()
	require.Greater(t, gen, uint64(1), "e2 and e3 were linked in turn")
	first, _ := tcpQPNRange(st3.Slot)
	live := first + 0x1000
	ws, begin := streamStarter(t, e2, dct)
	const nLive = dcStreamsSweepMin
	for i := range uint32(nLive) {
		require.NotNil(t, begin(live+i, gen))
	}
	most := 0
	for i := range uint32(4 * nLive) {
		require.NotNil(t, begin(live+nLive+i, gen-1), "an earlier Fabric in e3's slot")
		most = max(most, len(ws.streams))
	}
	require.LessOrEqual(t, most, 2*(nLive+1), "streams held (with the DCI's own)")
	requireLiveStreams(t, ws, live, nLive, gen)
	require.NotNil(t, ws.streams[d.qp.QPN()], "the live DCI's stream")
}

// TestLinkIdleCPU: the engines of two linked Fabrics with nothing to do
// sleep shmDeepSleep at a time after shmDeepAfter, as a shared fabric's
// do, rather than waking every IdleSleep; a message after the idle
// period is still answered.
func TestLinkIdleCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("measures for a second")
	}
	e1, e2 := linkedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	connectTo(t, a, peerInfo{QPN: b.qp.QPN(), LID: lidOf(t, e2.c)}, 17, 7)
	connectTo(t, b, peerInfo{QPN: a.qp.QPN(), LID: lidOf(t, e1.c)}, 17, 7)
	b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(0)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("wake")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
	time.Sleep(2 * shmDeepAfter) // past the engines' short sleeps
	s1, s2, t0 := e1.f.Stats().EngineSleeps, e2.f.Stats().EngineSleeps, time.Now()
	time.Sleep(time.Second)
	wall := time.Since(t0)
	n1, n2 := e1.f.Stats().EngineSleeps-s1, e2.f.Stats().EngineSleeps-s2
	t.Logf("idle engines slept %d and %d times in %v", n1, n2, wall)
	// shmDeepSleep at a time is 250 sleeps a second; IdleSleep's 500 µs
	// would be 2000.
	most := uint64(wall / (2 * time.Millisecond))
	require.Less(t, n1, most, "the listening end's engine wakes too often")
	require.Less(t, n2, most, "the connecting end's engine wakes too often")
	// Still awake: a message after the idle second is answered.
	b.postRecv(dataSeg(64, e2.mr.LKey(), e2.addr(0)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("again")))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
}

// TestLinkFlushSlowReader: frames queued for a peer that takes a little at
// a time (a small socket buffer, read a few KiB at a time) arrive whole
// and in order while flush steps over what the socket took, moving the
// rest to the front of its array only now and then; the array stays
// within a few times the most that waited at once.
func TestLinkFlushSlowReader(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	defer func() { _ = unix.Close(fds[0]); _ = unix.Close(fds[1]) }()
	require.NoError(t, unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 4096))
	require.NoError(t, unix.SetNonblock(fds[1], true))
	l := &tcpLink{peers: map[int]*tcpPeer{}}
	p := &tcpPeer{fc: &fdConn{fd: fds[0]}}
	rng := mrand.New(mrand.NewPCG(7, 7))
	var sent, got []byte
	buf := make([]byte, 3000)
	read := func() {
		n, err := unix.Read(fds[1], buf)
		if err == nil {
			got = append(got, buf[:n]...)
		}
	}
	most := 0
	for i := 0; i < 2000; i++ {
		if len(p.out) < 1<<20 {
			frame := make([]byte, 1+rng.IntN(16<<10))
			for j := range frame {
				frame[j] = byte(rng.Uint32())
			}
			sent = append(sent, frame...)
			p.queued(append(p.out, frame...))
			most = max(most, len(p.out))
		}
		l.flush(p)
		require.False(t, p.dead)
		read()
	}
	for len(p.out) > 0 || len(got) < len(sent) {
		l.flush(p)
		read()
	}
	require.Equal(t, sent, got, "the bytes the peer read")
	require.LessOrEqual(t, cap(p.outBuf), 4*most+64<<10, "the array grew past a few times the backlog")
}

// TestLinkHelloOfAnotherSize: a hello of another size than this
// version's is refused as another protocol, and the listener's reason
// names its size; it said the peer spoke version 5 where this end
// speaks 5.
func TestLinkHelloOfAnotherSize(t *testing.T) {
	skipOnEmulatedCPU(t)
	e1 := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	st, _ := e1.f.Link()
	conn, err := net.Dial("tcp", st.Address)
	require.NoError(t, err)
	sc, err := sealed.Dial(conn, testLinkKey, sealed.FabricLink, 5*time.Second)
	require.NoError(t, err)
	defer sc.Close()
	require.NoError(t, sc.WriteFrame(hello(ctx.LinkLayerInfiniBand, 2)[:12]))
	b, err := sc.ReadFrame(tcpReplySize)
	require.NoError(t, err)
	require.Equal(t, byte(tcpBadVer), b[0])
	require.Eventually(t, func() bool { s, _ := e1.f.Link(); return s.Refused == 1 }, 5*time.Second, time.Millisecond)
	s, _ := e1.f.Link()
	require.ErrorIs(t, s.LastRefusal, ErrFabricVersion)
	require.ErrorIs(t, s.LastRefusal, ErrLinkRefused)
	require.Contains(t, s.LastRefusal.Error(), fmt.Sprintf("a hello of 12 bytes, this end's (link protocol version %d) has %d", tcpVersion, tcpHelloSize))
	require.NotContains(t, s.LastRefusal.Error(), fmt.Sprintf("version %d, this end %d", tcpVersion, tcpVersion))
}

// TestLinkDialerNamesListenersVersion: a listener that refuses a dialer's
// version names its own in the answer, and the dialer's error says both;
// a listener that leaves the field 0 (before it was sent) is still
// refused as one of another version.
func TestLinkDialerNamesListenersVersion(t *testing.T) {
	for _, c := range []struct {
		version uint16
		want    string
	}{
		{tcpVersion + 1, fmt.Sprintf("the listener speaks link protocol version %d, this end %d", tcpVersion+1, tcpVersion)},
		{0, fmt.Sprintf("the listener speaks another link protocol version than this end's %d", tcpVersion)},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		served := make(chan error, 1)
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				served <- err
				return
			}
			defer conn.Close()
			sc, err := sealed.Accept(conn, testLinkKey, sealed.FabricLink, 5*time.Second)
			if err != nil {
				served <- err
				return
			}
			if _, err := sc.ReadFrame(tcpHelloSize); err != nil {
				served <- err
				return
			}
			reply := make([]byte, tcpReplySize)
			reply[0] = tcpBadVer
			binary.BigEndian.PutUint16(reply[2:], c.version)
			served <- sc.WriteFrame(reply)
			_, _ = sc.ReadFrame(tcpReplySize) // until the dialer hangs up
		}()
		l, err := dialLink(t.Context(), ln.Addr().String(), endpoint.Security{Key: testLinkKey}, ctx.LinkLayerInfiniBand, 1)
		require.Nil(t, l)
		require.ErrorIs(t, err, ErrFabricVersion)
		require.ErrorIs(t, err, ErrLinkRefused)
		require.ErrorContains(t, err, c.want)
		require.NoError(t, <-served)
		require.NoError(t, ln.Close())
	}
}
