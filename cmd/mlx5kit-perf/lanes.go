package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// connection is the transport of -c: RC, UD or DC.
type connection uint8

// The connection types of -c.
const (
	connRC connection = iota
	connUD
	connDC
)

func (t connection) String() string {
	switch t {
	case connUD:
		return "UD"
	case connDC:
		return "DC"
	}
	return "RC"
}

// perftest's keys: the qkey of its UD queue pairs (DEF_QKEY) and the DC
// access key of its DCTs (DC_KEY).
const (
	perftestQKey  = 0x11111111
	perftestDCKey = 0xffeeddcc
)

// perftest's default inline sizes of UD sends and DC (DEF_INLINE_SEND_UD,
// DEF_INLINE_DC) when -I is not given.
const (
	defaultInlineUD = 188
	// defaultInlineSendLat is perftest's for send_lat over RC
	// (DEF_INLINE_SEND_RC_UC); every other RC mode keeps 220.
	defaultInlineSendLat = 236
	defaultInlineDC      = 150
)

// lanesReady are the modes that run over lanes (-c UD|DC, -q): both ends
// post, poll and repost receives through the lane functions (send_bw's
// and -b's duplex loop, streamBoth, included). Every mode does.
var lanesReady = [numModes]bool{writeLat: true, writeBW: true, sendLat: true, sendBW: true, readLat: true, readBW: true, atomicLat: true, atomicBW: true}

// maxQueuePairs is the most queue pairs -q takes.
const maxQueuePairs = 256

// qps is the number of queue pairs per end (-q).
func (c config) qps() int { return max(c.numQueuePairs, 1) }

// grh is the space in front of every receive: UD's GRH.
func (c config) grh() int {
	if c.conn == connUD {
		return ud.GRHSize
	}
	return 0
}

// lanesNeeded reports whether the ends run through lanes (-c UD or DC, or
// more than one queue pair) instead of the single RC queue pair.
func (c config) lanesNeeded() bool { return c.conn != connRC || c.qps() > 1 }

// streamIters is how many messages a bandwidth stream of -n iterations
// per queue pair posts in all: perftest reports -n times -q.
func (c config) streamIters() int { return c.iters * c.qps() }

// laneCheck returns what is wrong with -c and -q, as perftest refuses it,
// or "".
func (c config) laneCheck() string {
	switch {
	case c.numQueuePairs < 0 || c.numQueuePairs > maxQueuePairs: // a server checks the client's
		return fmt.Sprintf("-q %d: want 1 to %d queue pairs", c.numQueuePairs, maxQueuePairs)
	case c.qps() > 1 && c.mode.latency():
		return fmt.Sprintf("-q %d: Multiple QPs only available on bw tests (as in perftest): %s measures latency", c.numQueuePairs, c.mode)
	case c.conn == connUD && c.mode.verb() != "Send":
		return fmt.Sprintf("-c UD: UD connection only possible in SEND verb (as in perftest): %s posts %s", c.mode, c.mode.verb())
	case c.conn == connUD && c.sizeSet && !c.all && c.size > ctx.MTU4096.Bytes():
		// Beyond every MTU; a size above this path's smaller MTU is
		// known once the ends have swapped endpoints (checkPathSize).
		return fmt.Sprintf("-s %d: a UD datagram carries at most the path MTU, at most %d bytes (perftest's limit for UD)", c.size, ctx.MTU4096.Bytes())
	case c.conn == connUD && c.mode == sendBW && c.rxDepth < c.qd && c.rxDepth < c.warmup+c.iters:
		return fmt.Sprintf("-c UD with -r %d below -t %d: a datagram that finds no receive posted is lost (UD has no RNR retry), so send_bw needs -r of at least -t", c.rxDepth, c.qd)
	case c.lanesNeeded() && !lanesReady[c.mode]:
		return fmt.Sprintf("-c %v -q %d: %s does not run over several queue pairs or UD/DC yet", c.conn, c.qps(), c.mode)
	case c.perftestPeer && c.lanesNeeded():
		return "--perftest-peer runs one RC queue pair: -c UD|DC and -q above 1 are not supported against perftest"
	}
	return ""
}

// describeLanes adapts the mode's description to -c and -q.
func (c config) describeLanes(s string) string {
	if c.conn != connRC {
		s = c.conn.String() + strings.TrimPrefix(s, "RC")
	}
	if c.qps() > 1 {
		s += fmt.Sprintf(", %d queue pairs round-robin", c.qps())
	}
	return s
}

// lane is one queue pair of an end: an RC queue pair, a UD queue pair and
// its peer's address handle, or a DC initiator with the DC target it
// sends to and this end's own target (which receives through srq).
type lane struct {
	rc    *rc.QP
	ud    *ud.QP
	udTo  *ud.Remote
	dci   *dc.DCI
	dcTo  *dc.Remote
	dct   *dc.DCT
	send  *transport.Queue // the queue that posts
	local endpoint.Endpoint
	peer  endpoint.Endpoint
	// The peer's areas, for writes, reads and atomics.
	peerRecv, peerSrc uint64
	rkey              uint32
	// Sends posted and not yet completed in a stream.
	outstanding int
	// word is the offset of the lane's atomic counter in the peer's
	// receive area (and of its results in this end's): the atomics of
	// different queue pairs are not ordered, so each has its own counter,
	// and atomics the ones it posted since its end was reset (the compare
	// value of its next CMP_AND_SWAP).
	word, atomics uint64
	// Messages this lane completed since its end was reset.
	completed int
}

// lanes are an end's queue pairs when the test runs through them.
type lanes struct {
	conn connection
	all  []*lane
	srq  *transport.SharedReceiveQueue // DC: the receives of every DCT
	grh  int                           // bytes in front of every receive
}

// openEnds opens the device and makes one end per name, with the MTU of
// -m, each with its lanes when cfg needs them; the setup's Close closes
// the lanes first.
func openEnds(cfg config, names ...string) (*setup, []*end, error) {
	s, made, err := perftool.OpenEnds(cfg.provider, cfg.device, cfg.endConfig(), wrap, names...)
	if err != nil {
		return nil, nil, err
	}
	st := &setup{Setup: s, ends: made}
	if err := limitMTU(cfg, s, made...); err != nil {
		_ = st.Close()
		return nil, nil, err
	}
	if !cfg.lanesNeeded() {
		return st, made, nil
	}
	for _, x := range made {
		x.recv = x.End.Recv[cfg.grh():]
		if err := x.addLanes(cfg, s.Context); err != nil {
			_ = st.Close()
			return nil, nil, fmt.Errorf("%s: -c %v -q %d: %w", x.Name, cfg.conn, cfg.qps(), err)
		}
	}
	return st, made, nil
}

// setup is an opened device with its ends.
type setup struct {
	*perftool.Setup
	ends []*end
}

// Close closes the ends' lanes, then the ends and the device.
func (s *setup) Close() error {
	var errs []error
	for _, x := range s.ends {
		errs = append(errs, x.closeLanes())
	}
	return errors.Join(append(errs, s.Setup.Close())...)
}

// addLanes creates the end's cfg.qps() queue pairs of type cfg.conn on
// the end's protection domain and CQ, with every receive posted, the
// traffic class of -T on their paths and the end's MTU (-m) on what they
// announce and, for DC, on the DCIs and DCTs.
func (x *end) addLanes(cfg config, c *ctx.Context) error {
	gid, err := perftool.GIDSelector(cfg.gidIndex)
	if err != nil {
		return err
	}
	tclass := uint8(cfg.tclass) // -T, on every lane's paths
	if t := map[connection]ctx.QPType{connUD: ctx.QPTypeUD, connDC: ctx.QPTypeDCI}[cfg.conn]; t != 0 {
		// The end's inline size is RC's (-I, up to the device's RC
		// limit); a UD or DCI WQE has less room: as perftest, take the
		// type's limit.
		a, err := c.Query()
		if err != nil {
			return err
		}
		x.MaxInline = min(x.MaxInline, int(a.SendLimits(t).MaxInline))
	}
	ls := &lanes{conn: cfg.conn, grh: cfg.grh()}
	x.lanes = ls
	recvLen := uint32(len(x.End.Recv))
	if cfg.conn == connDC {
		if ls.srq, err = transport.NewSharedReceiveQueue(x.PD, ctx.SRQConfig{Depth: uint32(max(cfg.rxDepth, cfg.qps()))}); err != nil {
			return err
		}
		for range max(cfg.rxDepth, cfg.qps()) {
			if err := ls.srq.BeginRecv(0).SGE(x.RecvAddr, recvLen, x.LKey).Finish(); err != nil {
				return fmt.Errorf("post receive: %w", err)
			}
		}
		ls.srq.RingRecvDoorbell()
	}
	for i := range cfg.qps() {
		l := &lane{word: uint64(i) * atomicSize}
		switch {
		case cfg.conn == connRC && i == 0:
			l.rc = x.QP // the end's own
		case cfg.conn == connRC:
			l.rc, err = rc.New(x.PD, x.CQ, rc.Config{SendDepth: uint32(cfg.sendDepth()), RecvDepth: uint32(cfg.rxDepth), Port: uint8(cfg.port), GID: gid,
				MaxInline: uint32(x.MaxInline), SL: uint8(cfg.sl), Timeout: cfg.qpTimeout, MaxRdAtomic: cfg.outReads, TrafficClass: tclass})
		case cfg.conn == connUD:
			l.ud, err = ud.New(x.PD, x.CQ, ud.Config{SendDepth: uint32(cfg.sendDepth()), RecvDepth: uint32(cfg.rxDepth), MaxInline: uint32(x.MaxInline),
				QKey: perftestQKey, Port: uint8(cfg.port), GID: gid, SL: uint8(cfg.sl), TrafficClass: tclass})
		default:
			l.dci, err = dc.NewDCI(x.PD, x.CQ, dc.DCIConfig{SendDepth: uint32(cfg.sendDepth()), MaxInline: uint32(x.MaxInline), Port: uint8(cfg.port), GID: gid,
				SL: uint8(cfg.sl), MaxRdAtomic: cfg.outReads, Timeout: cfg.qpTimeout, TrafficClass: tclass, MTU: x.mtu})
			if err == nil {
				l.dct, err = dc.NewDCT(x.PD, x.CQ, dc.DCTConfig{SRQ: ls.srq, Key: perftestDCKey, Port: uint8(cfg.port), GID: gid, SL: uint8(cfg.sl), TrafficClass: tclass, MTU: x.mtu})
			}
		}
		if err != nil {
			_ = l.close(x.QP)
			return err
		}
		ls.all = append(ls.all, l)
		if err := l.setUp(x, recvLen); err != nil {
			return err
		}
	}
	return nil
}

// setUp adds the lane's queues to the end's poller, posts the receives of
// an RC or UD queue pair and notes what it sends through and what it
// tells the peer.
func (l *lane) setUp(x *end, recvLen uint32) error {
	var q *transport.Queue
	switch {
	case l.rc != nil:
		q, l.local = &l.rc.Queue, l.rc.Endpoint()
	case l.ud != nil:
		q, l.local = &l.ud.Queue, l.ud.Endpoint()
	default:
		l.local = l.dct.Endpoint()
		if err := x.Poller.Add(l.dct); err != nil {
			return err
		}
		l.local.MTU = x.capMTU(l.local.MTU)
		l.send = &l.dci.Queue
		return x.Poller.Add(l.dci)
	}
	l.local.MTU = x.capMTU(l.local.MTU)
	l.send = q
	if l.rc == x.QP {
		return nil // added, its receives posted by perftool.NewEnd
	}
	if err := x.Poller.Add(q); err != nil {
		return err
	}
	for range q.Limits().RecvWQEs {
		if err := q.BeginRecv(0).SGE(x.RecvAddr, recvLen, x.LKey).Finish(); err != nil {
			return fmt.Errorf("post receive: %w", err)
		}
	}
	q.RingRecvDoorbell()
	return nil
}

// close destroys what the lane created (not own, the end's RC queue pair).
func (l *lane) close(own *rc.QP) error {
	var errs []error
	if l.udTo != nil {
		errs = append(errs, l.udTo.Close())
	}
	if l.dcTo != nil {
		errs = append(errs, l.dcTo.Close())
	}
	switch {
	case l.rc != nil && l.rc != own:
		errs = append(errs, l.rc.Close())
	case l.ud != nil:
		errs = append(errs, l.ud.Close())
	}
	if l.dci != nil {
		errs = append(errs, l.dci.Close())
	}
	if l.dct != nil {
		errs = append(errs, l.dct.Close())
	}
	return errors.Join(errs...)
}

// closeLanes destroys the end's lanes and their SRQ.
func (x *end) closeLanes() error {
	if x.lanes == nil {
		return nil
	}
	var errs []error
	for _, l := range x.lanes.all {
		errs = append(errs, l.close(x.QP))
	}
	if x.lanes.srq != nil {
		errs = append(errs, x.lanes.srq.Close())
	}
	x.lanes = nil
	return errors.Join(errs...)
}

// endpoints describes the end's queue pairs to the peer, in lane order:
// each with the end's two areas (none for UD, which only sends).
func (x *end) endpoints() []endpoint.Endpoint {
	if x.lanes == nil {
		return []endpoint.Endpoint{x.endpoint()}
	}
	regions := x.endpoint().Regions
	eps := make([]endpoint.Endpoint, len(x.lanes.all))
	for i, l := range x.lanes.all {
		eps[i] = l.local
		if x.lanes.conn != connUD {
			eps[i].Regions = regions
		}
	}
	return eps
}

// connectAll connects the end's queue pairs to the peer's endpoints,
// lane i to peers[i].
func (x *end) connectAll(peers []endpoint.Endpoint) error {
	if x.lanes == nil {
		if len(peers) != 1 {
			return fmt.Errorf("%s: the peer has %d queue pairs, want 1", x.Name, len(peers))
		}
		return x.connect(peers[0])
	}
	if len(peers) != len(x.lanes.all) {
		return fmt.Errorf("%s: the peer has %d queue pairs, want %d", x.Name, len(peers), len(x.lanes.all))
	}
	for i, l := range x.lanes.all {
		if err := x.connectLane(l, peers[i]); err != nil {
			return fmt.Errorf("%s: queue pair %d: %w", x.Name, i, err)
		}
	}
	x.peer = peers[0]
	return nil
}

// connectLane points lane l at the peer's endpoint p.
func (x *end) connectLane(l *lane, p endpoint.Endpoint) error {
	var err error
	p.MTU = x.capMTU(p.MTU) // -m: the path MTU is the smaller
	l.peer = p
	if x.lanes.conn == connUD {
		if p.Transport != endpoint.TransportUD {
			return fmt.Errorf("the peer's endpoint is %v, want UD", p.Transport)
		}
		l.udTo, err = l.ud.NewRemote(p)
		return err
	}
	if len(p.Regions) != 2 {
		return fmt.Errorf("the peer's endpoint has %d regions, want 2", len(p.Regions))
	}
	w, r := p.Regions[0], p.Regions[1]
	if !w.Allows(ctx.AccessRemoteWrite) || !r.Allows(ctx.AccessRemoteRead) || w.Length < uint64(len(x.recv)) || r.Length < uint64(len(x.recv)) {
		return fmt.Errorf("the peer's areas %v and %v do not take %d-byte writes and reads", w, r, len(x.recv))
	}
	l.peerRecv, l.peerSrc, l.rkey = w.Address, r.Address, w.RemoteKey
	if l.rc == x.QP {
		x.PeerRecv, x.PeerSrc, x.RKey = l.peerRecv, l.peerSrc, l.rkey
	}
	if x.lanes.conn == connDC {
		if p.Transport != endpoint.TransportDC {
			return fmt.Errorf("the peer's endpoint is %v, want DC", p.Transport)
		}
		l.dcTo, err = l.dci.NewRemote(p)
		return err
	}
	return l.rc.Connect(p)
}

// connectEnds connects the two ends of one process to each other.
func connectEnds(a, b *end) error {
	a.peerSRQN, b.peerSRQN = b.srqn(), a.srqn()
	return firstErr(a.connectAll(b.endpoints()), b.connectAll(a.endpoints()))
}

// handshakeAll swaps the endpoints of every queue pair over conn (one
// authenticated exchange each, this end on side of it), refuses peers the
// software HCA cannot reach, connects and waits until the peer's queue
// pairs are connected too; then the two ends swap their SRQ numbers
// (perftest prints them for DC).
func handshakeAll(cfg config, conn net.Conn, side endpoint.Side, c *ctx.Context, x *end) error {
	local := x.endpoints()
	peers := make([]endpoint.Endpoint, len(local))
	for i, ep := range local {
		tctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
		p, err := endpoint.Exchange(tctx, conn, side, ep, cfg.security)
		cancel()
		if err != nil {
			return fmt.Errorf("exchange the endpoint of queue pair %d: %w", i, perftool.ExplainKey(err))
		}
		peers[i] = p
	}
	// Every endpoint is in before any is judged: a refusal is told to the
	// peer (perftool.Refuse), not left to it as a connection closed in the
	// middle of an exchange.
	refuse := func(err error) error { return perftool.Refuse(conn, cfg.timeout, err) }
	for i, p := range peers {
		for k, own := range local {
			if perftool.OwnQueuePair(own, p) {
				return refuse(fmt.Errorf("exchange the endpoint of queue pair %d: the peer named this end's own queue pair %d (%#x)%s", i, k, p.QPN, perftool.OwnQueuePairHint(c)))
			}
		}
		if err := perftool.SameModel(c, local[i].QPN, p); err != nil {
			return refuse(err)
		}
	}
	if err := x.connectAll(peers); err != nil {
		return refuse(err)
	}
	if err := perftool.Sync(conn, cfg.timeout, nil); err != nil {
		return fmt.Errorf("connect to the peer's queue pairs: %w", err)
	}
	return x.swapSRQN(conn, cfg.timeout)
}

// swapSRQN sends this end's SRQ number and reads the peer's.
func (x *end) swapSRQN(conn net.Conn, timeout time.Duration) error {
	_ = conn.SetDeadline(time.Now().Add(timeout))
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], x.srqn())
	if _, err := conn.Write(b[:]); err != nil {
		return fmt.Errorf("send the SRQ number: %w", err)
	}
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return fmt.Errorf("read the peer's SRQ number: %w", err)
	}
	x.peerSRQN = binary.BigEndian.Uint32(b[:])
	return nil
}

// srqn is the number of the end's SRQ (DC), else 0.
func (x *end) srqn() uint32 {
	if x.lanes == nil || x.lanes.srq == nil {
		return 0
	}
	return x.lanes.srq.SRQN()
}

// checkPathSize fits the sizes of a UD test to the path: a datagram
// carries at most the path MTU (the smaller of the two ends'), so -a stops
// there, as perftest's does, a larger -s is refused and the default size
// of a bandwidth mode (65536) is lowered to it, as perftest lowers it. Both
// ends compute it from the same two endpoints.
func checkPathSize(cfg config, x *end) (config, error) {
	if cfg.conn != connUD || x.lanes == nil {
		return cfg, nil
	}
	l := x.lanes.all[0]
	mtu := min(l.local.MTU.Bytes(), l.peer.MTU.Bytes())
	if cfg.all {
		cfg.maxSize = min(cfg.maxSize, mtu)
		return cfg, nil
	}
	if cfg.size > mtu && !cfg.sizeSet {
		cfg.size, cfg.sizeLowered = mtu, true
		return cfg, nil
	}
	if cfg.size > mtu {
		return cfg, fmt.Errorf("-s %d: a UD datagram carries at most the path MTU, %d bytes (perftest's limit for UD)", cfg.size, mtu)
	}
	return cfg, nil
}

// stage starts a send WQE on the lane (not UD, whose WQEs only send).
func (l *lane) stage(wrid uint64, flags wqebuilder.Flags) (wqebuilder.OpStage, error) {
	if l.dci != nil {
		return l.dci.Post(wrid, flags, l.dcTo)
	}
	return l.rc.Post(wrid, flags)
}

// post posts one WQE of op on the lane: a SEND or RDMA_WRITE(_IMM) of
// size bytes of the source area (inline when inline is set), an RDMA_READ
// of the peer's source area into the receive area, or an atomic on the
// peer's counter (its result at results plus the lane's offset, in the
// receive or source area); through BlueFlame when bf is set, else left for the
// lane's doorbell. It allocates nothing.
func (x *end) post(l *lane, op perftool.Op, wrid uint64, flags wqebuilder.Flags, size int, seq uint32, inline, bf bool, results uint64) error {
	var d wqebuilder.DataStage
	if l.ud != nil {
		s, err := l.ud.Post(wrid, flags, l.udTo)
		if err != nil {
			return err
		}
		d = s.Send()
	} else {
		s, err := l.stage(wrid, flags)
		if err != nil {
			return err
		}
		switch op {
		case perftool.OpRead:
			r := s.RdmaRead(l.peerSrc, l.rkey).SGE(x.RecvAddr, uint32(size), x.LKey)
			if bf {
				return r.FinishBlueFlame()
			}
			return r.Finish()
		case perftool.OpFetchAdd, perftool.OpCompareSwap:
			var a wqebuilder.FinishStage
			if op == perftool.OpCompareSwap {
				a = s.AtomicCS(l.peerRecv+l.word, l.rkey, uint64(seq), uint64(seq)+1).Result(results+l.word, x.LKey)
			} else {
				a = s.AtomicFA(l.peerRecv+l.word, l.rkey, 1).Result(results+l.word, x.LKey)
			}
			if bf {
				return a.FinishBlueFlame()
			}
			return a.Finish()
		case perftool.OpSend:
			d = s.Send()
		case perftool.OpWriteImm:
			d = s.RdmaWriteImm(l.peerRecv, l.rkey, seq)
		default: // a plain RDMA_WRITE
			d = s.RdmaWrite(l.peerRecv, l.rkey)
		}
	}
	if inline {
		i := d.Inline(x.Src[:size])
		if bf {
			return i.FinishBlueFlame()
		}
		return i.Finish()
	}
	d = d.SGE(x.SrcAddr, uint32(size), x.LKey)
	if bf {
		return d.FinishBlueFlame()
	}
	return d.Finish()
}

// opWrite is post's plain RDMA_WRITE (the streams of write_bw).
const opWrite perftool.Op = 255

// postLane sends message seq of a latency test on the end's one lane, as
// perftool.End.Post does on its RC queue pair. It allocates nothing.
func (x *end) postLane(op perftool.Op, size int, seq uint32, inline bool) error {
	if size >= 4 && op < perftool.OpRead {
		binary.BigEndian.PutUint32(x.Src, seq)
	}
	if err := x.post(x.lanes.all[0], op, uint64(seq), wqebuilder.Signaled, size, seq, inline, true, x.RecvAddr); err != nil {
		return err
	}
	x.SendsOut++
	return nil
}

// awaitLane busy-polls until message seq has arrived on one of the end's
// lanes (an RDMA_WRITE_IMM with immediate seq, or a SEND of size bytes
// after the GRH space), checks its sequence number and posts a receive in
// place of the one it used, as perftool.End.Await does. It allocates
// nothing unless it fails.
func (x *end) awaitLane(op perftool.Op, size int, seq uint32) error {
	var got *transport.Queue
	var since time.Time
	want := uint32(size + x.lanes.grh)
	for spins := 1; got == nil; spins++ {
		n := x.Poller.Poll(4, func(c *transport.Completion) {
			switch {
			case c.Match != transport.MatchOK:
				x.Fail(c)
			case c.Opcode == prm.CQEReq:
				x.SendsOut--
			case op == perftool.OpWriteImm && c.Opcode == prm.CQERespWrImm && c.Immediate == seq,
				op == perftool.OpSend && c.Opcode == prm.CQERespSend && c.ByteCount == want:
				got = c.Queue
			default:
				x.Fail(c)
			}
		})
		if x.Failed {
			return x.CompletionError(seq)
		}
		if n == 0 {
			if err := x.Idle(spins, &since, seq); err != nil {
				return err
			}
		}
	}
	if size >= 4 && binary.BigEndian.Uint32(x.recv) != seq {
		return fmt.Errorf("%s: message %d: its completion arrived but the receive area holds sequence %d", x.Name, seq, binary.BigEndian.Uint32(x.recv))
	}
	return x.repost(got)
}

// repost posts a receive in place of one q consumed (for a DCT, to the
// SRQ), and rings its doorbell. It allocates nothing.
func (x *end) repost(q *transport.Queue) error {
	n := uint32(len(x.End.Recv))
	if srq := q.SRQ(); srq != nil {
		return srq.BeginRecv(0).SGE(x.RecvAddr, n, x.LKey).FinishDoorbell()
	}
	return q.BeginRecv(0).SGE(x.RecvAddr, n, x.LKey).FinishDoorbell()
}

// laneStream is stream over the end's lanes: n messages in all, in
// batches of batch, batch b on lane b mod the number of lanes (perftest's
// round-robin over its queue pairs), at most qd outstanding per lane.
// The work request id of a batch's signaled WQE is b. It allocates
// nothing.
func (x *end) laneStream(m mode, size, n, qd, batch int, st stamps) error {
	ls := x.lanes.all
	op := streamOp(m, x.compareSwap)
	inline := (op == opWrite || op == perftool.OpSend) && size <= x.MaxInline
	for _, l := range ls {
		l.outstanding = 0
	}
	posted, done, batches := 0, 0, 0
	var since time.Time
	for spins := 1; done < n; spins++ {
		var err error
		if posted, err = x.postBatches(ls, m, op, size, n, qd, batch, posted, inline, x.RecvAddr, st); err != nil {
			return err
		}
		got := x.Poller.Poll(pollBatch, func(c *transport.Completion) {
			if c.Match != transport.MatchOK || c.Opcode != prm.CQEReq || int(c.WRID) >= len(st.completed) {
				x.Fail(c)
				return
			}
			b := int(c.WRID)
			k := min(batch, n-b*batch)
			l := ls[b%len(ls)]
			l.outstanding -= k
			l.completed += k
			done += k
			st.complete(batches, done)
			batches++
		})
		if x.Failed {
			return x.CompletionError(uint32(done))
		}
		if got == 0 {
			if err := x.Idle(spins, &since, uint32(done)); err != nil {
				return err
			}
		}
	}
	return nil
}

// verifyCounters checks that the counters of the peer's n queue pairs
// (8 bytes each, in host byte order as the device's 8-byte atomics keep
// them, at the start of the receive area) add up to want.
func (x *end) verifyCounters(n int, want uint64) error {
	var sum uint64
	for i := range n {
		sum += binary.NativeEndian.Uint64(x.recv[i*atomicSize:])
	}
	if sum != want {
		return fmt.Errorf("%s: the counters the atomics incremented add up to %d, want %d", x.Name, sum, want)
	}
	return nil
}

// laneAddresses are perftest's address lines of the end's queue pairs and
// of the peer's (one per queue pair, all local lines first).
func laneAddresses(cfg config, x *end, outReads int, gid bool) (local, remote []address) {
	for _, l := range x.lanes.all {
		a := addressOf("local", cfg.mode, l.local, outReads, gid)
		a.region(x.endpoint(), cfg.mode)
		local = append(local, a)
		r := addressOf("remote", cfg.mode, l.peer, outReads, gid)
		remote = append(remote, r)
	}
	if cfg.conn == connDC {
		for i := range local {
			local[i].srqn, local[i].showSRQN = x.srqn(), true
			remote[i].srqn, remote[i].showSRQN = x.peerSRQN, true
		}
	}
	return local, remote
}

// region fills in the buffer of an address from ep's regions, as
// addressOf does (a UD endpoint carries none).
func (a *address) region(ep endpoint.Endpoint, m mode) {
	b := addressOf(a.side, m, ep, a.outReads, a.hasGID)
	a.rkey, a.vaddr = b.rkey, b.vaddr
}

// laneCounts returns how many messages each lane completed in streams
// since the end was made.
func (x *end) laneCounts() []int {
	if x.lanes == nil {
		return nil
	}
	n := make([]int, len(x.lanes.all))
	for i, l := range x.lanes.all {
		n[i] = l.completed
	}
	return n
}

// defaultInline applies perftest's inline size for UD, DC and RC's
// send_lat (236 where write_lat has 220) when -I was not given.
func (c *config) defaultInline() {
	switch {
	case c.inlineSet:
	case c.conn == connUD:
		c.inline = defaultInlineUD
	case c.conn == connDC:
		c.inline = defaultInlineDC
	case c.mode == sendLat:
		c.inline = defaultInlineSendLat
	}
}

// srqOnOff is perftest's "Using SRQ": DC receives through one.
func (c config) srqOnOff() string {
	if c.conn == connDC {
		return "ON"
	}
	return "OFF"
}

// writeAddresses prints the address lines of the two ends: one per queue
// pair, the local ones first, as perftest does.
func writeAddresses(b *strings.Builder, in info) {
	if in.locals == nil {
		b.WriteString(in.local.String())
		b.WriteString(in.remote.String())
		return
	}
	for _, a := range in.locals {
		b.WriteString(a.String())
	}
	for _, a := range in.remotes {
		b.WriteString(a.String())
	}
}

// postBatches posts, from message posted of n on, the batches that fit:
// batch b (of batch messages, its last WQE signaled, work request id b)
// on lane b mod len(ls) while that lane stays at most qd outstanding, one
// doorbell per batch, its time in st.posted[b]. results is the local
// address READs and atomics return into. It returns the messages posted
// so far and allocates nothing.
func (x *end) postBatches(ls []*lane, m mode, op perftool.Op, size, n, qd, batch, posted int, inline bool, results uint64, st stamps) (int, error) {
	for posted < n {
		b := posted / batch
		l := ls[b%len(ls)]
		k := min(batch, n-posted)
		if l.outstanding+k > qd {
			break
		}
		for j := 0; j < k; j++ {
			flags := wqebuilder.Flags(0)
			if j == k-1 {
				flags = wqebuilder.Signaled
			}
			seq := uint32(l.atomics) + uint32(j)
			if err := x.post(l, op, uint64(b), flags, size, seq, inline, false, results); err != nil {
				return posted, err
			}
		}
		if m.atomic() {
			l.atomics += uint64(k)
		}
		l.send.RingDoorbell()
		st.posted[b] = cycles.Now()
		posted += k
		l.outstanding += k
	}
	return posted, nil
}
