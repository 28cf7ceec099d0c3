package sim

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/sealed"
)

// linkPeer is a raw connecting end of a TCP link: it proves the key and
// says hello as a connecting Fabric does, takes the slot the listener
// hands it, then writes whatever frames it likes.
type linkPeer struct {
	conn net.Conn
	sc   sealed.Conn
	slot int
	qpn  uint32 // the first QPN of its slot's range
	mu   sync.Mutex
}

// linkDCTKey is the DC key of linkDCT's DCT.
const linkDCTKey = 0xfeed

// linkDCT returns a listening Fabric's env with a DCT of key linkDCTKey on
// an SRQ of 16 receives.
func linkDCT(t *testing.T) (*env, *testSRQ, *testQP) {
	t.Helper()
	e := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	srq := e.newSRQ(e.pd, 16, 1)
	return e, srq, e.dct(e.pd, srq, linkDCTKey)
}

// dialLinkPeer links a raw peer to the listening Fabric of e and waits
// until the listener has linked its slot.
func dialLinkPeer(t testing.TB, e *env) *linkPeer {
	t.Helper()
	st, ok := e.f.Link()
	require.True(t, ok)
	require.True(t, st.Listening)
	conn, err := net.Dial("tcp", st.Address)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	sc, err := sealed.Dial(conn, testLinkKey, sealed.FabricLink, 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, sc.WriteFrame(hello(e.f.opts.LinkLayer, 1)))
	b, err := sc.ReadFrame(tcpReplySize)
	require.NoError(t, err)
	require.Equal(t, byte(tcpOK), b[0])
	p := &linkPeer{conn: conn, sc: sc, slot: int(binary.BigEndian.Uint32(b[8:]))}
	p.qpn, _ = tcpQPNRange(p.slot)
	require.Eventually(t, func() bool {
		l := e.f.tcp
		l.mu.Lock()
		defer l.mu.Unlock()
		q := l.peers[p.slot]
		return q != nil && !q.dead
	}, 10*time.Second, time.Millisecond)
	return p
}

// linkMessage returns a link message: h, with its length set, then
// payload.
func linkMessage(h wireHdr, payload []byte) []byte {
	b := make([]byte, wireHdrSize+len(payload))
	h.Len = uint32(len(b))
	*(*wireHdr)(unsafe.Pointer(&b[0])) = h
	copy(b[wireHdrSize:], payload)
	return b
}

// send seals the messages and writes them in one write.
// peerLinked reports whether e's link holds p's connection, linked.
func peerLinked(e *env, p *linkPeer) bool {
	l := e.f.tcp
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.peers[p.slot]
	return q != nil && !q.dead
}

func (p *linkPeer) send(msgs ...[]byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []byte
	for _, m := range msgs {
		var err error
		if out, err = p.sc.Seal(out, m); err != nil {
			return err
		}
	}
	_, err := p.conn.Write(out)
	return err
}

// receive reads the next message the listener sends, past its
// announcements of the linked slots.
func (p *linkPeer) receive() (wireHdr, []byte, error) {
	for {
		b, err := p.sc.ReadFrame(wireHdrSize + wireMaxPayload)
		if err != nil {
			return wireHdr{}, nil, err
		}
		if len(b) < wireHdrSize {
			return wireHdr{}, nil, io.ErrUnexpectedEOF
		}
		var h wireHdr
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&h)), wireHdrSize), b)
		if h.Kind != tcpMembers {
			return h, b[wireHdrSize:], nil
		}
	}
}

// TestLinkDrainBounded: a linked peer that keeps sending (here, repeats
// of a READ the victim's DCT executed, each answered with 2 KiB read
// anew, so that the victim has more to do per message than the peer)
// cannot hold the victim's engine, and with it the Fabric's lock and
// Close, for as long as it sends: a drain takes a bounded number of bytes
// from each peer, and the rest waits for the next round. Before, a drain
// read a peer until its socket was empty.
func TestLinkDrainBounded(t *testing.T) {
	skipOnEmulatedCPU(t)
	e, _, dct := linkDCT(t)
	const key = linkDCTKey
	p := dialLinkPeer(t, e)
	read := func(psn uint32) []byte {
		return linkMessage(wireHdr{Kind: wireRequest, Op: uint8(prm.OpRdmaRead), DstQPN: dct.qp.QPN(), SrcQPN: p.qpn,
			PSN: psn, Epoch: 1, Flags: wireFirst, DCKey: key, RAddr: e.addr(0), RKey: e.mr.RKey(),
			Total: 2048, Seg: 2048, DLID: lidOf(t, e.c)}, nil)
	}
	require.NoError(t, p.send(read(100))) // executed; PSN 100 is a repeat from now on

	var answered sync.WaitGroup
	var got atomic.Int64
	answered.Add(1)
	go func() { // the answers are read and dropped, so that none waits
		defer answered.Done()
		b := make([]byte, 256<<10)
		for {
			n, err := p.conn.Read(b)
			got.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		batch := make([][]byte, 256)
		for i := range batch {
			batch[i] = read(100)
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-stop:
				return
			default:
			}
			if p.send(batch...) != nil {
				return
			}
		}
	}()
	defer func() {
		close(stop)
		_ = p.conn.Close()
		<-stopped
		answered.Wait()
	}()
	for got.Load() < 16<<20 { // the victim serves the repeats (Stats would wait for its lock)
		time.Sleep(time.Millisecond)
	}

	closed := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(closed)
		_ = e.f.Close()
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("Close still waits for the engine after %v: a peer that keeps sending holds it", time.Since(start))
	}
}

// TestLinkRepeatLongerThanASegment: a linked peer that asks again for a
// READ segment the victim's DCT executed, longer than any segment
// (wireSegMax) and than a link message may be, gets no answer. Before,
// the victim answered it whole; on a connecting end the answer went to
// the listener, which refuses a frame that long and dropped the victim's
// link: one member could cut off another.
func TestLinkRepeatLongerThanASegment(t *testing.T) {
	skipOnEmulatedCPU(t)
	hub := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	st, _ := hub.f.Link()
	victim := newEnv(t, Options{Mode: Engine, Link: st.Address, LinkKey: testLinkKey})
	p := dialLinkPeer(t, hub)
	require.Eventually(t, func() bool { s, _ := victim.f.Link(); return s.Members == 3 }, 10*time.Second, time.Millisecond)

	const size = uint32(wireMaxPayload + 1<<20)
	buf, err := ctx.AllocBuffer(int(size), ctx.BufferOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	mr, err := victim.pd.RegisterMemory(buf.Bytes(), allAccess)
	require.NoError(t, err)
	srq := victim.newSRQ(victim.pd, 16, 1)
	const key = 0xfeed
	dct := victim.dct(victim.pd, srq, key)
	read := func(n uint32) []byte {
		return linkMessage(wireHdr{Kind: wireRequest, Op: uint8(prm.OpRdmaRead), DstQPN: dct.qp.QPN(), SrcQPN: p.qpn,
			PSN: 100, Epoch: 1, Flags: wireFirst, DCKey: key, RAddr: uint64(mr.Addr()), RKey: mr.RKey(),
			Total: n, Seg: n, DLID: lidOf(t, victim.c)}, nil)
	}
	// Executed once, then asked for again: at the length of a whole
	// region, then at its own.
	require.NoError(t, p.send(read(8), read(size), read(8)))
	require.NoError(t, p.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	for i := 0; i < 2; i++ {
		h, _, err := p.receive()
		s, _ := victim.f.Link()
		require.NoError(t, err, "answer %d (the victim's link: %+v)", i, s)
		require.Equal(t, uint8(wireResponse), h.Kind)
		require.Equal(t, uint32(8), h.Seg, "answer %d", i)
	}
	s, _ := victim.f.Link()
	require.Equal(t, 1, s.Peers, "the victim is still linked")
	require.Equal(t, 3, s.Members)
}

// TestLinkAnnouncementsBounded: what waits for a peer that reads nothing
// stays within tcpOutLimit however often the set of linked slots changes
// (here, the messages another peer has the listener forward to it fill
// its buffer, then ends link and leave): the listener's announcement waits
// for room, and the peer, once it reads, gets the set as it is then.
// Before, each change appended an announcement past the limit, so that
// a peer that stopped reading and another that linked and left over and
// over grew the listener's memory without bound.
func TestLinkAnnouncementsBounded(t *testing.T) {
	skipOnEmulatedCPU(t)
	e := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	stalled := dialLinkPeer(t, e)
	a := dialLinkPeer(t, e)
	toStalled := func(n int) []byte {
		return linkMessage(wireHdr{Kind: wireUD, Op: uint8(prm.OpSend), DstQPN: stalled.qpn, SrcQPN: a.qpn}, make([]byte, n))
	}
	waiting := func() int {
		e.f.mu.Lock()
		defer e.f.mu.Unlock()
		return len(e.f.tcp.peers[stalled.slot].out)
	}
	// Messages of 1 MiB, then 64 KiB, then bare headers, each size until
	// the victim refuses one: the buffer is then full to a header.
	refused := uint64(0)
	for _, size := range []int{1 << 20, 64 << 10, 0} {
		m := toStalled(size)
		batch := [][]byte{m, m, m, m, m, m, m, m}
		for {
			s, _ := e.f.Link()
			if s.NotForwarded > refused {
				refused = s.NotForwarded
				break
			}
			require.NoError(t, a.send(batch...))
			time.Sleep(time.Millisecond)
		}
	}
	full := waiting()

	for i := 0; i < 5; i++ { // ends that link and leave
		x := dialLinkPeer(t, e)
		_ = x.conn.Close()
		require.Eventually(t, func() bool { s, _ := e.f.Link(); return s.Peers == 2 }, 10*time.Second, time.Millisecond)
	}
	c := dialLinkPeer(t, e)
	time.Sleep(50 * time.Millisecond) // rounds in which the announcement finds no room
	// One frame's sealing (header and tag) may pass the limit, as for
	// any message placed just below it.
	require.LessOrEqual(t, waiting(), tcpOutLimit+sealed.HeaderSize+32, "bytes waiting for a peer that reads nothing (%d when full)", full)

	require.NoError(t, stalled.conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	for {
		b, err := stalled.sc.ReadFrame(wireHdrSize + wireMaxPayload)
		require.NoError(t, err, "the stalled peer, reading again, never learns of slot %d", c.slot)
		var h wireHdr
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&h)), wireHdrSize), b)
		if h.Kind == tcpMembers && binary.NativeEndian.Uint64(b[wireHdrSize:])&slotBit(c.slot) != 0 {
			break
		}
	}
}

// TestLinkLongSendTakesNoReceiveForAByte: a linked peer holding a DCT's key
// that begins a long SEND on many streams, a byte each, makes the DCT take
// no receive: a segment before a message's last is wireSegMax bytes from
// any requester of this version, so a shorter one is ignored. Before, each such first segment set aside the whole
// message's length (here 1 MiB a byte, 64 MiB for 64 bytes; up to a 1 GiB
// receive's length on each of the peer's 64 Ki QPNs).
func TestLinkLongSendTakesNoReceiveForAByte(t *testing.T) {
	skipOnEmulatedCPU(t)
	e, srq, dct := linkDCT(t)
	const key = linkDCTKey
	srq.post(dataSeg(1<<20, e.mr.LKey(), e.addr(0)))
	p := dialLinkPeer(t, e)
	const streams = 64
	msgs := make([][]byte, 0, streams+1)
	for i := uint32(0); i < streams; i++ {
		msgs = append(msgs, linkMessage(wireHdr{Kind: wireRequest, Op: uint8(prm.OpSend), DstQPN: dct.qp.QPN(), SrcQPN: p.qpn + i,
			Epoch: 1, Flags: wireFirst, DCKey: key, Total: 1 << 20, Seg: 1, DLID: lidOf(t, e.c)}, []byte{1}))
	}
	// Then a READ, whose answer says that the victim has handled all of
	// them.
	msgs = append(msgs, linkMessage(wireHdr{Kind: wireRequest, Op: uint8(prm.OpRdmaRead), DstQPN: dct.qp.QPN(), SrcQPN: p.qpn + streams,
		Epoch: 1, Flags: wireFirst, DCKey: key, RAddr: e.addr(0), RKey: e.mr.RKey(), Total: 8, Seg: 8, DLID: lidOf(t, e.c)}, nil))
	require.NoError(t, p.send(msgs...))
	require.NoError(t, p.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	for {
		h, _, err := p.receive()
		require.NoError(t, err)
		if h.Op == uint8(prm.OpRdmaRead) {
			break
		}
	}
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	tq := e.f.qpByNum(dct.qp.QPN())
	require.Zero(t, tq.wire.heldN, "receives held for %d bytes of SENDs begun", streams)
	require.Equal(t, 1, e.f.postedRecvs(tq), "the receive is still posted")
}

// TestLinkMisusedConnections: a linked peer that announces a frame longer
// than any message, one that sends half a frame and stalls, one that sends
// half a frame and hangs up, and a connection that hangs up in the middle
// of the authentication: the listener ends the first and the third link,
// keeps the stalled one without waiting for it, refuses the last, and
// still serves a well-behaved peer and closes at once.
func TestLinkMisusedConnections(t *testing.T) {
	skipOnEmulatedCPU(t)
	e := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	linked := func(p *linkPeer) bool { return peerLinked(e, p) }
	frame := func(p *linkPeer) []byte {
		b, err := p.sc.Seal(nil, linkMessage(wireHdr{Kind: wireUD, DstQPN: 0x100, SrcQPN: p.qpn}, nil))
		require.NoError(t, err)
		return b
	}

	huge := dialLinkPeer(t, e)
	b := frame(huge)
	binary.BigEndian.PutUint32(b[8:], 1<<30)
	_, err := huge.conn.Write(b[:sealed.HeaderSize])
	require.NoError(t, err)

	stalled := dialLinkPeer(t, e)
	b = frame(stalled)
	_, err = stalled.conn.Write(b[:len(b)/2])
	require.NoError(t, err)

	gone := dialLinkPeer(t, e)
	b = frame(gone)
	_, err = gone.conn.Write(b[:len(b)/2])
	require.NoError(t, err)
	require.NoError(t, gone.conn.Close())

	st, _ := e.f.Link()
	half, err := net.Dial("tcp", st.Address)
	require.NoError(t, err)
	_, err = half.Write([]byte{0x4d, 0x58, 0x4d, 0x53, 0, 2, 1, 0}) // half a mesh hello header
	require.NoError(t, err)
	require.NoError(t, half.Close())

	require.Eventually(t, func() bool { return !linked(huge) && !linked(gone) }, 10*time.Second, time.Millisecond,
		"the links that sent a frame too long or hung up mid-frame are ended")
	require.Eventually(t, func() bool { s, _ := e.f.Link(); return s.Refused == st.Refused+1 }, 10*time.Second, time.Millisecond,
		"the connection that hung up mid-authentication is refused")
	require.True(t, linked(stalled), "a peer stalled mid-frame stays linked")

	// A well-behaved peer is served: a READ of the victim's DCT.
	srq := e.newSRQ(e.pd, 16, 1)
	const key = 0xfeed
	dct := e.dct(e.pd, srq, key)
	copy(e.mem(0, 8), "answered")
	good := dialLinkPeer(t, e)
	require.NoError(t, good.send(linkMessage(wireHdr{Kind: wireRequest, Op: uint8(prm.OpRdmaRead), DstQPN: dct.qp.QPN(), SrcQPN: good.qpn,
		Epoch: 1, Flags: wireFirst, DCKey: key, RAddr: e.addr(0), RKey: e.mr.RKey(), Total: 8, Seg: 8, DLID: lidOf(t, e.c)}, nil)))
	require.NoError(t, good.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	h, payload, err := good.receive()
	require.NoError(t, err)
	require.Equal(t, uint8(wireAck), h.Status)
	require.Equal(t, []byte("answered"), payload)

	start := time.Now()
	require.NoError(t, e.f.Close())
	require.Less(t, time.Since(start), 2*time.Second, "Close waited for a stalled peer")
}

// TestLinkLongSendsTakeOneReceiveEach: a linked peer holding a DCT's key
// that begins a long SEND on many streams, a whole first segment each,
// with one receive posted, gets one message taken into it and an RNR NAK
// for every other: a NIC takes a receive for each message at its first
// packet, and there is one. Before, each stream set aside the message's
// length against the same receive (32 streams: 32 times its length, for
// 32 MiB sent). Once that message is delivered and a receive posted, the
// next stream's first segment is taken.
func TestLinkLongSendsTakeOneReceiveEach(t *testing.T) {
	skipOnEmulatedCPU(t)
	e, srq, dct := linkDCT(t)
	const key = linkDCTKey
	const total = 2 * wireSegMax
	recv := linkRecv(t, e, total)
	srq.post(recv)
	p := dialLinkPeer(t, e)
	lid := lidOf(t, e.c)
	seg := make([]byte, wireSegMax)
	first := func(i uint32) []byte {
		return linkMessage(wireHdr{Kind: wireRequest, Op: uint8(prm.OpSend), DstQPN: dct.qp.QPN(), SrcQPN: p.qpn + i,
			Epoch: 1, Flags: wireFirst, DCKey: key, Total: total, Seg: wireSegMax, DLID: lid}, seg)
	}
	answers := func(n int) (acks, rnrs int) {
		t.Helper()
		require.NoError(t, p.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		for acks+rnrs < n {
			h, _, err := p.receive()
			require.NoError(t, err)
			switch h.Status {
			case wireAck:
				acks++
			case wireRNR:
				rnrs++
			default:
				t.Fatalf("answer %+v", h)
			}
		}
		return acks, rnrs
	}
	held := func() int {
		e.f.mu.Lock()
		defer e.f.mu.Unlock()
		return e.f.qpByNum(dct.qp.QPN()).wire.heldN
	}
	const streams = 32
	msgs := make([][]byte, 0, streams)
	for i := uint32(0); i < streams; i++ {
		msgs = append(msgs, first(i))
	}
	require.NoError(t, p.send(msgs...))
	acks, rnrs := answers(streams)
	require.Equal(t, 1, acks, "first segments taken")
	require.Equal(t, streams-1, rnrs, "first segments answered with RNR NAK")
	require.Equal(t, 1, held(), "receives held")

	// Stream 0's last segment delivers its message; with a receive
	// posted again, stream 1's first segment is taken.
	require.NoError(t, p.send(linkMessage(wireHdr{Kind: wireRequest, Op: uint8(prm.OpSend), DstQPN: dct.qp.QPN(), SrcQPN: p.qpn,
		Epoch: 1, PSN: 1, DCKey: key, Off: wireSegMax, Total: total, Seg: wireSegMax, DLID: lid}, seg)))
	acks, _ = answers(1)
	require.Equal(t, 1, acks)
	require.Equal(t, 0, held())
	c := waitCQE(t, dct.rcq, 5*time.Second)
	require.Equal(t, prm.CQERespSend, c.op, "syndrome %v", c.synd)
	require.Equal(t, uint32(total), c.byteCnt)
	require.Equal(t, p.qpn, c.srcQPN)
	srq.post(recv)
	require.NoError(t, p.send(first(1)))
	acks, _ = answers(1)
	require.Equal(t, 1, acks, "a first segment with a receive for it")
	require.Equal(t, 1, held())
}

// linkRecv returns the scatter entry of a receive of total bytes, in a
// buffer of its own registered in e's PD until the test ends.
func linkRecv(t *testing.T, e *env, total uint32) []byte {
	t.Helper()
	buf, err := ctx.AllocBuffer(int(total), ctx.BufferOptions{Guard: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	mr, err := e.pd.RegisterBuffer(buf, allAccess)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mr.Close() })
	return dataSeg(total, mr.LKey(), uint64(mr.Addr()))
}

// TestLinkLongSendOfGonePeerFlushesReceive: a DCI whose process is gone in
// the middle of a long SEND leaves the receive its first segment took
// held by its stream at the DCT; the DCT finds the process gone (before
// its engine sleeps, or every shmGoneRounds rounds), drops the stream and
// completes that receive with WR_FLUSH_ERR, so that the program gets it
// back. Before, the message stayed set aside and counted against the
// receives, and only a later first segment that found every receive
// counted dropped it.
func TestLinkLongSendOfGonePeerFlushesReceive(t *testing.T) {
	skipOnEmulatedCPU(t)
	e, srq, dct := linkDCT(t)
	const key = linkDCTKey
	const total = 2 * wireSegMax
	recv := linkRecv(t, e, total)
	idx := srq.post(recv)
	lid := lidOf(t, e.c)
	seg := make([]byte, wireSegMax)
	first := func(p *linkPeer) {
		t.Helper()
		require.NoError(t, p.send(linkMessage(wireHdr{Kind: wireRequest, Op: uint8(prm.OpSend), DstQPN: dct.qp.QPN(), SrcQPN: p.qpn,
			Epoch: 1, Flags: wireFirst, DCKey: key, Total: total, Seg: wireSegMax, DLID: lid}, seg)))
		require.NoError(t, p.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		h, _, err := p.receive()
		require.NoError(t, err)
		require.Equal(t, uint8(wireAck), h.Status, "the first segment is taken: %+v", h)
	}
	streams := func() (n, held int) {
		e.f.mu.Lock()
		defer e.f.mu.Unlock()
		ws := &e.f.qpByNum(dct.qp.QPN()).wire
		return len(ws.streams), ws.heldN
	}

	gone := dialLinkPeer(t, e)
	first(gone)
	_, held := streams()
	require.Equal(t, 1, held)
	require.NoError(t, gone.conn.Close())
	c := waitCQE(t, dct.rcq, 10*time.Second)
	require.Equal(t, prm.CQERespErr, c.op)
	require.Equal(t, prm.SyndromeWRFlush, c.synd, "the receive of the gone DCI's message")
	require.Equal(t, idx, c.counter)
	require.Equal(t, srq.d.SRQN, c.srqn)
	n, held := streams()
	require.Zero(t, held, "the gone DCI's receive is no longer held")
	require.Zero(t, n, "the gone DCI's stream is dropped")

	srq.free(idx)
	srq.post(recv)
	p := dialLinkPeer(t, e)
	require.NotEqual(t, gone.qpn, p.qpn)
	first(p)
	n, held = streams()
	require.Equal(t, 1, held)
	require.Equal(t, 1, n)
}

// TestLinkUDLongerThanMTUDropped: a linked peer that sends a UD QP a
// datagram longer than the port's MTU, which no requester of this
// version sends (a UD send is at most the MTU) and no port of a NIC
// delivers, has it dropped as a port drops an oversized packet: the QP,
// whose receives hold a whole datagram of the MTU, stays ready and takes
// the next datagram. Before, the datagram reached a receive too small
// for it, which failed with a local length error and moved the QP to
// error: any peer that knew a UD QP's number and qkey could end it.
func TestLinkUDLongerThanMTUDropped(t *testing.T) {
	skipOnEmulatedCPU(t)
	e := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	const qkey = 0x1111
	ud := e.udQP(e.pd, qkey, qpOpts{})
	mtu := portMTU.Bytes()
	for i := 0; i < 2; i++ {
		ud.postRecv(dataSeg(uint32(prm.GRHSize+mtu), e.mr.LKey(), e.addr(i*8192)))
	}
	p := dialLinkPeer(t, e)
	lid := lidOf(t, e.c)
	datagram := func(n int) []byte {
		return linkMessage(wireHdr{Kind: wireUD, Op: uint8(prm.OpSend), DstQPN: ud.qp.QPN(), SrcQPN: p.qpn,
			RKey: qkey, Total: uint32(n), DLID: lid}, make([]byte, n))
	}
	dropped := e.f.Stats().UDDropped
	require.NoError(t, p.send(datagram(mtu+1), datagram(16)))
	c := waitCQE(t, ud.rcq, 5*time.Second)
	require.Equal(t, prm.CQERespSend, c.op, "syndrome %v", c.synd)
	require.Equal(t, uint32(prm.GRHSize+16), c.byteCnt, "the datagram longer than the MTU was delivered")
	require.Equal(t, dropped+1, e.f.Stats().UDDropped)
	st, err := ud.qp.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTS, st)
	require.True(t, peerLinked(e, p))
}

// TestLinkHubDropsForeignLIDAndGID: a linked peer speaks for its own
// ports only, as for its own QPs. A message from a QPN of its slot whose
// source LID, or a datagram whose GRH's source GID, is that of an HCA in
// another slot (here the listener's own) is dropped and counted as not
// forwarded: the receiver would otherwise report it from that HCA, and
// an answer built from the completion (ibv_create_ah_from_wc) would name
// it. Before, only the source QPN was checked.
func TestLinkHubDropsForeignLIDAndGID(t *testing.T) {
	skipOnEmulatedCPU(t)
	e := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	const qkey = 0x3333
	ud := e.udQP(e.pd, qkey, qpOpts{})
	for i := 0; i < 4; i++ {
		ud.postRecv(dataSeg(256, e.mr.LKey(), e.addr(i*256)))
	}
	p := dialLinkPeer(t, e)
	lid := lidOf(t, e.c)
	gids, err := e.c.QueryGIDs(1)
	require.NoError(t, err)
	victimGID := gids[0].GID
	own := newHCA((p.slot-tcpSlotBase)*tcpMaxDevices, e.f.opts.LinkLayer)
	datagram := func(slid uint16, sgid *ctx.GID, text string) []byte {
		h := wireHdr{Kind: wireUD, Op: uint8(prm.OpSend), DstQPN: ud.qp.QPN(), SrcQPN: p.qpn + 7,
			RKey: qkey, Total: uint32(len(text)), DLID: lid, SrcLID: slid}
		body := []byte(text)
		if sgid != nil {
			h.GRH, h.DGID = 1, victimGID
			grh := make([]byte, prm.GRHSize)
			grh[0] = 6 << 4
			grh[6] = prm.GRHNextHeaderIBA
			copy(grh[8:24], sgid[:])
			copy(grh[24:40], victimGID[:])
			body = append(grh, body...)
		}
		return linkMessage(h, body)
	}
	ownGID := own.gids[0].GID
	require.NoError(t, p.send(
		datagram(lid, nil, "the listener's LID"),
		datagram(own.lid, &victimGID, "the listener's GID"),
		datagram(own.lid, &ownGID, "genuine"),
	))
	c := waitCQE(t, ud.rcq, 5*time.Second)
	require.Equal(t, prm.CQERespSend, c.op, "syndrome %v", c.synd)
	require.Equal(t, own.lid, c.slid, "a datagram in another HCA's name was delivered")
	require.Equal(t, []byte("genuine"), e.mem(prm.GRHSize, 7))
	time.Sleep(10 * time.Millisecond)
	require.Empty(t, ud.rcq.drain(), "the datagrams in another's name never arrive")
	st, _ := e.f.Link()
	require.Equal(t, uint64(2), st.NotForwarded)
	require.True(t, peerLinked(e, p))
}

// TestLinkForeignSourceForms: what a Fabric of this version sends from
// any HCA of its slot, by any GID index and either link layer, names its
// own slot (the listener passes it on); the same from an HCA of another
// slot names that one. An answer's and a RoCE port's LID 0, and a GID of
// no HCA (an AV's SGID index past the table), name none.
func TestLinkForeignSourceForms(t *testing.T) {
	const slot = tcpSlotBase + 5
	for _, link := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		for _, c := range []struct {
			hca     int
			foreign bool
		}{
			{(slot - tcpSlotBase) * tcpMaxDevices, false},
			{(slot-tcpSlotBase)*tcpMaxDevices + tcpMaxDevices - 1, false},
			{(slot - tcpSlotBase - 1) * tcpMaxDevices, true},
			{(slot-tcpSlotBase)*tcpMaxDevices + tcpMaxDevices, true},
			{0, true},
		} {
			from := newHCA(c.hca, link)
			to := newHCA((slot-tcpSlotBase+1)*tcpMaxDevices, link)
			for idx := range from.gids {
				a := avInfo{grh: true, dlid: to.lid, dgid: to.gids[idx].GID, sgidIdx: uint8(idx), hopLimit: 64}
				grh := buildGRH(from, a, from.roceL3(uint8(idx)), 16)
				h := wireHdr{Kind: wireUD, GRH: 1, SrcLID: from.lid, L3: from.roceL3(uint8(idx))}
				require.Equal(t, c.foreign, tcpForeignSource(&h, append(grh, make([]byte, 16)...), slot),
					"%v: HCA %d, GID index %d", link, c.hca, idx)
			}
			h := wireHdr{Kind: wireRequest, SrcLID: from.lid}
			require.Equal(t, c.foreign && link == ctx.LinkLayerInfiniBand, tcpForeignSource(&h, nil, slot), "%v: HCA %d, RC", link, c.hca)
		}
		from := newHCA((slot-tcpSlotBase)*tcpMaxDevices, link)
		grh := buildGRH(from, avInfo{grh: true, sgidIdx: 200}, prm.CQERoCEL3GRH, 16)
		h := wireHdr{Kind: wireUD, GRH: 1}
		require.False(t, tcpForeignSource(&h, grh, slot), "%v: no SGID", link)
		h = wireHdr{Kind: wireResponse}
		require.False(t, tcpForeignSource(&h, nil, slot), "%v: an answer", link)
	}
}
