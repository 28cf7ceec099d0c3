package sim

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/sealed"
)

// linkInboundWorld is inboundWorld over a TCP link: the victim's Fabric
// listens, and the hostile is a raw connecting end (linkPeer) that seals
// and writes what it likes; or (newLinkHubWorld) the victim connects, and
// the hostile is a raw listener. The victim's RC QP is connected to the
// first QPN of the hostile's slot.
type linkInboundWorld struct {
	*inboundWorld
	peer *linkPeer
	hub  bool // the hostile is the listener
}

func newLinkInboundWorld(t *testing.T) *linkInboundWorld {
	skipOnEmulatedCPU(t)
	e2 := newEnv(t, Options{Mode: Engine, Link: "listen:127.0.0.1:0", LinkKey: testLinkKey})
	e2.allowViolations = true
	w := &inboundWorld{victim: e2, dcKey: 0xfeed, qkey: 0x1111, lid: lidOf(t, e2.c)}
	p := dialLinkPeer(t, e2)
	w.hostileQPN = p.qpn
	w.build(t, uint16((p.slot-tcpSlotBase)*tcpMaxDevices+1))
	return &linkInboundWorld{inboundWorld: w, peer: p}
}

// newLinkHubWorld is a linkInboundWorld whose victim connects to the
// hostile: a raw listener that authenticates, hands it slot
// tcpSlotBase+1 and then writes what it likes, in its own name or in any
// other slot's, as a listener forwards.
func newLinkHubWorld(t *testing.T) *linkInboundWorld {
	skipOnEmulatedCPU(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	type accepted struct {
		p   *linkPeer
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			ch <- accepted{err: err}
			return
		}
		p := &linkPeer{conn: conn, slot: tcpSlotBase}
		if p.sc, err = sealed.Accept(conn, testLinkKey, sealed.FabricLink, 5*time.Second); err == nil {
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err = p.sc.ReadFrame(tcpHelloSize); err == nil {
				reply := make([]byte, tcpReplySize)
				binary.BigEndian.PutUint32(reply[4:], tcpSlotBase)
				binary.BigEndian.PutUint32(reply[8:], tcpSlotBase+1)
				binary.BigEndian.PutUint64(reply[12:], slotBit(tcpSlotBase)|slotBit(tcpSlotBase+1))
				reply[20] = 1 // the hostile's HCAs
				err = p.sc.WriteFrame(reply)
			}
			_ = conn.SetDeadline(time.Time{})
		}
		ch <- accepted{p: p, err: err}
	}()
	e2 := newEnv(t, Options{Mode: Engine, Link: ln.Addr().String(), LinkKey: testLinkKey})
	e2.allowViolations = true
	a := <-ch
	if a.p != nil {
		t.Cleanup(func() { _ = a.p.conn.Close() })
	}
	require.NoError(t, a.err)
	a.p.qpn, _ = tcpQPNRange(tcpSlotBase)
	w := &inboundWorld{victim: e2, dcKey: 0xfeed, qkey: 0x1111, lid: lidOf(t, e2.c), hostileQPN: a.p.qpn}
	w.build(t, 1) // the LID of the hostile's first HCA
	return &linkInboundWorld{inboundWorld: w, peer: a.p, hub: true}
}

// linked returns the victim's end of the hostile's connection, nil once
// the victim has dropped it.
func (w *linkInboundWorld) linked() *tcpPeer {
	l := w.victim.f.tcp
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.peers[w.peer.slot]; p != nil && !p.dead {
		return p
	}
	return nil
}

// pending reports whether bytes of the hostile wait for the victim: in
// its socket, or received and not a whole frame yet.
func (w *linkInboundWorld) pending() bool {
	f := w.victim.f
	f.mu.Lock()
	defer f.mu.Unlock()
	p := w.linked()
	if p == nil {
		return false
	}
	n, err := unix.IoctlGetInt(p.fc.fd, unix.SIOCINQ)
	return err != nil || n > 0 || len(p.in) > 0
}

// FuzzLinkInbound: a linked peer of a TCP link sends arbitrary messages,
// sealed, to the victim (the listener, or an end connected to the hostile
// listener, as the first byte says), with the fields that pass the checks
// (QPNs, PSNs, keys, the region's address) mixed in as FuzzSharedInbound
// mixes them, some with a length that is not the message's, a byte of the
// sealed frame altered, or the frame written in two parts with rounds
// between. The victim must not panic, must not write a byte outside its
// registered page, must end the link at the first frame that is not
// sealed by the peer or not a message of the link (the listener's
// announcement of the linked slots is one on a connecting end), and only
// then, and otherwise must have read everything.
func FuzzLinkInbound(f *testing.F) {
	seed := func(hub, flags byte, sel uint64, rest ...byte) []byte {
		b := binary.LittleEndian.AppendUint64([]byte{hub, flags}, sel)
		return append(b, rest...)
	}
	for hub := byte(0); hub < 2; hub++ {
		// A SEND to the RC QP, a WRITE near its region, a response to
		// the victim's READ, a DCT request with the key, a UD datagram;
		// a message with another length, an altered frame, a frame in
		// two parts, the listener's own kind of message.
		f.Add(seed(hub, 0, 0, byte(prm.OpSend), 0, 0))
		f.Add(seed(hub, 0, 0, byte(prm.OpRdmaWrite), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf0, 0x0f, 0x40, 0))
		f.Add(seed(hub, 0, 1|1<<6, byte(prm.OpRdmaRead), wireAck, 0))
		f.Add(seed(hub, 0, 1<<2, byte(prm.OpRdmaWrite), 0, 0))
		f.Add(seed(hub, 0, 2|2<<2, byte(prm.OpSend), 0, 0))
		f.Add(seed(hub, 0x80, 0, byte(prm.OpSend), 0, 0))
		f.Add(seed(hub, 0x40, 0, byte(prm.OpSend), 0, 0))
		f.Add(seed(hub, 0x21, 0, byte(prm.OpRdmaWrite), 0, 0))
		f.Add(seed(hub, 0, 3, tcpMembers, byte(prm.OpSend), 0, 0))
		f.Add(seed(hub, 0xff, 0xffffffffffffffff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := &fuzzReader{b: in}
		var w *linkInboundWorld
		if r.u8()&1 == 0 {
			w = newLinkInboundWorld(t)
		} else {
			w = newLinkHubWorld(t)
		}
		// bad: a frame the victim must end the link at; unsure: one
		// whose length field was altered, which the victim may wait
		// on for ever (a peer stalled mid-frame).
		bad, unsure := false, false
		for i := 0; i < 8 && len(r.b) > 0 && !bad && !unsure; i++ {
			flags := r.u8()
			h, n := w.record(r)
			rec := make([]byte, wireHdrSize+n)
			h.Len = uint32(len(rec))
			if flags&0x80 != 0 {
				h.Len = r.u32()
			}
			*(*wireHdr)(unsafe.Pointer(&rec[0])) = h
			for j := range rec[wireHdrSize:] {
				rec[wireHdrSize+j] = r.u8()
			}
			members := w.hub && h.Kind == tcpMembers && len(rec) == wireHdrSize+tcpMembersSize
			if int(h.Len) != len(rec) || h.Kind != wireRequest && h.Kind != wireResponse && h.Kind != wireUD && !members {
				bad = true
			}
			frame, err := w.peer.sc.Seal(nil, rec)
			require.NoError(t, err)
			if flags&0x40 != 0 {
				at := int(r.u16()) % len(frame)
				frame[at] ^= r.u8() | 1
				if at >= 8 && at < sealed.HeaderSize {
					unsure = true
				} else {
					bad = true
				}
			}
			split := len(frame)
			if flags&0x20 != 0 {
				split = int(r.u16()) % len(frame)
			}
			for _, part := range [][]byte{frame[:split], frame[split:]} {
				if len(part) == 0 {
					continue
				}
				if _, err := w.peer.conn.Write(part); err != nil {
					break // the victim hung up: the checks below say whether it should have
				}
				for j := 0; j < int(flags&3)+1; j++ {
					w.round()
				}
			}
		}
		for j := 0; j < 16 && w.pending(); j++ {
			w.round()
		}
		require.True(t, w.canariesIntact(), "the victim wrote outside its registered page")
		switch {
		case unsure:
		case bad:
			require.Nil(t, w.linked(), "the victim kept a link that sent a frame not sealed by it or not a message of the link")
		default:
			require.NotNil(t, w.linked(), "the victim ended a link that sent well-formed messages only")
			require.False(t, w.pending(), "bytes left unread")
		}
	})
}

// TestLinkInboundWorld: the messages FuzzLinkInbound builds from expected
// fields reach execution over the link, from a connecting end and from
// the listener, as TestSharedInboundWorld's do over a shared fabric.
func TestLinkInboundWorld(t *testing.T) {
	t.Run("listening victim", func(t *testing.T) { linkInboundWorldReached(t, newLinkInboundWorld(t)) })
	t.Run("connecting victim", func(t *testing.T) { linkInboundWorldReached(t, newLinkHubWorld(t)) })
}

func linkInboundWorldReached(t *testing.T, w *linkInboundWorld) {
	send := func(h wireHdr, payload []byte) {
		t.Helper()
		require.NoError(t, w.peer.send(linkMessage(h, payload)))
		for j := 0; j < 16 && w.pending(); j++ {
			w.round()
		}
		require.NotNil(t, w.linked())
	}
	zero := &fuzzReader{b: make([]byte, 8)} // every field as expected
	h, _ := w.record(zero)
	h.Op, h.Total, h.Seg, h.Off = uint8(prm.OpSend), 16, 16, 0
	send(h, []byte("sixteen bytes..."))
	c, ok := w.rc.rcq.poll()
	require.True(t, ok, "no receive CQE for the SEND")
	require.Equal(t, prm.CQERespSend, c.op)
	page := w.buf.Bytes()[4096:8192]
	require.Equal(t, "sixteen bytes...", string(page[:16]))

	h, _ = w.record(&fuzzReader{b: binary.LittleEndian.AppendUint64(nil, 1<<2)}) // the DCT
	h.Op, h.Total, h.Seg, h.Off, h.Flags, h.Epoch = uint8(prm.OpRdmaWrite), 8, 8, 0, wireFirst, 1
	h.RAddr = uint64(w.mr.Addr()) + 512
	send(h, []byte("dc write"))
	require.Equal(t, "dc write", string(page[512:520]))

	h, _ = w.record(&fuzzReader{b: binary.LittleEndian.AppendUint64(nil, 1|1<<6)}) // an answer to the victim's READ
	h.Op, h.Status, h.Total, h.Seg, h.Off, h.Flags = uint8(prm.OpRdmaRead), wireAck, 64, 64, 0, 0
	send(h, bytes.Repeat([]byte{0x5a}, 64))
	c, ok = w.rc.scq.poll()
	require.True(t, ok, "no send CQE for the READ its answer completes")
	require.Equal(t, prm.CQEReq, c.op)
	require.Equal(t, bytes.Repeat([]byte{0x5a}, 64), page[3072:3136])
	require.True(t, w.canariesIntact())
}
