package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"os"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/admit"
	"github.com/mlx5kit/mlx5kit/internal/sealed"
)

// This file links the software HCAs of processes, usually on several
// hosts, over TCP: the messages of the wire layer (wire.go, wire_ud.go) that a
// shared fabric carries in shared-memory rings travel here as frames. One
// Fabric listens; every Fabric that connects to it is given a slot of its
// own at link time, and with it a LID and QPN range no other end of the
// link uses. The listener is the hub of a star: each connecting Fabric has
// one connection, to it, and sends every message there; the listener
// handles those for its own QPs and forwards the others, sealed anew, to
// the Fabric whose slot holds the destination QPN. It also tells every
// connected Fabric which slots are linked (tcpMembers), whenever that
// changes, so that a QP whose peer left stops sending and ends in
// RETRY_EXC_ERR as over a shared fabric. The two ends of each connection
// authenticate as channel's mesh does (internal/sealed, served by
// endpoint: a pre-shared key proved by HMAC challenge-response before
// anything else is sent, every frame after it sealed). It is a test tool that lets a cluster without
// RDMA NICs run a program across hosts, not a transport for production:
// every frame copied and sealed.

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
	// Version 2: the listener forwards between connected Fabrics and
	// announces the linked slots. Version 3: an atomic request carries
	// its operands as payload (wireAtomicSize). Version 4: the hello,
	// the listener's answer and its announcements carry each slot's
	// number of HCAs (tcpDevicesSize). Version 5: an 8-byte atomic's
	// word and answer are in host byte order (atomicOp).
	tcpVersion = 5
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
	tcpReplySize = 20 + tcpDevicesSize

	// tcpMembers is the kind of the link's own message, from the listener
	// to a connected Fabric: its payload is the bit set of the linked
	// slots (bit i is slot tcpSlotBase+i), 8 bytes in native order, then
	// the slots' numbers of HCAs (tcpDevicesSize).
	tcpMembers     = 0x80
	tcpMembersSize = 8 + tcpDevicesSize
	// tcpDevicesSize is the size of the numbers of HCAs of the link's
	// slots, one byte each (byte i: slot tcpSlotBase+i), which the
	// neighbour resolution of a GID checks (neighbourMAC).
	tcpDevicesSize = tcpSlots
	// tcpAnnounceWait bounds how long Reaches waits for the listener to
	// announce a slot it has just linked.
	tcpAnnounceWait = time.Second

	// Reply statuses.
	tcpOK         = 0
	tcpBadVer     = 1
	tcpBadLayer   = 2
	tcpNoSlot     = 3
	tcpBadHeader  = 4
	tcpBadDevices = 5
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

	mu      sync.Mutex
	peers   map[int]*tcpPeer
	next    int    // the next slot to hand a connecting Fabric
	gens    uint64 // the last tcpPeer.gen handed out (listener)
	closed  bool
	refused int
	lastErr error
	// drops counts the connections that ended other than by this end's
	// Close; lastDrop is why the last did.
	drops    int
	lastDrop error
	wg       sync.WaitGroup
	// gate admits, on the listener, the connections being greeted (at
	// most tcpMaxGreeting): close shuts them down, so that none holds it
	// for the handshake's whole time. stop is closed by close, which ends
	// the accept loop's wait for a place.
	gate *admit.Gate
	stop chan struct{}
	// members is, on a connecting end, the linked slots as the listener
	// last announced them (bit i: slot tcpSlotBase+i); announce is, on
	// the listener, set when a Fabric was linked or dropped and the
	// others are not told yet.
	members  uint64
	announce bool
	// devices holds the number of HCAs of each slot (index: slot less
	// tcpSlotBase): this Fabric's own, on the listener each linked
	// Fabric's from its hello, on a connecting end what the listener
	// last told.
	devices [tcpSlots]uint8
	// seen is, on a connecting end, every slot the listener ever
	// announced: Reaches waits for the announcement of a slot not seen
	// yet, not for one that left (the listener hands out slots in turn,
	// so one is seldom reused soon).
	seen uint64
	// lastGen is, on a connecting end, the newest generation (tcpPeer.gen,
	// which the listener writes into what it forwards) seen in a message
	// from each slot (index: slot less tcpSlotBase; f.mu held): a DCT
	// stream of an older one belongs to a Fabric that has left that slot.
	lastGen [tcpSlots]uint64
	// The listener's counts of the messages it forwarded between
	// connected Fabrics and of those it could not (no such slot linked,
	// too much waiting for it).
	forwarded, unforwarded uint64

	// The engine's (f.mu held): the peers of this round, the poll set of
	// its sleep, the message being built (tx) and an aligned copy of the
	// one being handled (rx, which an answer built in tx may read).
	round  []*tcpPeer
	fds    []unix.PollFd
	tx, rx []byte
	// wakeFD is an eventfd in the sleep's poll set: wake writes it, so
	// that Close and a peer just linked end the engine's sleep at once,
	// not after it.
	wakeFD int
	// behind is, on the listener, set while a peer has not been told
	// the linked slots since they changed (its buffer had no room:
	// announceLocked).
	behind bool
}

// tcpPeer is the other end of one connection. Once linked, only the
// engine (f.mu held) reads and writes it: it polls the socket in every
// round as it polls a shared fabric's rings, without a thread to wake.
type tcpPeer struct {
	slot int
	// gen numbers, on the listener, the Fabrics linked in turn (from 1):
	// the listener writes it into the SrcGen of every message from this
	// peer, its own and those it forwards, so that a DCT tells the
	// streams of a Fabric that linked into a slot another left from
	// that one's (a new Fabric's first DCI has the old one's QPN, and
	// its epochs start over).
	gen  uint64
	fc   *fdConn
	conn sealed.Conn
	in   []byte // bytes received that do not make a whole frame yet
	out  []byte // sealed frames not yet taken by the socket
	// outBuf is the array out lies in, from its start: flush moves out's
	// start past what the socket took, and back to outBuf's when out is
	// empty or lies in outBuf's second half (see flush).
	outBuf []byte
	dead   bool
	// behind: the listener has not told this peer the linked slots
	// since they changed (announceLocked).
	behind bool
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
		return fail(fmt.Errorf("Options.Fabric %q and Options.Link both set: a Fabric joins a shared fabric or a TCP link, not both (a shared fabric numbers its QPNs and LIDs per host, and no Fabric forwards between the two): %w", f.opts.Fabric, ctx.ErrInvalidArgument))
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
		l, err = listenLink(a, sec, f.opts.LinkLayer, len(f.hcas))
	} else {
		l, err = dialLink(f.closing, addr, sec, f.opts.LinkLayer, len(f.hcas))
	}
	if errors.Is(err, endpoint.ErrAuth) {
		// Most often the two ends hold different keys: name where this end's
		// key comes from.
		return fail(fmt.Errorf("link key (Options.LinkKey or $%s) refused; both ends need the same one: %w", EnvLinkKey, err))
	}
	if err != nil {
		return fail(err)
	}
	f.opts.Fabric = ""
	f.tcp = l
	for i := range f.hcas {
		h := newHCA((l.slot-tcpSlotBase)*tcpMaxDevices+i, f.opts.LinkLayer)
		h.index, h.name = i, fmt.Sprintf("sim%d", i)
		f.hcas[i] = h
	}
	first, limit := tcpQPNRange(l.slot)
	f.qpns = newNumberSpace(first, limit)
	return nil
}

func newTCPLink(slot int, addr string, sec endpoint.Security, layer ctx.LinkLayer) (*tcpLink, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return &tcpLink{slot: slot, addr: addr, sec: sec, layer: layer, peers: map[int]*tcpPeer{}, wakeFD: fd}, nil
}

// wake ends the engine's sleep (sleep), or the next one if it is not
// sleeping.
func (l *tcpLink) wake() {
	one := [8]byte{1}
	_, _ = unix.Write(l.wakeFD, one[:]) // EAGAIN: the counter is set already
}

// listenLink listens on addr; connecting Fabrics are greeted in the
// background.
func listenLink(addr string, sec endpoint.Security, layer ctx.LinkLayer, devices int) (*tcpLink, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	l, err := newTCPLink(tcpSlotBase, ln.Addr().String(), sec, layer)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	l.listen, l.ln, l.next = true, ln, tcpSlotBase+1
	l.devices[0] = uint8(devices)
	l.gate, l.stop = admit.New(tcpMaxGreeting), make(chan struct{})
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// tcpMaxGreeting bounds the connections a listener greets at once, so
// that a flood of connections that say nothing does not take a goroutine
// and a descriptor each. Past it, the one that has waited longest without
// authenticating (of a host holding more than a quarter of the places, if
// one does; else of all) is closed to make room
// for the next (admit.Gate): a Fabric that authenticates before
// tcpMaxGreeting newer connections arrive is linked however many silent
// ones came before it, and a flood from one host evicts its own.
const tcpMaxGreeting = 128

func (l *tcpLink) acceptLoop() {
	defer l.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := l.ln.Accept()
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
		from := c.RemoteAddr()
		conn, err := newFDConn(c)
		if err != nil {
			l.refuse(from, err)
			continue
		}
		t, ok := l.gate.Admit(conn, l.stop)
		if !ok {
			conn.release()
			return
		}
		l.wg.Add(1)
		go func() {
			defer t.Done()
			l.greet(conn, from, t)
		}()
	}
}

// refuse counts a connection the listener refused and keeps the reason
// (Link).
func (l *tcpLink) refuse(from net.Addr, err error) {
	l.mu.Lock()
	l.refused++
	l.lastErr = fmt.Errorf("link from %v: %w", from, err)
	l.mu.Unlock()
}

// hello is what a connecting Fabric tells the listener after
// authenticating: the link version, the wire header's size and byte order,
// its link layer and its number of HCAs.
func hello(layer ctx.LinkLayer, devices int) []byte {
	b := make([]byte, tcpHelloSize)
	binary.BigEndian.PutUint16(b[0:], tcpVersion)
	binary.BigEndian.PutUint16(b[2:], uint16(wireHdrSize))
	b[4] = byte(boolBit(littleEndian(), 1))
	binary.BigEndian.PutUint32(b[8:], uint32(layer))
	binary.BigEndian.PutUint32(b[12:], uint32(devices))
	return b
}

// greet authenticates a connecting Fabric, checks its hello and gives it
// a slot. A peer that fails is refused and the reason kept (Link). t is
// the connection's place at the listener's gate.
func (l *tcpLink) greet(conn *fdConn, from net.Addr, t *admit.Ticket) {
	defer l.wg.Done()
	refuse := func(err error) {
		conn.release()
		l.refuse(from, t.Explain(err))
	}
	sc, err := sealed.Accept(conn, l.sec.Key, sealed.FabricLink, tcpHandshakeWait)
	if err != nil {
		refuse(err)
		return
	}
	t.Authenticated()
	_ = conn.SetDeadline(time.Now().Add(tcpHandshakeWait))
	b, err := sc.ReadFrame(tcpHelloSize)
	if err != nil {
		refuse(fmt.Errorf("read hello: %w", err))
		return
	}
	status := byte(tcpOK)
	want := hello(l.layer, 0)
	switch {
	case len(b) != tcpHelloSize || binary.BigEndian.Uint16(b) != tcpVersion:
		status = tcpBadVer
	case binary.BigEndian.Uint16(b[2:]) != uint16(wireHdrSize) || b[4] != want[4]:
		status = tcpBadHeader
	case binary.BigEndian.Uint32(b[8:]) != uint32(l.layer):
		status = tcpBadLayer
	case binary.BigEndian.Uint32(b[12:]) > tcpMaxDevices:
		status = tcpBadDevices
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
			l.gens++
			p = &tcpPeer{slot: slot, gen: l.gens, fc: conn, conn: sc, dead: true}
			l.peers[slot] = p // reserved; dead until linked
			l.devices[slot-tcpSlotBase] = uint8(binary.BigEndian.Uint32(b[12:]))
		}
		l.mu.Unlock()
	}
	reply := make([]byte, tcpReplySize)
	reply[0] = status
	// Bytes 2 and 3 name this end's version, so that a refused dialer can
	// say which it is (a listener before this left them 0).
	binary.BigEndian.PutUint16(reply[2:], tcpVersion)
	binary.BigEndian.PutUint32(reply[4:], uint32(l.slot))
	binary.BigEndian.PutUint32(reply[8:], uint32(slot))
	l.mu.Lock()
	binary.BigEndian.PutUint64(reply[12:], l.membersLocked()|slotBit(slot))
	copy(reply[20:], l.devices[:])
	l.mu.Unlock()
	err = sc.WriteFrame(reply)
	if err == nil && status == tcpOK {
		err = conn.ready()
	}
	if status != tcpOK || err != nil {
		if p != nil {
			l.mu.Lock()
			delete(l.peers, slot)
			l.mu.Unlock()
		}
		if err == nil {
			err = refusal(status, b)
		}
		refuse(err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		delete(l.peers, slot)
		conn.release()
		return
	}
	p.dead = false
	l.announce = true
	l.wake() // its socket joins the sleep's poll set
}

// slotBit is the bit of slot s in a set of linked slots (none for a slot
// outside the link's).
func slotBit(s int) uint64 {
	if s < tcpSlotBase || s >= tcpSlotBase+tcpSlots {
		return 0
	}
	return 1 << (s - tcpSlotBase)
}

// membersLocked returns the linked slots as this end knows them (l.mu
// held): on the listener itself and the Fabrics connected now, on a
// connecting end what the listener announced.
func (l *tcpLink) membersLocked() uint64 {
	if !l.listen {
		return l.members
	}
	m := slotBit(l.slot)
	for s, p := range l.peers {
		if !p.dead {
			m |= slotBit(s)
		}
	}
	return m
}

// refusal is the error of a refused hello.
func refusal(status byte, hello []byte) error {
	switch status {
	case tcpBadVer:
		if len(hello) != tcpHelloSize {
			// Its version field may even match: another protocol all the
			// same.
			return fmt.Errorf("the connecting end sent a hello of %d bytes, this end's (link protocol version %d) has %d: %w: %w",
				len(hello), tcpVersion, tcpHelloSize, ErrLinkRefused, ErrFabricVersion)
		}
		return fmt.Errorf("the connecting end speaks link protocol version %d, this end %d: %w: %w",
			binary.BigEndian.Uint16(hello), tcpVersion, ErrLinkRefused, ErrFabricVersion)
	case tcpBadHeader:
		return fmt.Errorf("the two ends lay out the wire header differently (size or byte order; link protocol version %d): %w: %w", tcpVersion, ErrLinkRefused, ErrFabricVersion)
	case tcpBadLayer:
		return fmt.Errorf("the two ends have different link layers: %w: %w", ErrLinkRefused, ctx.ErrInvalidArgument)
	case tcpNoSlot:
		return fmt.Errorf("the listening Fabric has %d links already: %w", tcpSlots-1, ErrLinkRefused)
	case tcpBadDevices:
		v := uint32(0)
		if len(hello) >= tcpHelloSize {
			v = binary.BigEndian.Uint32(hello[12:])
		}
		return fmt.Errorf("the connecting end has %d devices, at most %d on a TCP link: %w: %w", v, tcpMaxDevices, ErrLinkRefused, ctx.ErrInvalidArgument)
	}
	return fmt.Errorf("status %d: %w", status, ErrLinkRefused)
}

// dialLink connects to the Fabric listening at addr, retrying until it
// answers or tcpDialWait passes, and authenticates. It gives up as soon
// as cx ends (the Fabric's Close began), with ctx.ErrClosed.
func dialLink(cx context.Context, addr string, sec endpoint.Security, layer ctx.LinkLayer, devices int) (_ *tcpLink, err error) {
	defer func() {
		if err != nil && cx.Err() != nil {
			err = fmt.Errorf("the Fabric was closed meanwhile: %w", ctx.ErrClosed)
		}
	}()
	end := time.Now().Add(tcpDialWait)
	backoff := 10 * time.Millisecond
	var c net.Conn
	for {
		dcx, dcancel := context.WithDeadline(cx, end)
		c, err = (&net.Dialer{}).DialContext(dcx, "tcp", addr)
		dcancel()
		if err == nil {
			break
		}
		if time.Now().Add(backoff).After(end) || cx.Err() != nil {
			return nil, fmt.Errorf("connect (tried for %v): %w", tcpDialWait, err)
		}
		select {
		case <-time.After(backoff):
		case <-cx.Done():
			return nil, cx.Err()
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
	conn, err := newFDConn(c)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			conn.release()
		}
	}()
	// A Close meanwhile shuts the socket down: the handshake's reads
	// and writes return at once.
	defer context.AfterFunc(cx, func() { _ = conn.Close() })()
	sc, err := sealed.Dial(conn, sec.Key, sealed.FabricLink, tcpHandshakeWait)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(tcpHandshakeWait))
	if err := sc.WriteFrame(hello(layer, devices)); err != nil {
		_ = sc.Close()
		return nil, fmt.Errorf("send hello: %w", err)
	}
	b, err := sc.ReadFrame(tcpReplySize)
	if err != nil {
		_ = sc.Close()
		return nil, fmt.Errorf("read the listener's answer: %w", err)
	}
	if len(b) > 0 && b[0] == tcpBadVer {
		_ = sc.Close()
		if len(b) >= 4 && binary.BigEndian.Uint16(b[2:]) != 0 {
			return nil, fmt.Errorf("the listener speaks link protocol version %d, this end %d: %w: %w", binary.BigEndian.Uint16(b[2:]), tcpVersion, ErrLinkRefused, ErrFabricVersion)
		}
		return nil, fmt.Errorf("the listener speaks another link protocol version than this end's %d: %w: %w", tcpVersion, ErrLinkRefused, ErrFabricVersion)
	}
	if len(b) != tcpReplySize {
		_ = sc.Close()
		return nil, fmt.Errorf("the listener's answer has %d bytes, want %d: %w", len(b), tcpReplySize, ErrFabricVersion)
	}
	switch b[0] {
	case tcpOK:
	default:
		_ = sc.Close()
		return nil, fmt.Errorf("the listener says: %w", refusal(b[0], nil))
	}
	if err := conn.ready(); err != nil {
		return nil, err
	}
	peerSlot, slot := int(binary.BigEndian.Uint32(b[4:])), int(binary.BigEndian.Uint32(b[8:]))
	if peerSlot != tcpSlotBase || slot <= tcpSlotBase || slot >= tcpSlotBase+tcpSlots {
		_ = sc.Close()
		return nil, fmt.Errorf("the listener hands out slot %d from slot %d: %w", slot, peerSlot, ErrFabricVersion)
	}
	l, err := newTCPLink(slot, addr, sec, layer)
	if err != nil {
		_ = sc.Close()
		return nil, err
	}
	l.peers[peerSlot] = &tcpPeer{slot: peerSlot, fc: conn, conn: sc}
	l.members = binary.BigEndian.Uint64(b[12:]) | slotBit(peerSlot) | slotBit(slot)
	l.seen = l.members
	copy(l.devices[:], b[20:])
	l.devices[slot-tcpSlotBase] = uint8(devices)
	ok = true
	return l, nil
}

// drop ends the connection to p (f.mu held, or the engine stopped): its
// QPs' requests find no peer from now on and end in RETRY_EXC_ERR. why is
// what ended it (LinkStatus.LastDrop), nil when this end closes.
func (l *tcpLink) drop(p *tcpPeer, why error) {
	l.mu.Lock()
	if p.dead {
		l.mu.Unlock()
		return
	}
	if why != nil {
		l.drops++
		l.lastDrop = fmt.Errorf("link to slot %d: %w", p.slot, why)
	}
	p.dead = true
	if l.peers[p.slot] == p {
		delete(l.peers, p.slot)
	}
	l.announce = l.listen
	l.members = 0
	l.mu.Unlock()
	p.fc.release()
	p.in, p.out, p.outBuf = nil, nil, nil
}

// close ends every connection and stops listening (the engine stopped).
func (l *tcpLink) close() {
	l.mu.Lock()
	if l.stop != nil && !l.closed {
		close(l.stop)
	}
	l.closed = true
	l.mu.Unlock()
	if l.gate != nil {
		l.gate.Close() // ends every handshake; greet releases its connection
	}
	if l.ln != nil {
		_ = l.ln.Close()
	}
	l.wg.Wait()
	l.mu.Lock()
	peers := make([]*tcpPeer, 0, len(l.peers))
	for _, p := range l.peers {
		peers = append(peers, p)
	}
	l.mu.Unlock()
	for _, p := range peers {
		l.drop(p, nil)
	}
	_ = unix.Close(l.wakeFD)
}

// live returns the linked peers (f.mu held), in a slice reused each round.
func (l *tcpLink) live() []*tcpPeer {
	l.round = l.round[:0]
	l.mu.Lock()
	for _, p := range l.peers {
		if !p.dead {
			l.round = append(l.round, p)
		}
	}
	l.mu.Unlock()
	return l.round
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

// reaches reports whether the QPN is in the slot of another linked
// Fabric (f.mu not held). A connecting end that has never heard of the
// slot waits a moment for the listener's announcement: the slot may have
// been linked an instant ago, its QPN told by a faster way.
func (l *tcpLink) reaches(qpn uint32) bool {
	s := l.remoteSlot(qpn)
	if s < 0 {
		return false
	}
	end := time.Now().Add(tcpAnnounceWait)
	for {
		if l.peerAlive(s) {
			return true
		}
		l.mu.Lock()
		wait := !l.listen && len(l.peers) > 0 && l.seen&slotBit(s) == 0
		l.mu.Unlock()
		if !wait || time.Now().After(end) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// peerAlive reports whether the Fabric in slot is linked: connected to
// the listener, and for a connecting end, the listener as well.
func (l *tcpLink) peerAlive(slot int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.routeLocked(slot) != nil
}

// streamGone reports whether the Fabric whose DCI began a DCT stream in
// generation gen from slot is gone (f.mu held): no Fabric is linked in
// slot, or another one is: on the listener, which numbers them
// (tcpPeer.gen), one of another number; on a connecting end, one whose
// messages carry a newer number (lastGen).
func (l *tcpLink) streamGone(slot int, gen uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.routeLocked(slot)
	if p == nil {
		return true
	}
	if l.listen {
		return p.gen != gen
	}
	return gen < l.lastGen[slot-tcpSlotBase]
}

// peerDevices returns the number of HCAs of the Fabric in slot, 0 when
// it is not linked.
func (l *tcpLink) peerDevices(slot int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.routeLocked(slot) == nil {
		return 0
	}
	return int(l.devices[slot-tcpSlotBase])
}

// routeLocked returns the connection a message for the Fabric in slot
// leaves by (l.mu held), or nil when that Fabric is not linked: on the
// listener the Fabric's own, on a connecting end the one to the listener,
// which forwards it.
func (l *tcpLink) routeLocked(slot int) *tcpPeer {
	if slot == l.slot {
		return nil
	}
	if !l.listen {
		if l.members&slotBit(slot) == 0 {
			return nil
		}
		for _, p := range l.peers {
			if !p.dead {
				return p
			}
		}
		return nil
	}
	p := l.peers[slot]
	if p == nil || p.dead {
		return nil
	}
	return p
}

// room reports whether a message with a payload of payloadLen bytes to
// slot fits in the buffer toward its peer (send's test).
func (l *tcpLink) room(slot int, payloadLen int) bool {
	l.mu.Lock()
	p := l.routeLocked(slot)
	l.mu.Unlock()
	return p != nil && len(p.out)+wireHdrSize+payloadLen <= tcpOutLimit
}

// send seals one message for the Fabric in slot and writes it, as far as
// the socket takes it (f.mu held; see shmFabric.send). It reports false
// when that Fabric is not linked or too much waits for it already.
func (l *tcpLink) send(slot int, payloadLen int, fill func(h *wireHdr, payload []byte)) bool {
	l.mu.Lock()
	p := l.routeLocked(slot)
	l.mu.Unlock()
	n := wireHdrSize + payloadLen
	if p == nil || len(p.out)+n > tcpOutLimit {
		return false
	}
	if cap(l.tx) < n {
		l.tx = make([]byte, n)
	}
	rec := l.tx[:n]
	h := (*wireHdr)(unsafe.Pointer(&rec[0]))
	*h = wireHdr{}
	fill(h, rec[wireHdrSize:])
	h.Len = uint32(n)
	return l.put(p, rec)
}

// put seals the message rec for p and writes it, as far as the socket
// takes it now (f.mu held).
func (l *tcpLink) put(p *tcpPeer, rec []byte) bool {
	out, err := p.conn.Seal(p.out, rec)
	if err != nil {
		return false
	}
	p.queued(out)
	l.flush(p)
	return true
}

// forward passes a message from one connected Fabric to the one in slot
// (the listener, f.mu held). A message for a slot not linked now, or
// beyond what may wait for it, is lost as a packet would be: an RC or DC
// requester sends it again and in the end gives up, a datagram is gone.
func (l *tcpLink) forward(slot int, rec []byte) {
	l.mu.Lock()
	p := l.routeLocked(slot)
	l.mu.Unlock()
	l.counted(p != nil && len(p.out)+len(rec) <= tcpOutLimit && l.put(p, rec))
}

// counted counts a message the listener forwarded, or could not.
func (l *tcpLink) counted(ok bool) {
	l.mu.Lock()
	if ok {
		l.forwarded++
	} else {
		l.unforwarded++
	}
	l.mu.Unlock()
}

// announceLocked tells every connected Fabric which slots are linked now,
// when that changed since it last did (the listener, f.mu held). A peer
// whose buffer has no room for it (tcpOutLimit) is told once there is,
// the slots as they are then: the announcements of a peer that takes
// nothing do not pile up however often the set changes.
func (l *tcpLink) announceLocked() {
	l.mu.Lock()
	if !l.announce && !l.behind {
		l.mu.Unlock()
		return
	}
	changed := l.announce
	l.announce = false
	m, devices := l.membersLocked(), l.devices // one snapshot of both
	l.mu.Unlock()
	n := wireHdrSize + tcpMembersSize
	if cap(l.tx) < n {
		l.tx = make([]byte, n)
	}
	rec := l.tx[:n]
	h := (*wireHdr)(unsafe.Pointer(&rec[0]))
	*h = wireHdr{Len: uint32(n), Kind: tcpMembers}
	*(*uint64)(unsafe.Pointer(&rec[wireHdrSize])) = m
	copy(rec[wireHdrSize+8:], devices[:])
	l.behind = false
	for _, p := range l.live() {
		p.behind = p.behind || changed
		switch {
		case !p.behind:
		case len(p.out)+n > tcpOutLimit:
			l.behind = true
		default:
			l.put(p, rec)
			p.behind = false
		}
	}
}

// queued sets p.out to out: p.out with frames appended, perhaps in a new
// array (which then starts with out).
func (p *tcpPeer) queued(out []byte) {
	if cap(out) != cap(p.out) {
		p.outBuf = out
	}
	p.out = out
}

// flush writes what waits for p, as far as the socket takes it now.
func (l *tcpLink) flush(p *tcpPeer) {
	for len(p.out) > 0 && !p.dead {
		n, err := unix.SendmsgN(p.fc.fd, p.out, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return
		case err != nil:
			l.drop(p, fmt.Errorf("send: %w", err))
			return
		}
		// What the socket took is stepped over, not moved: a peer
		// that takes a little at a time would have the whole backlog
		// (up to tcpOutLimit) moved for each piece. The rest moves to
		// the front once it lies in the array's second half, after at
		// least half the array was sent since it last moved: each byte
		// moves at most about once.
		p.out = p.out[n:]
		switch {
		case len(p.out) == 0:
			p.out = p.outBuf[:0]
		case cap(p.out) < cap(p.outBuf)/2:
			p.out = p.outBuf[:copy(p.outBuf, p.out)]
		}
	}
}

// tcpReadChunk is the least room a receive offers the socket.
const tcpReadChunk = 256 << 10

// tcpDrainBytes bounds what a drain reads from one peer: past it the rest
// waits in the socket for the next round, so that a peer that keeps
// sending cannot hold the engine (and the Fabric's lock, and with it
// Close) for as long as it sends, nor keep the other peers' messages
// waiting (as a shared fabric's drain takes at most a ring's worth).
const tcpDrainBytes = tcpReadChunk

// drain writes what waits and hands every whole message received to f
// (f.mu held), reading at most tcpDrainBytes from each peer; it reports
// whether there was any.
func (l *tcpLink) drain(f *Fabric) bool {
	got := false
	if l.listen {
		l.announceLocked()
		defer l.announceLocked() // a peer dropped in this round
	}
	for _, p := range l.live() {
		l.flush(p)
		for read := 0; !p.dead && read < tcpDrainBytes; {
			if cap(p.in)-len(p.in) < tcpReadChunk {
				p.in = append(make([]byte, 0, 2*cap(p.in)+tcpReadChunk), p.in...)
			}
			end := min(cap(p.in), len(p.in)+tcpDrainBytes-read)
			n, _, err := unix.Recvfrom(p.fc.fd, p.in[len(p.in):end], unix.MSG_DONTWAIT)
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				break
			}
			if err != nil || n == 0 { // reset, or closed by the peer
				if err == nil {
					err = io.EOF
				}
				l.drop(p, fmt.Errorf("recv: %w", err))
				break
			}
			read += n
			p.in = p.in[:len(p.in)+n]
			if l.frames(f, p) {
				got = true
			}
		}
	}
	return got
}

// frames handles every whole frame at the start of p.in and keeps the
// rest; a frame that is not of the link protocol or not sealed by the
// peer ends the link.
func (l *tcpLink) frames(f *Fabric, p *tcpPeer) bool {
	in := p.in
	got := false
	for len(in) >= sealed.HeaderSize && !p.dead {
		size, err := sealed.FrameSize(in[:sealed.HeaderSize], wireHdrSize+wireMaxPayload)
		if err != nil {
			l.drop(p, err)
			return got
		}
		if len(in) < size {
			break
		}
		body, err := p.conn.Open(in[:size])
		in = in[size:]
		if err != nil || len(body) < wireHdrSize {
			if err == nil {
				err = fmt.Errorf("a frame of %d bytes, shorter than a message header: %w", len(body), ErrFabricVersion)
			}
			l.drop(p, err)
			return got
		}
		// The header is read in place: copy the message to an aligned
		// buffer.
		if cap(l.rx) < len(body) {
			l.rx = make([]byte, len(body))
		}
		rec := l.rx[:len(body)]
		copy(rec, body)
		h := (*wireHdr)(unsafe.Pointer(&rec[0]))
		if int(h.Len) != len(rec) {
			l.drop(p, fmt.Errorf("a message says %d bytes in a frame of %d: %w", h.Len, len(rec), ErrFabricVersion))
			return got
		}
		got = true
		switch {
		case h.Kind == tcpMembers && !l.listen && len(rec) == wireHdrSize+tcpMembersSize:
			m := *(*uint64)(unsafe.Pointer(&rec[wireHdrSize]))
			l.mu.Lock()
			l.members = m | slotBit(l.slot) | slotBit(p.slot)
			l.seen |= l.members
			own := l.devices[l.slot-tcpSlotBase]
			copy(l.devices[:], rec[wireHdrSize+8:])
			l.devices[l.slot-tcpSlotBase] = own
			l.mu.Unlock()
		case h.Kind != wireRequest && h.Kind != wireResponse && h.Kind != wireUD:
			l.drop(p, fmt.Errorf("a message of unknown kind %d: %w", h.Kind, ErrFabricVersion))
			return got
		case l.listen:
			// A connected Fabric speaks for its own QPs and ports
			// only; a message for another's goes on to it.
			if tcpQPNSlot(h.SrcQPN) != p.slot || tcpForeignSource(h, rec[wireHdrSize:], p.slot) {
				l.counted(false)
				continue
			}
			// The peer's generation, whatever it wrote (tcpPeer.gen).
			h.SrcGen = p.gen
			if dst := tcpQPNSlot(h.DstQPN); dst != l.slot {
				l.forward(dst, rec)
				continue
			}
			f.wireIn(p.slot, h, rec[wireHdrSize:])
		default:
			// From the listener: its own message, or one it forwards
			// from the Fabric in the source QPN's slot; an answer goes
			// back by the same way.
			from := tcpQPNSlot(h.SrcQPN)
			if from < 0 || from == l.slot || tcpQPNSlot(h.DstQPN) != l.slot {
				continue
			}
			if g := &l.lastGen[from-tcpSlotBase]; h.SrcGen > *g {
				*g = h.SrcGen
			}
			f.wireIn(from, h, rec[wireHdrSize:])
		}
	}
	if !p.dead {
		p.in = p.in[:copy(p.in, in)]
	}
	return got
}

// tcpForeignSource reports whether message h, with payload body, names
// as its source a port of an HCA outside slot: a source LID of another
// slot's HCA, or, for a datagram, a GRH whose source GID (read as a
// receiver reads it, addrvec.GRHAddresses) is another slot's HCA's. A
// receiver reports both in its completion and the GRH, and an answer
// built from them names that HCA. A LID of 0 (an answer, a RoCE port) and
// a GID of none of the model's HCAs name no other Fabric's port.
func tcpForeignSource(h *wireHdr, body []byte, slot int) bool {
	if h.SrcLID != 0 && tcpSlotBase+(int(h.SrcLID)-1)/tcpMaxDevices != slot {
		return true
	}
	if h.Kind != wireUD || h.GRH == 0 {
		return false
	}
	sgid, _, _, ok := addrvec.GRHAddresses(body)
	if !ok {
		return false
	}
	i, ok := hcaIndexOfGID(sgid)
	return ok && tcpSlotBase+i/tcpMaxDevices != slot
}

// sleep waits up to d for bytes from a peer (the engine is idle).
func (l *tcpLink) sleep(f *Fabric, d time.Duration) {
	f.mu.Lock()
	l.fds = l.fds[:0]
	for _, p := range l.live() {
		ev := int16(unix.POLLIN)
		if len(p.out) > 0 {
			ev |= unix.POLLOUT
		}
		l.fds = append(l.fds, unix.PollFd{Fd: int32(p.fc.fd), Events: ev})
	}
	l.fds = append(l.fds, unix.PollFd{Fd: int32(l.wakeFD), Events: unix.POLLIN})
	f.mu.Unlock()
	ts := unix.NsecToTimespec(d.Nanoseconds())
	if n, _ := unix.Ppoll(l.fds, &ts, nil); n > 0 && l.fds[len(l.fds)-1].Revents&unix.POLLIN != 0 {
		var b [8]byte
		_, _ = unix.Read(l.wakeFD, b[:])
	}
}

// wireOut sends one message to the process in slot over the shared fabric
// or the TCP link the Fabric joined (see shmFabric.send).
func (f *Fabric) wireOut(slot int, payloadLen int, fill func(h *wireHdr, payload []byte)) bool {
	if f.tcp != nil {
		return f.tcp.send(slot, payloadLen, fill)
	}
	return f.shm.send(slot, payloadLen, fill)
}

// wireRoom reports whether a message with a payload of payloadLen bytes to
// the process in slot can leave now (wireOut then sends it): its shared
// ring has room, or the link's buffer toward it does.
func (f *Fabric) wireRoom(slot int, payloadLen int) bool {
	if f.tcp != nil {
		return f.tcp.room(slot, payloadLen)
	}
	return f.shm.room(slot, payloadLen)
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
	// Peers is the number of ends connected now (on a connecting end, 1:
	// the listener).
	Peers int
	// Members is the number of Fabrics linked now, this one included: on
	// the listener those connected to it, on a connecting end those the
	// listener last announced. Every member reaches every other.
	Members int
	// Forwarded and NotForwarded count, on the listener, the messages it
	// passed on from one connected Fabric to another, and those it could
	// not (the destination's slot not linked, too much waiting for it, or
	// a source QPN, LID or GID not of the sender's slot).
	Forwarded, NotForwarded uint64
	// Refused counts the connections the listening end refused (failed
	// authentication, another protocol version or link layer);
	// LastRefusal is the reason of the last.
	Refused     int
	LastRefusal error
	// Dropped counts the linked connections that ended other than by
	// this Fabric's Close: the peer closed or reset it, or sent a frame
	// that is not the link protocol's or not sealed with the key (an
	// altered, replayed or injected one: errors.Is endpoint.ErrAuth).
	// LastDrop is why the last ended, naming the peer's slot.
	Dropped  int
	LastDrop error
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
	st := LinkStatus{Address: l.addr, Listening: l.listen, Slot: l.slot, Refused: l.refused, LastRefusal: l.lastErr,
		Dropped: l.drops, LastDrop: l.lastDrop,
		Members: bits.OnesCount64(l.membersLocked()), Forwarded: l.forwarded, NotForwarded: l.unforwarded}
	for _, p := range l.peers {
		if !p.dead {
			st.Peers++
		}
	}
	return st, true
}
