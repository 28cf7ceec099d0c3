package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// Queue sizes of each end.
const (
	sendDepth = 64
	recvDepth = 128
	cqDepth   = 512
)

// slowCheck is how many empty polls pass between two looks at the clock
// (for the timeout) and at the abort flag: the hot loop reads neither.
const slowCheck = 1 << 14

// errAborted is returned by an end whose wait was ended because the other
// end failed.
var errAborted = errors.New("the other end failed")

// end is one side of the ping-pong: an RC queue pair with its own CQ (send
// and receive completions), a registered buffer whose first half receives
// the peer's writes and whose second half is the payload sent, and what it
// knows about the peer's buffer.
type end struct {
	name string
	pd   *ctx.ProtectionDomain
	cq   *ctx.CompletionQueue
	buf  *ctx.Buffer
	mr   *ctx.MemoryRegion
	qp   *rc.QP
	p    *rc.Poller

	// Data plane.
	size     int
	inline   bool   // the payload goes inline in the WQE
	recv     []byte // where the peer's writes land
	send     []byte // the payload (registered, so it can also go by SGE)
	saddr    uint64
	lkey     uint32
	raddr    uint64 // the peer's receive area
	rkey     uint32
	yield    bool // give the processor away after an empty poll
	sendsOut int  // signaled sends not yet completed
	timeout  time.Duration
	abort    *atomic.Bool

	// Filled by a failed wait, outside the hot path.
	bad    rc.Completion
	failed bool
}

// newEnd creates an end on c for messages of size bytes: buffer, region,
// CQ and an RC queue pair in INIT with every receive posted. inline asks
// for the payload inline when the device can carry it that way.
func newEnd(name string, c *ctx.Context, size int, inline bool, port, gidIndex uint8, timeout time.Duration) (x *end, err error) {
	x = &end{name: name, size: size, timeout: timeout, yield: c.Kind() == ctx.KindSoftware}
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
	half := (max(size, 1) + 4095) &^ 4095
	if x.buf, err = ctx.AllocBuffer(2*half, ctx.BufferOptions{}); err != nil {
		return x, err
	}
	if x.pd, err = c.AllocProtectionDomain(); err != nil {
		return x, err
	}
	if x.mr, err = x.pd.RegisterBuffer(x.buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite); err != nil {
		return x, err
	}
	mem := x.mr.Bytes()
	x.recv, x.send = mem[:size:size], mem[half:half+size:half+size]
	x.saddr, x.lkey = uint64(x.mr.Addr())+uint64(half), x.mr.LKey()
	for i := range x.send {
		x.send[i] = payloadByte(i)
	}
	if x.cq, err = c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: cqDepth}); err != nil {
		return x, err
	}
	x.inline = inline && size <= int(dev.MaxInline)
	cfg := rc.Config{SendDepth: sendDepth, RecvDepth: recvDepth, Port: port, GIDIndex: gidIndex}
	if x.inline {
		cfg.MaxInline = uint32(size)
	}
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
		if err = x.qp.BeginRecv(0).Finish(); err != nil {
			return x, fmt.Errorf("post receive: %w", err)
		}
	}
	x.qp.RingRecvDoorbell()
	return x, nil
}

// payloadByte is the content of byte i of every message (its first four
// bytes are then overwritten with the sequence number).
func payloadByte(i int) byte { return byte(i*7 + 3) }

// endpoint describes the end to its peer: the queue pair and the receive
// area it may write.
func (x *end) endpoint() endpoint.Endpoint {
	ep := x.qp.Endpoint()
	ep.Regions = []endpoint.RemoteRegion{{
		Address:   uint64(x.mr.Addr()),
		Length:    uint64(max(x.size, 1)),
		RemoteKey: x.mr.RKey(),
		Access:    endpoint.AccessRemoteWrite | endpoint.AccessLocalWrite,
	}}
	return ep
}

// connect takes the peer's receive area from its endpoint and connects the
// queue pair to it.
func (x *end) connect(peer endpoint.Endpoint) error {
	if len(peer.Regions) != 1 {
		return fmt.Errorf("%s: the peer's endpoint has %d regions, want 1", x.name, len(peer.Regions))
	}
	r := peer.Regions[0]
	if !r.Allows(endpoint.AccessRemoteWrite) || r.Length < uint64(x.size) {
		return fmt.Errorf("%s: the peer's receive area %v does not take %d-byte writes", x.name, r, x.size)
	}
	x.raddr, x.rkey = r.Address, r.RemoteKey
	return x.qp.Connect(peer)
}

// post sends message seq: an RDMA_WRITE_IMM, signaled, with the payload
// inline (or by SGE when it is too long for that) and the WQE copied to the
// BlueFlame register. The first four bytes of the payload carry seq. It
// allocates nothing.
func (x *end) post(seq uint32) error {
	if x.size >= 4 {
		binary.BigEndian.PutUint32(x.send, seq)
	}
	s, err := x.qp.Post(uint64(seq), wqebuilder.Signaled)
	if err != nil {
		return err
	}
	x.sendsOut++
	d := s.RdmaWriteImm(x.raddr, x.rkey, seq)
	if x.inline {
		return d.Inline(x.send).FinishBlueFlame()
	}
	return d.SGE(x.saddr, uint32(x.size), x.lkey).FinishBlueFlame()
}

// await busy-polls until message seq has arrived, checks that its data is
// in the receive area, and posts a receive in place of the one it used.
// Send completions met on the way are retired. It allocates nothing unless
// it fails.
func (x *end) await(seq uint32) error {
	got := false
	var since time.Time
	for spins := 1; !got; spins++ {
		n := x.p.Poll(4, func(c *rc.Completion) {
			switch {
			case c.Status != rc.StatusOK:
				x.bad, x.failed = *c, true
			case c.Opcode == prm.CQEReq:
				x.sendsOut--
			case c.Opcode == prm.CQERespWrImm && c.Immediate == seq:
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
	if x.size >= 4 && binary.BigEndian.Uint32(x.recv) != seq {
		return fmt.Errorf("%s: message %d: its completion arrived but the receive area holds sequence %d", x.name, seq, binary.BigEndian.Uint32(x.recv))
	}
	return x.qp.BeginRecv(0).FinishDoorbell()
}

// drain polls until every signaled send has completed.
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
// timeout and the abort flag.
func (x *end) slow(since *time.Time, seq uint32) error {
	if err := x.p.Err(); err != nil {
		return fmt.Errorf("%s: %w", x.name, err)
	}
	if x.abort != nil && x.abort.Load() {
		return errAborted
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
	if err := c.Err(); err != nil {
		return fmt.Errorf("%s: waiting for message %d: %w", x.name, seq, err)
	}
	return fmt.Errorf("%s: waiting for message %d: unexpected completion %v (wrid %d, immediate %d)", x.name, seq, c.Opcode, c.WRID, c.Immediate)
}

// verify checks the whole receive area against the last message, seq.
func (x *end) verify(seq uint32) error {
	for i, b := range x.recv {
		want := payloadByte(i)
		if i < 4 && x.size >= 4 {
			want = byte(seq >> (24 - 8*i))
		}
		if b != want {
			return fmt.Errorf("%s: byte %d of the last message is %#02x, want %#02x", x.name, i, b, want)
		}
	}
	return nil
}

// close destroys everything the end created.
func (x *end) close() error {
	var errs []error
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

// roundTrip is one iteration with both ends in the calling goroutine: a
// sends seq, b receives it and answers with seq, a receives the answer.
func roundTrip(a, b *end, seq uint32) error {
	if err := a.post(seq); err != nil {
		return err
	}
	if err := b.await(seq); err != nil {
		return err
	}
	if err := b.post(seq); err != nil {
		return err
	}
	return a.await(seq)
}
