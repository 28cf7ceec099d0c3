package main

import (
	"encoding/binary"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
)

// Receive queue (default; -r) and CQ sizes of each end; the send queue
// holds -qd WQEs.
const (
	recvDepth = 128
	cqDepth   = 1024
)

// sendRecvDepth is send_bw's receive queue size unless -r says otherwise,
// perftest's (DEF_RX_SEND): a SEND that finds no receive posted waits for
// the RNR timer, which a stream must rarely meet.
const sendRecvDepth = 512

// end is one side of a test: a perftool.End whose receive area is where
// the peer writes, sends or reads into and whose source area is the
// payload this end sends or the peer reads.
type end struct {
	*perftool.End
	recv []byte            // End.Recv
	peer endpoint.Endpoint // the peer's, once connected
	// compareSwap makes the atomic modes post CMP_AND_SWAP, not
	// FETCH_AND_ADD.
	compareSwap bool
	// atomics counts the atomics a bandwidth test posted since reset (the
	// compare value of the next CMP_AND_SWAP).
	atomics uint64
	// lanes are the queue pairs of -c UD|DC and -q (nil: the End's RC
	// queue pair alone); peerSRQN is the peer's SRQ number (DC).
	lanes    *lanes
	peerSRQN uint32

	// early counts the SENDs a duplex test's phase took that belong to
	// the next phase.
	early int
	// mtu, when set (-m), caps the MTU this end announces and the path
	// MTU it connects with.
	mtu ctx.MTU

	// solo is the lane of the end's one RC queue pair that a duplex
	// stream posts to when the end has no lanes.
	solo []*lane
	// recvPending counts the receives posted on the end's own queue pair
	// whose doorbell is not rung yet; recvErr is the first error of a
	// repost in a poll.
	recvPending int
	recvErr     error

	// peerRounds, set on a client whose ping-pong peer is another
	// process, tells the peer before each round of -n of a test run for a
	// time whether one follows (measureRounds' next).
	peerRounds func(more bool) error
}

// endConfig is each end's setup: buffers for messages of up to
// bufferSize bytes, sendDepth WQEs in flight, payloads of up to -inline
// bytes (capped by the device) inline, receives that take a SEND.
func (c config) endConfig() perftool.EndConfig {
	size, inline := c.bufferSize(), c.inline
	return perftool.EndConfig{
		Size:        size + c.grh(),
		SendDepth:   c.sendDepth(),
		RecvDepth:   c.rxDepth,
		CQDepth:     max(cqDepth, (c.qps()+1)*(c.rxDepth+c.sendDepth())),
		Access:      ctx.AccessRemoteRead | ctx.AccessRemoteAtomic,
		Inline:      func(device int) int { return max(min(inline, device, size), 0) },
		RecvSGE:     true,
		Port:        uint8(c.port),
		GIDIndex:    c.gidIndex,
		Timeout:     c.timeout,
		SL:          uint8(c.sl),
		QPTimeout:   c.qpTimeout,
		MaxRdAtomic: c.outReads,

		TrafficClass: uint8(c.tclass),
		Events:       c.events,
	}
}

// wrap makes an end of x.
func wrap(x *perftool.End) *end { return &end{End: x, recv: x.Recv} }

// newEndOn creates an end on c as cfg says.
func newEndOn(name string, c *ctx.Context, cfg config) (*end, error) {
	x, err := perftool.NewEnd(name, c, cfg.endConfig())
	if err != nil {
		return nil, err
	}
	return wrap(x), nil
}

// endpoint describes the end to its peer: the queue pair, the area the
// peer writes and sends into, and the area it reads from.
func (x *end) endpoint() endpoint.Endpoint {
	ep := x.QP.Endpoint()
	if x.mtu.Valid() && x.mtu < ep.MTU {
		ep.MTU = x.mtu
	}
	n := uint64(max(len(x.recv), 1))
	ep.Regions = []endpoint.RemoteRegion{
		{Address: x.RecvAddr, Length: n, RemoteKey: x.MR.RKey(), Access: ctx.AccessRemoteWrite | ctx.AccessLocalWrite | ctx.AccessRemoteAtomic},
		{Address: x.SrcAddr, Length: n, RemoteKey: x.MR.RKey(), Access: ctx.AccessRemoteRead},
	}
	return ep
}

// connect takes the peer's areas from its endpoint and connects the queue
// pair to it.
func (x *end) connect(peer endpoint.Endpoint) error {
	if len(peer.Regions) != 2 {
		return fmt.Errorf("%s: the peer's endpoint has %d regions, want 2", x.Name, len(peer.Regions))
	}
	w, r := peer.Regions[0], peer.Regions[1]
	if !w.Allows(ctx.AccessRemoteWrite) || !r.Allows(ctx.AccessRemoteRead) || w.Length < uint64(len(x.recv)) || r.Length < uint64(len(x.recv)) {
		return fmt.Errorf("%s: the peer's areas %v and %v do not take %d-byte writes and reads", x.Name, w, r, len(x.recv))
	}
	x.PeerRecv, x.PeerSrc, x.RKey = w.Address, r.Address, w.RemoteKey
	if x.mtu.Valid() && x.mtu < peer.MTU {
		peer.MTU = x.mtu
	}
	x.peer = peer
	return x.QP.Connect(peer)
}

// op is what a latency mode posts.
func (m mode) op() perftool.Op {
	switch m {
	case readLat:
		return perftool.OpRead
	case atomicLat, atomicBW:
		return perftool.OpFetchAdd
	case sendLat:
		return perftool.OpSend
	}
	return perftool.OpWriteImm
}

// postLatency sends message seq of size bytes for a latency test: a
// signaled RDMA_WRITE_IMM (carrying seq) or SEND, its first four bytes the
// sequence number, inline when it fits, through BlueFlame; or an RDMA_READ
// of the peer's source area into the receive area. It allocates nothing.
func (x *end) postLatency(m mode, size int, seq uint32) error {
	op := m.op()
	if op == perftool.OpFetchAdd && x.compareSwap {
		op = perftool.OpCompareSwap
	}
	if x.lanes != nil {
		return x.postLane(op, size, seq, size <= x.MaxInline)
	}
	return x.Post(op, size, seq, size <= x.MaxInline)
}

// await busy-polls until message seq has arrived (an RDMA_WRITE_IMM with
// immediate seq, or a SEND of size bytes), checks the sequence number in
// the receive area and posts a receive in place of the one it used. It
// allocates nothing unless it fails.
func (x *end) await(m mode, size int, seq uint32) error {
	if x.lanes != nil {
		return x.awaitLane(m.op(), size, seq)
	}
	return x.Await(m.op(), size, seq)
}

// drain polls until every signaled send has completed. A send completion's
// work request id is the number of sends it retires (1 in latency tests).
func (x *end) drain() error { return x.Drain() }

// verify checks that the receive area holds a size-byte message (its first
// four bytes stamped with seq when stamped is set) and nothing past it.
func (x *end) verify(size int, stamped bool, seq uint32) error {
	for i, b := range x.recv[:size] {
		if want := perftool.Want(i, size, stamped, seq); b != want {
			return fmt.Errorf("%s: byte %d of the %d-byte message is %#02x, want %#02x", x.Name, i, size, b, want)
		}
	}
	if size < len(x.recv) && x.recv[size] != 0 {
		return fmt.Errorf("%s: byte %d, past the %d-byte message, was written", x.Name, size, size)
	}
	return nil
}

// reset clears the receive area (and with it the atomics' counter) before
// a size.
func (x *end) reset() {
	clear(x.recv)
	x.atomics = 0
	if x.lanes != nil {
		for _, l := range x.lanes.all {
			l.atomics = 0
		}
	}
	for _, l := range x.solo {
		l.atomics = 0
	}

	x.early = 0
}

// verifyCounter checks that the first 8 bytes of b, in host byte order
// (as the device's 8-byte atomics leave them), hold want.
func (x *end) verifyCounter(b []byte, want uint64, what string) error {
	if got := binary.NativeEndian.Uint64(b); got != want {
		return fmt.Errorf("%s: %s is %d, want %d", x.Name, what, got, want)
	}
	return nil
}

// close destroys everything the end created.
func (x *end) close() error { return x.Close() }
