package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// This file links the software HCAs of two processes, usually on two hosts,
// over TCP: the messages of the wire layer (wire.go, wire_ud.go) that a
// shared fabric carries in shared-memory rings travel here as frames over
// one TCP connection per pair of linked Fabrics. One Fabric listens; every
// Fabric that connects to it is given a slot of its own at link time, and
// with it a LID and QPN range no other end of the link uses. The two ends
// authenticate as channel's mesh does (endpoint.SealedConn: a pre-shared
// key proved by HMAC challenge-response before anything else is sent, every
// frame after it sealed). It is a test tool that lets a cluster without
// RDMA NICs run a program across hosts, not a transport for production:
// one request in flight per QP, every frame copied and sealed.

// EnvLink is the environment variable that links the default Fabric over
// TCP (see Options.Link): "listen:HOST:PORT" listens, "HOST:PORT" connects
// to a listening Fabric. It is read when the default Fabric opens its first
// device; when it is set, EnvFabric is not.
const EnvLink = "MLX5KIT_SIM_LINK"

// EnvLinkKey is the environment variable holding the pre-shared key of a
// TCP link (its bytes, at least endpoint.MinKeySize) when Options.LinkKey
// is empty.
const EnvLinkKey = "MLX5KIT_SIM_LINK_KEY"

// ErrLinkRefused is returned when the listening end of a TCP link refuses
// a connecting Fabric after authentication: it speaks another link
// protocol version, has another link layer, or has no slot left.
var ErrLinkRefused = errors.New("sim: TCP link refused")

const (
	// tcpVersion is the protocol version of the link: the frames carry the
	// wire header in this build's layout, so both ends must agree on it.
	tcpVersion = 1
	// The slots of a link: the listener takes tcpSlotBase, each connecting
	// Fabric one of the next. Their QPN ranges lie above those of a shared
	// fabric's slots.
	tcpSlotBase   = 128
	tcpSlots      = 64
	tcpSlotQPNs   = 1 << 16
	tcpMaxDevices = 64
	// tcpOutLimit bounds the bytes queued towards one peer: beyond it a
	// message is not placed, as in a full ring (the requester tries again).
	tcpOutLimit = 64 << 20
	tcpOutDepth = 4096
	// How long a connecting Fabric tries to reach the listener, and how
	// long the handshake may take.
	tcpDialWait      = 10 * time.Second
	tcpHandshakeWait = 10 * time.Second

	tcpHelloSize = 16
	tcpReplySize = 12

	// Reply statuses.
	tcpOK        = 0
	tcpBadVer    = 1
	tcpBadLayer  = 2
	tcpNoSlot    = 3
	tcpBadHeader = 4
)

// tcpQPNRange is the range of QPNs the Fabric in link slot s hands out.
func tcpQPNRange(s int) (first, limit uint32) {
	base := uint32(s+1) * tcpSlotQPNs
	return base + firstQPN, base + tcpSlotQPNs
}

// tcpQPNSlot returns the link slot whose range holds qpn, or -1.
func tcpQPNSlot(qpn uint32) int {
	s := int(qpn/tcpSlotQPNs) - 1
	if s < tcpSlotBase || s >= tcpSlotBase+tcpSlots {
		return -1
	}
	return s
}

// littleEndian reports whether this machine stores integers little end
// first (the wire header travels in native order).
func littleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// tcpLink is a Fabric's end of a TCP link.
type tcpLink struct {
	slot   int
	addr   string // the address listened on or connected to
	listen bool
	sec    endpoint.Security
	layer  ctx.LinkLayer
	ln     net.Listener
	wake   chan struct{}

	mu      sync.Mutex
	peers   map[int]*tcpPeer
	inbox   []tcpMsg
	next    int // the next slot to hand a connecting Fabric
	closed  bool
	refused int
	lastErr error
	wg      sync.WaitGroup
}

// tcpPeer is the other end of one connection.
type tcpPeer struct {
	slot   int
	conn   *endpoint.SealedConn
	out    chan []byte
	queued atomic.Int64
	done   chan struct{}
	once   sync.Once
}

// tcpMsg is a message received, waiting for the engine.
type tcpMsg struct {
	from int
	rec  []byte
}

// linkConfig returns the link the Fabric is to make and its key: the
// options, else (for the default Fabric) the environment.
func (f *Fabric) linkConfig() (addr string, key []byte) {
	addr, key = f.opts.Link, f.opts.LinkKey
	if addr == "" && f.fabricEnv {
		addr = os.Getenv(EnvLink)
	}
	if len(key) == 0 {
		key = []byte(os.Getenv(EnvLinkKey))
	}
	return addr, key
}

// joinLinkLocked makes the TCP link the options name (f.mu held, before
// any device is open): it listens or connects, then renumbers the HCAs and
// the QPN space into the slot the link gave this Fabric.
func (f *Fabric) joinLinkLocked(addr string, key []byte) error {
	fail := func(err error) error {
		f.shmErr = fmt.Errorf("link fabric over TCP (%s): %w", addr, err)
		return f.shmErr
	}
	switch {
	case f.opts.Mode != Engine:
		return fail(fmt.Errorf("a TCP link needs Engine mode: %w", ctx.ErrInvalidArgument))
	case f.opts.Fabric != "" && !f.fabricEnv:
		return fail(fmt.Errorf("Options.Fabric %q and Options.Link both set: a Fabric joins a shared fabric or a TCP link, not both: %w", f.opts.Fabric, ctx.ErrInvalidArgument))
	case len(f.hcas) > tcpMaxDevices:
		return fail(fmt.Errorf("%d devices, at most %d on a TCP link: %w", len(f.hcas), tcpMaxDevices, ctx.ErrInvalidArgument))
	case len(key) < endpoint.MinKeySize:
		return fail(fmt.Errorf("a TCP link needs a key of at least %d bytes (Options.LinkKey or $%s), got %d: %w",
			endpoint.MinKeySize, EnvLinkKey, len(key), endpoint.ErrBadKey))
	case f.closed:
		return fail(ctx.ErrClosed)
	}
	sec := endpoint.Security{Key: append([]byte(nil), key...)}
	var l *tcpLink
	var err error
	if a, ok := strings.CutPrefix(addr, "listen:"); ok {
		l, err = listenLink(a, sec, f.opts.LinkLayer)
	} else {
		l, err = dialLink(addr, sec, f.opts.LinkLayer)
	}
	if err != nil {
		return fail(err)
	}
	f.opts.Fabric = ""
	f.tcp = l
	f.tcpWake = l.wake
	for i := range f.hcas {
		h := newHCA((l.slot-tcpSlotBase)*tcpMaxDevices+i, f.opts.LinkLayer)
		h.index, h.name = i, fmt.Sprintf("sim%d", i)
		f.hcas[i] = h
	}
	first, limit := tcpQPNRange(l.slot)
	f.qpns = newNumberSpace(first, limit)
	return nil
}

func newTCPLink(slot int, addr string, sec endpoint.Security, layer ctx.LinkLayer) *tcpLink {
	return &tcpLink{slot: slot, addr: addr, sec: sec, layer: layer, wake: make(chan struct{}, 1), peers: map[int]*tcpPeer{}}
}

// listenLink listens on addr; connecting Fabrics are greeted in the
// background.
func listenLink(addr string, sec endpoint.Security, layer ctx.LinkLayer) (*tcpLink, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	l := newTCPLink(tcpSlotBase, ln.Addr().String(), sec, layer)
	l.listen, l.ln, l.next = true, ln, tcpSlotBase+1
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

func (l *tcpLink) acceptLoop() {
	defer l.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			l.mu.Lock()
			closed := l.closed
			l.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		l.wg.Add(1)
		go l.greet(conn)
	}
}

// hello is what a connecting Fabric tells the listener after
// authenticating: the link version, the wire header's size and byte order,
// and its link layer.
func hello(layer ctx.LinkLayer) []byte {
	b := make([]byte, tcpHelloSize)
	binary.BigEndian.PutUint16(b[0:], tcpVersion)
	binary.BigEndian.PutUint16(b[2:], uint16(wireHdrSize))
	b[4] = byte(boolBit(littleEndian(), 1))
	binary.BigEndian.PutUint32(b[8:], uint32(layer))
	return b
}

// greet authenticates a connecting Fabric, checks its hello and gives it
// a slot. A peer that fails is refused and the reason kept (Link).
func (l *tcpLink) greet(conn net.Conn) {
	defer l.wg.Done()
	refuse := func(err error) {
		_ = conn.Close()
		l.mu.Lock()
		l.refused++
		l.lastErr = fmt.Errorf("link from %v: %w", conn.RemoteAddr(), err)
		l.mu.Unlock()
	}
	sc, err := endpoint.AcceptSealed(conn, l.sec, tcpHandshakeWait)
	if err != nil {
		refuse(err)
		return
	}
	_ = conn.SetDeadline(time.Now().Add(tcpHandshakeWait))
	b, err := sc.ReadFrame(tcpHelloSize)
	if err != nil {
		refuse(fmt.Errorf("read hello: %w", err))
		return
	}
	status := byte(tcpOK)
	want := hello(l.layer)
	switch {
	case len(b) != tcpHelloSize || binary.BigEndian.Uint16(b) != tcpVersion:
		status = tcpBadVer
	case binary.BigEndian.Uint16(b[2:]) != uint16(wireHdrSize) || b[4] != want[4]:
		status = tcpBadHeader
	case binary.BigEndian.Uint32(b[8:]) != uint32(l.layer):
		status = tcpBadLayer
	}
	slot := -1
	var p *tcpPeer
	if status == tcpOK {
		l.mu.Lock()
		for i := 0; i < tcpSlots-1 && !l.closed; i++ {
			s := l.next
			l.next++
			if l.next >= tcpSlotBase+tcpSlots {
				l.next = tcpSlotBase + 1
			}
			if l.peers[s] == nil {
				slot = s
				break
			}
		}
		if slot < 0 {
			status = tcpNoSlot
		} else {
			p = newTCPPeer(slot, sc)
			l.peers[slot] = p
		}
		l.mu.Unlock()
	}
	reply := make([]byte, tcpReplySize)
	reply[0] = status
	binary.BigEndian.PutUint32(reply[4:], uint32(l.slot))
	binary.BigEndian.PutUint32(reply[8:], uint32(slot))
	err = sc.WriteFrame(reply)
	if status != tcpOK || err != nil {
		if p != nil {
			l.drop(p)
		}
		if err == nil {
			err = refusal(status, b)
		}
		refuse(err)
		return
	}
	_ = conn.SetDeadline(time.Time{})
	l.start(p)
}

// refusal is the error of a refused hello.
func refusal(status byte, hello []byte) error {
	switch status {
	case tcpBadVer:
		v := 0
		if len(hello) >= 2 {
			v = int(binary.BigEndian.Uint16(hello))
		}
		return fmt.Errorf("the connecting end speaks link protocol version %d, this end %d: %w: %w", v, tcpVersion, ErrLinkRefused, ErrFabricVersion)
	case tcpBadHeader:
		return fmt.Errorf("the two ends lay out the wire header differently (size or byte order; link protocol version %d): %w: %w", tcpVersion, ErrLinkRefused, ErrFabricVersion)
	case tcpBadLayer:
		return fmt.Errorf("the two ends have different link layers: %w: %w", ErrLinkRefused, ctx.ErrInvalidArgument)
	case tcpNoSlot:
		return fmt.Errorf("the listening Fabric has %d links already: %w", tcpSlots-1, ErrLinkRefused)
	}
	return fmt.Errorf("status %d: %w", status, ErrLinkRefused)
}

// dialLink connects to the Fabric listening at addr, retrying until it
// answers or tcpDialWait passes, and authenticates.
func dialLink(addr string, sec endpoint.Security, layer ctx.LinkLayer) (*tcpLink, error) {
	end := time.Now().Add(tcpDialWait)
	backoff := 10 * time.Millisecond
	var conn net.Conn
	for {
		var err error
		conn, err = net.DialTimeout("tcp", addr, time.Until(end))
		if err == nil {
			break
		}
		if time.Now().Add(backoff).After(end) {
			return nil, fmt.Errorf("connect (tried for %v): %w", tcpDialWait, err)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 250*time.Millisecond)
	}
	sc, err := endpoint.DialSealed(conn, sec, tcpHandshakeWait)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(tcpHandshakeWait))
	if err := sc.WriteFrame(hello(layer)); err != nil {
		_ = sc.Close()
		return nil, fmt.Errorf("send hello: %w", err)
	}
	b, err := sc.ReadFrame(tcpReplySize)
	if err != nil {
		_ = sc.Close()
		return nil, fmt.Errorf("read the listener's answer: %w", err)
	}
	if len(b) != tcpReplySize {
		_ = sc.Close()
		return nil, fmt.Errorf("the listener's answer has %d bytes, want %d: %w", len(b), tcpReplySize, ErrFabricVersion)
	}
	if b[0] != tcpOK {
		_ = sc.Close()
		return nil, fmt.Errorf("the listener says: %w", refusal(b[0], hello(layer)))
	}
	_ = conn.SetDeadline(time.Time{})
	peerSlot, slot := int(binary.BigEndian.Uint32(b[4:])), int(binary.BigEndian.Uint32(b[8:]))
	if peerSlot != tcpSlotBase || slot <= tcpSlotBase || slot >= tcpSlotBase+tcpSlots {
		_ = sc.Close()
		return nil, fmt.Errorf("the listener hands out slot %d from slot %d: %w", slot, peerSlot, ErrFabricVersion)
	}
	l := newTCPLink(slot, addr, sec, layer)
	p := newTCPPeer(peerSlot, sc)
	l.peers[peerSlot] = p
	l.start(p)
	return l, nil
}

func newTCPPeer(slot int, sc *endpoint.SealedConn) *tcpPeer {
	return &tcpPeer{slot: slot, conn: sc, out: make(chan []byte, tcpOutDepth), done: make(chan struct{})}
}

// start runs the reader and the writer of p.
func (l *tcpLink) start(p *tcpPeer) {
	l.wg.Add(2)
	go l.reader(p)
	go l.writer(p)
}

// reader queues every message of p for the engine and wakes it.
func (l *tcpLink) reader(p *tcpPeer) {
	defer l.wg.Done()
	defer l.drop(p)
	for {
		b, err := p.conn.ReadFrame(wireHdrSize + wireMaxPayload)
		if err != nil {
			return
		}
		if len(b) < wireHdrSize {
			return // not a message of this protocol: the link ends
		}
		h := (*wireHdr)(unsafe.Pointer(&b[0]))
		if int(h.Len) != len(b) || (h.Kind != wireRequest && h.Kind != wireResponse && h.Kind != wireUD) {
			return
		}
		l.mu.Lock()
		l.inbox = append(l.inbox, tcpMsg{from: p.slot, rec: b})
		l.mu.Unlock()
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// writer sends what the engine queued for p.
func (l *tcpLink) writer(p *tcpPeer) {
	defer l.wg.Done()
	for {
		select {
		case b := <-p.out:
			err := p.conn.WriteFrame(b)
			p.queued.Add(-int64(len(b)))
			if err != nil {
				l.drop(p)
				return
			}
		case <-p.done:
			return
		}
	}
}

// drop ends the connection to p: its QPs' requests find no peer from now
// on and end in RETRY_EXC_ERR.
func (l *tcpLink) drop(p *tcpPeer) {
	p.once.Do(func() {
		close(p.done)
		_ = p.conn.Close()
		l.mu.Lock()
		if l.peers[p.slot] == p {
			delete(l.peers, p.slot)
		}
		l.mu.Unlock()
	})
}

// close ends every connection and stops listening.
func (l *tcpLink) close() {
	l.mu.Lock()
	l.closed = true
	peers := make([]*tcpPeer, 0, len(l.peers))
	for _, p := range l.peers {
		peers = append(peers, p)
	}
	l.mu.Unlock()
	if l.ln != nil {
		_ = l.ln.Close()
	}
	for _, p := range peers {
		l.drop(p)
	}
	l.wg.Wait()
	// A connection greeted while closing.
	l.mu.Lock()
	peers = peers[:0]
	for _, p := range l.peers {
		peers = append(peers, p)
	}
	l.mu.Unlock()
	for _, p := range peers {
		l.drop(p)
	}
}

// remoteSlot returns the slot of the other end that owns qpn, or -1 when
// qpn is this Fabric's or in no slot of the link.
func (l *tcpLink) remoteSlot(qpn uint32) int {
	s := tcpQPNSlot(qpn)
	if s == l.slot {
		return -1
	}
	return s
}

// peerAlive reports whether the Fabric in slot is connected.
func (l *tcpLink) peerAlive(slot int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.peers[slot] != nil
}

// send queues one message for the Fabric in slot (see shmFabric.send); it
// reports false when that Fabric is not connected or too much is queued
// for it already.
func (l *tcpLink) send(slot int, payloadLen int, fill func(h *wireHdr, payload []byte)) bool {
	l.mu.Lock()
	p := l.peers[slot]
	l.mu.Unlock()
	n := wireHdrSize + payloadLen
	if p == nil || p.queued.Load()+int64(n) > tcpOutLimit {
		return false
	}
	b := make([]byte, n)
	h := (*wireHdr)(unsafe.Pointer(&b[0]))
	fill(h, b[wireHdrSize:])
	h.Len = uint32(n)
	p.queued.Add(int64(n))
	select {
	case p.out <- b:
		return true
	default:
		p.queued.Add(-int64(n))
		return false
	}
}

// drain hands every message received to f (f.mu held); it reports whether
// there was any.
func (l *tcpLink) drain(f *Fabric, now int64) bool {
	l.mu.Lock()
	in := l.inbox
	l.inbox = nil
	l.mu.Unlock()
	for _, m := range in {
		h := (*wireHdr)(unsafe.Pointer(&m.rec[0]))
		f.wireIn(m.from, h, m.rec[wireHdrSize:], now)
	}
	return len(in) > 0
}

// wireOut sends one message to the process in slot over the shared fabric
// or the TCP link the Fabric joined (see shmFabric.send).
func (f *Fabric) wireOut(slot int, payloadLen int, fill func(h *wireHdr, payload []byte)) bool {
	if f.tcp != nil {
		return f.tcp.send(slot, payloadLen, fill)
	}
	return f.shm.send(slot, payloadLen, fill)
}

// wirePeerAlive reports whether the process in slot still runs (shared
// fabric) or is still connected (TCP link).
func (f *Fabric) wirePeerAlive(slot int) bool {
	if f.tcp != nil {
		return f.tcp.peerAlive(slot)
	}
	return f.shm.peerAlive(slot)
}

// LinkStatus describes a Fabric's end of a TCP link (see Options.Link).
type LinkStatus struct {
	// Address is the address listened on (the port chosen when the
	// option named port 0) or connected to.
	Address string
	// Listening is true on the listening end.
	Listening bool
	// Slot is this end's slot: its QPNs are those of the 64 Ki range
	// numbered Slot+1.
	Slot int
	// Peers is the number of ends connected now.
	Peers int
	// Refused counts the connections the listening end refused (failed
	// authentication, another protocol version or link layer);
	// LastRefusal is the reason of the last.
	Refused     int
	LastRefusal error
}

// Link returns the state of the Fabric's TCP link, and false when it has
// made none (the link is made when the first device opens).
func (f *Fabric) Link() (LinkStatus, bool) {
	f.mu.Lock()
	l := f.tcp
	f.mu.Unlock()
	if l == nil {
		return LinkStatus{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return LinkStatus{Address: l.addr, Listening: l.listen, Slot: l.slot, Peers: len(l.peers), Refused: l.refused, LastRefusal: l.lastErr}, true
}
