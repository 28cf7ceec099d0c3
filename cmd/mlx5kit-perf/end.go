package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// Receive queue and CQ sizes of each end; the send queue holds -qd WQEs.
const (
	recvDepth = 128
	cqDepth   = 1024
)

// slowCheck is how many empty polls pass between two looks at the clock
// (for the timeout): the hot loop does not read it.
const slowCheck = 1 << 14

// end is one side of a test: an RC queue pair with its own CQ (send and
// receive completions), a registered buffer whose first half is where the
// peer writes, sends or reads into (recv) and whose second half is the
// payload this end sends or the peer reads (src), and the peer's two areas.
type end struct {
	name string
	pd   *ctx.ProtectionDomain
	cq   *ctx.CompletionQueue
	buf  *ctx.Buffer
	mr   *ctx.MemoryRegion
	qp   *rc.QP
	p    *rc.Poller

	maxInline int    // longest payload sent inline
	recv      []byte // the peer's writes and sends land here, reads land here
	src       []byte // the payload sent, or read by the peer
	recvAddr  uint64
	srcAddr   uint64
	lkey      uint32

	peerRecv, peerSrc uint64 // the peer's areas
	rkey              uint32

	yield    bool // give the processor away after an empty poll (software HCA)
	sendsOut int  // signaled sends not yet completed
	timeout  time.Duration

	// Filled by a failed wait, outside the hot path.
	bad    rc.Completion
	failed bool
}

// newEnd creates an end on c for messages of up to maxSize bytes with
// sendDepth WQEs in flight: buffer, region, CQ and an RC queue pair in INIT
// with every receive posted. Payloads of up to inline bytes (capped by the
// device) go inline.
func newEnd(name string, c *ctx.Context, maxSize, sendDepth, inline int, port, gidIndex uint8, timeout time.Duration) (x *end, err error) {
	x = &end{name: name, timeout: timeout, yield: c.Kind() == ctx.KindSoftware}
	defer func() {
		if err != nil {
			_ = x.close()
			x = nil
		}
	}()
	dev, err := c.Query()
	if err != nil {
		return x, err
	}
	half := (max(maxSize, 1) + 4095) &^ 4095
	if x.buf, err = ctx.AllocBuffer(2*half, ctx.BufferOptions{}); err != nil {
		return x, err
	}
	if x.pd, err = c.AllocProtectionDomain(); err != nil {
		return x, err
	}
	if x.mr, err = x.pd.RegisterBuffer(x.buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite|ctx.AccessRemoteRead); err != nil {
		return x, err
	}
	mem := x.mr.Bytes()
	x.recv, x.src = mem[:maxSize:maxSize], mem[half:half+maxSize:half+maxSize]
	x.recvAddr, x.srcAddr, x.lkey = uint64(x.mr.Addr()), uint64(x.mr.Addr())+uint64(half), x.mr.LKey()
	for i := range x.src {
		x.src[i] = payloadByte(i)
	}
	if x.cq, err = c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: cqDepth}); err != nil {
		return x, err
	}
	x.maxInline = max(min(inline, int(dev.MaxInline), maxSize), 0)
	cfg := rc.Config{SendDepth: uint32(sendDepth), RecvDepth: recvDepth, Port: port, GIDIndex: gidIndex, MaxInline: uint32(x.maxInline)}
	if x.qp, err = rc.New(x.pd, x.cq, nil, cfg); err != nil {
		return x, err
	}
	if x.p, err = rc.NewPoller(x.cq); err != nil {
		return x, err
	}
	if err = x.p.Add(&x.qp.Queue); err != nil {
		return x, err
	}
	for range recvDepth {
		if err = x.qp.BeginRecv(0).SGE(x.recvAddr, uint32(len(x.recv)), x.lkey).Finish(); err != nil {
			return x, fmt.Errorf("post receive: %w", err)
		}
	}
	x.qp.RingRecvDoorbell()
	return x, nil
}

// payloadByte is the content of byte i of every payload (latency tests
// then stamp the sequence number on the first four bytes).
func payloadByte(i int) byte { return byte(i*7 + 3) }

// endpoint describes the end to its peer: the queue pair, the area the
// peer writes and sends into, and the area it reads from.
func (x *end) endpoint() endpoint.Endpoint {
	ep := x.qp.Endpoint()
	n := uint64(max(len(x.recv), 1))
	ep.Regions = []endpoint.RemoteRegion{
		{Address: x.recvAddr, Length: n, RemoteKey: x.mr.RKey(), Access: endpoint.AccessRemoteWrite | endpoint.AccessLocalWrite},
		{Address: x.srcAddr, Length: n, RemoteKey: x.mr.RKey(), Access: endpoint.AccessRemoteRead},
	}
	return ep
}

// connect takes the peer's areas from its endpoint and connects the queue
// pair to it.
func (x *end) connect(peer endpoint.Endpoint) error {
	if len(peer.Regions) != 2 {
		return fmt.Errorf("%s: the peer's endpoint has %d regions, want 2", x.name, len(peer.Regions))
	}
	w, r := peer.Regions[0], peer.Regions[1]
	if !w.Allows(endpoint.AccessRemoteWrite) || !r.Allows(endpoint.AccessRemoteRead) || w.Length < uint64(len(x.recv)) || r.Length < uint64(len(x.recv)) {
		return fmt.Errorf("%s: the peer's areas %v and %v do not take %d-byte writes and reads", x.name, w, r, len(x.recv))
	}
	x.peerRecv, x.peerSrc, x.rkey = w.Address, r.Address, w.RemoteKey
	return x.qp.Connect(peer)
}

// postLatency sends message seq of size bytes for a latency test: a
// signaled RDMA_WRITE_IMM (carrying seq) or SEND, its first four bytes the
// sequence number, inline when it fits, through BlueFlame; or an RDMA_READ
// of the peer's source area into the receive area. It allocates nothing.
func (x *end) postLatency(m mode, size int, seq uint32) error {
	if size >= 4 && m != readLat {
		binary.BigEndian.PutUint32(x.src, seq)
	}
	s, err := x.qp.Post(uint64(seq), wqebuilder.Signaled)
	if err != nil {
		return err
	}
	x.sendsOut++
	var d wqebuilder.DataStage
	switch m {
	case readLat:
		return s.RdmaRead(x.peerSrc, x.rkey).SGE(x.recvAddr, uint32(size), x.lkey).FinishBlueFlame()
	case sendLat:
		d = s.Send()
	default:
		d = s.RdmaWriteImm(x.peerRecv, x.rkey, seq)
	}
	if size <= x.maxInline {
		return d.Inline(x.src[:size]).FinishBlueFlame()
	}
	return d.SGE(x.srcAddr, uint32(size), x.lkey).FinishBlueFlame()
}

// await busy-polls until message seq has arrived (an RDMA_WRITE_IMM with
// immediate seq, or a SEND of size bytes), checks the sequence number in
// the receive area and posts a receive in place of the one it used. Send
// completions met on the way are retired. It allocates nothing unless it
// fails.
func (x *end) await(m mode, size int, seq uint32) error {
	got := false
	var since time.Time
	for spins := 1; !got; spins++ {
		n := x.p.Poll(4, func(c *rc.Completion) {
			switch {
			case c.Status != rc.StatusOK:
				x.bad, x.failed = *c, true
			case c.Opcode == prm.CQEReq:
				x.sendsOut--
			case m == writeLat && c.Opcode == prm.CQERespWrImm && c.Immediate == seq:
				got = true
			case m == sendLat && c.Opcode == prm.CQERespSend && c.ByteCount == uint32(size):
				got = true
			default:
				x.bad, x.failed = *c, true
			}
		})
		if x.failed {
			return x.completionError(seq)
		}
		if n == 0 {
			if x.yield {
				runtime.Gosched()
			}
			if spins%slowCheck == 0 {
				if err := x.slow(&since, seq); err != nil {
					return err
				}
			}
		}
	}
	if size >= 4 && binary.BigEndian.Uint32(x.recv) != seq {
		return fmt.Errorf("%s: message %d: its completion arrived but the receive area holds sequence %d", x.name, seq, binary.BigEndian.Uint32(x.recv))
	}
	return x.qp.BeginRecv(0).SGE(x.recvAddr, uint32(len(x.recv)), x.lkey).FinishDoorbell()
}

// drain polls until every signaled send has completed. A send completion's
// work request id is the number of sends it retires (1 in latency tests).
func (x *end) drain() error {
	var since time.Time
	for spins := 1; x.sendsOut > 0; spins++ {
		n := x.p.Poll(4, func(c *rc.Completion) {
			if c.Status == rc.StatusOK && c.Opcode == prm.CQEReq {
				x.sendsOut--
				return
			}
			x.bad, x.failed = *c, true
		})
		if x.failed {
			return x.completionError(0)
		}
		if n == 0 {
			if x.yield {
				runtime.Gosched()
			}
			if spins%slowCheck == 0 {
				if err := x.slow(&since, 0); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// slow is the part of a wait that runs every slowCheck empty polls: the
// poller's own errors and the timeout.
func (x *end) slow(since *time.Time, seq uint32) error {
	if err := x.p.Err(); err != nil {
		return fmt.Errorf("%s: %w", x.name, err)
	}
	now := time.Now()
	if since.IsZero() {
		*since = now
		return nil
	}
	if now.Sub(*since) > x.timeout {
		return fmt.Errorf("%s: no completion for message %d within %v (%d sends outstanding)", x.name, seq, x.timeout, x.sendsOut)
	}
	return nil
}

func (x *end) completionError(seq uint32) error {
	c := x.bad
	x.failed = false
	if err := c.Err(); err != nil {
		return fmt.Errorf("%s: waiting for message %d: %w", x.name, seq, err)
	}
	return fmt.Errorf("%s: waiting for message %d: unexpected completion %v (wrid %d, immediate %d, %d bytes)", x.name, seq, c.Opcode, c.WRID, c.Immediate, c.ByteCount)
}

// verify checks that the receive area holds a size-byte message (its first
// four bytes stamped with seq when stamped is set) and nothing past it.
func (x *end) verify(size int, stamped bool, seq uint32) error {
	for i, b := range x.recv[:size] {
		want := payloadByte(i)
		if stamped && i < 4 && size >= 4 {
			want = byte(seq >> (24 - 8*i))
		}
		if b != want {
			return fmt.Errorf("%s: byte %d of the %d-byte message is %#02x, want %#02x", x.name, i, size, b, want)
		}
	}
	if size < len(x.recv) && x.recv[size] != 0 {
		return fmt.Errorf("%s: byte %d, past the %d-byte message, was written", x.name, size, size)
	}
	return nil
}

// close destroys everything the end created.
func (x *end) close() error {
	var errs []error
	if x.qp != nil {
		errs = append(errs, x.qp.Close())
	}
	if x.pd != nil {
		errs = append(errs, x.pd.Close())
	}
	if x.cq != nil {
		errs = append(errs, x.cq.Close())
	}
	if x.buf != nil {
		errs = append(errs, x.buf.Close())
	}
	return errors.Join(errs...)
}
