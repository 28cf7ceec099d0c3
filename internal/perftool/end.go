package perftool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/connpeek"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// SlowCheck is how many empty polls pass between two looks at the clock
// (for the timeout) and at the abort flag: the hot loop reads neither.
const SlowCheck = 1 << 14

// ErrAborted is returned by a wait that was ended because the other end
// failed (End.Abort was set).
var ErrAborted = errors.New("the other end failed")

// EndConfig says how to build an End.
type EndConfig struct {
	// Size is the longest message, and the length of each of the two areas.
	Size int
	// Queue sizes.
	SendDepth, RecvDepth, CQDepth int
	// Access is what the peer may do with the buffer besides write into it.
	Access ctx.Access
	// Inline returns the queue pair's max inline data from the device's.
	Inline func(deviceMax int) int
	// RecvSGE posts receives with the receive area as their scatter entry
	// (a SEND lands there); without it receives have none (only
	// RDMA_WRITE_IMM arrives).
	RecvSGE bool
	// Port is the local port.
	Port uint8
	// GIDIndex is the local GID table entry; a negative one is resolved
	// by GIDSelector.
	GIDIndex int
	// Timeout bounds every wait.
	Timeout time.Duration
	// SL is the path's service level, QPTimeout the local ACK timeout code
	// and MaxRdAtomic the reads and atomics outstanding (0: the queue
	// pair's defaults), as rc.Config.
	SL                     uint8
	QPTimeout, MaxRdAtomic int
	// TrafficClass is the GRH's traffic class of the path (rc.Config).
	TrafficClass uint8
	// Events makes the waits sleep on the CQ's completion events
	// (completion.Notifier) instead of busy-polling.
	Events bool
}

// End is one side of a measurement: an RC queue pair with its own CQ (send
// and receive completions) and a registered buffer whose first half is
// where the peer writes, sends or reads into (Recv) and whose second half
// is the payload this end sends or the peer reads (Src), and what it knows
// about the peer's two areas.
type End struct {
	Name   string
	PD     *ctx.ProtectionDomain
	CQ     *ctx.CompletionQueue
	Buf    *ctx.Buffer
	MR     *ctx.MemoryRegion
	QP     *rc.QP
	Poller *transport.Poller

	MaxInline int    // the queue pair's max inline data
	Recv      []byte // the peer's writes and sends land here, reads land here
	Src       []byte // the payload sent, or read by the peer
	RecvAddr  uint64
	SrcAddr   uint64
	LKey      uint32
	RecvSGE   bool // receives scatter into Recv

	PeerRecv, PeerSrc uint64 // the peer's areas
	RKey              uint32 // their remote key

	// Pause is what a wait does after an empty poll: nil on a NIC (the
	// next poll at once), Context.Idle on the software HCA and on the
	// emulated device (the polling goroutine runs a round of the model).
	Pause    func()
	SendsOut int // signaled sends not yet completed
	Timeout  time.Duration
	Abort    *atomic.Bool // when set, the waits give up with ErrAborted

	// Notifier, with EndConfig.Events, is what a wait sleeps on after an
	// empty poll.
	Notifier *completion.Notifier

	// Peer, when set, is the connection to the peer's end of the same
	// tool, on which the peer sends nothing while this end waits but
	// Sync's status. A wait that has found nothing for PeerCheck looks at
	// it every PeerCheck and fails at once, rather than at the timeout,
	// when the peer has closed it (it exited or was killed: endpoint.ErrPeerGone)
	// or says it failed (ErrPeerFailed). A queue pair with nothing in
	// flight learns nothing of a peer gone, on a NIC as on the model.
	Peer     net.Conn
	peerSeen time.Time // when a wait last looked at Peer
	sinceSeq uint32    // the seq of the wait's last check (Idle)

	// Filled by a failed wait, outside the hot path.
	Bad    transport.Completion
	Failed bool
}

// NewEnd creates an end on c as cfg says: buffer, region, CQ and an RC
// queue pair in INIT with every receive posted. It closes what it made if
// it fails.
func NewEnd(name string, c *ctx.Context, cfg EndConfig) (*End, error) {
	gid, err := GIDSelector(cfg.GIDIndex)
	if err != nil {
		return nil, err
	}
	x, err := newEnd(name, c, cfg, gid)
	if err != nil {
		return nil, fmt.Errorf("%s: set up on %v: %w", name, c, err)
	}
	return x, nil
}

func newEnd(name string, c *ctx.Context, cfg EndConfig, gid ctx.GIDSelector) (x *End, err error) {
	x = &End{Name: name, Timeout: cfg.Timeout, Pause: pauseFor(c), RecvSGE: cfg.RecvSGE}
	defer func() {
		if err != nil {
			_ = x.Close()
			x = nil
		}
	}()
	dev, err := c.Query()
	if err != nil {
		return x, err
	}
	size := cfg.Size
	half := (max(size, 1) + 4095) &^ 4095
	if x.Buf, err = ctx.AllocBuffer(2*half, ctx.BufferOptions{}); err != nil {
		return x, err
	}
	if x.PD, err = c.AllocProtectionDomain(); err != nil {
		return x, err
	}
	if x.MR, err = x.PD.RegisterBuffer(x.Buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite|cfg.Access); err != nil {
		return x, err
	}
	mem := x.MR.Bytes()
	x.Recv, x.Src = mem[:size:size], mem[half:half+size:half+size]
	x.RecvAddr, x.SrcAddr, x.LKey = uint64(x.MR.Addr()), uint64(x.MR.Addr())+uint64(half), x.MR.LKey()
	for i := range x.Src {
		x.Src[i] = PayloadByte(i)
	}
	if x.CQ, err = c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: uint32(cfg.CQDepth), EventChannel: cfg.Events}); err != nil {
		return x, err
	}
	x.MaxInline = cfg.Inline(int(dev.MaxInline))
	qcfg := rc.Config{SendDepth: uint32(cfg.SendDepth), RecvDepth: uint32(cfg.RecvDepth), Port: cfg.Port, GID: gid, MaxInline: uint32(x.MaxInline),
		SL: cfg.SL, Timeout: cfg.QPTimeout, MaxRdAtomic: cfg.MaxRdAtomic, TrafficClass: cfg.TrafficClass}
	if x.QP, err = rc.New(x.PD, x.CQ, qcfg); err != nil {
		return x, err
	}
	if x.Poller, err = transport.NewPoller(x.CQ); err != nil {
		return x, err
	}
	if err = x.Poller.Add(x.QP); err != nil {
		return x, err
	}
	if cfg.Events {
		if x.Notifier, err = completion.NewNotifier(x.CQ, x.Poller.CQ()); err != nil {
			return x, err
		}
	}
	for range cfg.RecvDepth {
		r := x.QP.BeginRecv(0)
		if x.RecvSGE {
			r = r.SGE(x.RecvAddr, uint32(len(x.Recv)), x.LKey)
		}
		if err = r.Finish(); err != nil {
			return x, fmt.Errorf("post receive: %w", err)
		}
	}
	x.QP.RingRecvDoorbell()
	return x, nil
}

// PayloadByte is the content of byte i of every payload (latency tests
// then stamp the sequence number on the first four bytes).
func PayloadByte(i int) byte { return byte(i*7 + 3) }

// Want is the byte i of a size-byte message should hold: the payload's,
// or the sequence number seq on the first four bytes when stamped is set
// and the message has four bytes.
func Want(i, size int, stamped bool, seq uint32) byte {
	if stamped && i < 4 && size >= 4 {
		return byte(seq >> (24 - 8*i))
	}
	return PayloadByte(i)
}

// Op is what Post sends.
type Op uint8

// The operations of Post.
const (
	OpWriteImm    Op = iota // RDMA_WRITE_IMM into the peer's receive area, immediate seq
	OpSend                  // SEND into the peer's posted receive
	OpRead                  // RDMA_READ of the peer's source area into the receive area
	OpFetchAdd              // fetch-and-add of 1 to the first 8 bytes of the peer's receive area, the old value into the receive area
	OpCompareSwap           // compare-and-swap of seq for seq+1 there, the old value into the receive area
)

// Post sends message seq of size bytes: a signaled RDMA_WRITE_IMM or SEND
// whose first four bytes are the sequence number, inline when inline is
// set, an RDMA_READ, or an 8-byte atomic (size and inline unused); through
// BlueFlame. It allocates nothing.
func (x *End) Post(op Op, size int, seq uint32, inline bool) error {
	if size >= 4 && op < OpRead {
		binary.BigEndian.PutUint32(x.Src, seq)
	}
	s, err := x.QP.Post(uint64(seq), wqebuilder.Signaled)
	if err != nil {
		return err
	}
	x.SendsOut++
	var d wqebuilder.DataStage
	switch op {
	case OpRead:
		return s.RdmaRead(x.PeerSrc, x.RKey).SGE(x.RecvAddr, uint32(size), x.LKey).FinishBlueFlame()
	case OpFetchAdd:
		return s.AtomicFA(x.PeerRecv, x.RKey, 1).Result(x.RecvAddr, x.LKey).FinishBlueFlame()
	case OpCompareSwap:
		return s.AtomicCS(x.PeerRecv, x.RKey, uint64(seq), uint64(seq)+1).Result(x.RecvAddr, x.LKey).FinishBlueFlame()
	case OpSend:
		d = s.Send()
	default:
		d = s.RdmaWriteImm(x.PeerRecv, x.RKey, seq)
	}
	if inline {
		return d.Inline(x.Src[:size]).FinishBlueFlame()
	}
	return d.SGE(x.SrcAddr, uint32(size), x.LKey).FinishBlueFlame()
}

// Await busy-polls until message seq has arrived (an RDMA_WRITE_IMM with
// immediate seq, or with op OpSend a SEND of size bytes), checks the
// sequence number in the receive area and posts a receive in place of the
// one it used. Send completions met on the way are retired. It allocates
// nothing unless it fails.
func (x *End) Await(op Op, size int, seq uint32) error {
	got := false
	var since time.Time
	for spins := 1; !got; spins++ {
		n := x.Poller.Poll(4, func(c *transport.Completion) {
			switch {
			case c.Match != transport.MatchOK:
				x.Fail(c)
			case c.Opcode == prm.CQEReq:
				x.SendsOut--
			case op == OpWriteImm && c.Opcode == prm.CQERespWrImm && c.Immediate == seq:
				got = true
			case op == OpSend && c.Opcode == prm.CQERespSend && c.ByteCount == uint32(size):
				got = true
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
	if size >= 4 && binary.BigEndian.Uint32(x.Recv) != seq {
		return fmt.Errorf("%s: message %d: its completion arrived but the receive area holds sequence %d", x.Name, seq, binary.BigEndian.Uint32(x.Recv))
	}
	r := x.QP.BeginRecv(0)
	if x.RecvSGE {
		r = r.SGE(x.RecvAddr, uint32(len(x.Recv)), x.LKey)
	}
	return r.FinishDoorbell()
}

// drainSeq stands for Drain's wait, which is for no message in particular,
// in the waits' errors (waitedFor).
const drainSeq = ^uint32(0)

// waitedFor names what a wait for seq waited for, in its errors.
func waitedFor(seq uint32) string {
	if seq == drainSeq {
		return "the completions of the sends posted"
	}
	return fmt.Sprintf("message %d", seq)
}

// Drain polls until every signaled send has completed.
func (x *End) Drain() error {
	var since time.Time
	for spins := 1; x.SendsOut > 0; spins++ {
		n := x.Poller.Poll(4, func(c *transport.Completion) {
			if c.Match == transport.MatchOK && c.Opcode == prm.CQEReq {
				x.SendsOut--
				return
			}
			x.Fail(c)
		})
		if x.Failed {
			return x.CompletionError(drainSeq)
		}
		if n == 0 {
			if err := x.Idle(spins, &since, drainSeq); err != nil {
				return err
			}
		}
	}
	return nil
}

// pauseFor is End.Pause for an end on c: the model's round on the software
// HCA and on the emulated device (Context.Idle runs it there), nothing on
// a NIC.
func pauseFor(c *ctx.Context) func() {
	if OnModel(c) {
		return c.Idle
	}
	return nil
}

// Idle is what a wait does after its spins-th poll found nothing: with a
// Notifier it sleeps until the CQ has a completion (or the end's timeout
// passes, an error); else it pauses (End.Pause: on the software HCA and
// the emulated device it runs a round of the model) and every SlowCheck
// empty polls checks the poller's own errors, the abort flag and the
// timeout. seq is the message waited for, for the error, or in a stream
// the messages done so far: the timeout counts from the first check that
// saw this seq (*since), so that a stream longer than the timeout runs on
// while its messages complete, and fails only after a timeout without one.
func (x *End) Idle(spins int, since *time.Time, seq uint32) error {
	if x.Notifier != nil {
		return x.sleep(seq)
	}
	if x.Pause != nil {
		x.Pause()
	}
	if spins%SlowCheck != 0 {
		return nil
	}
	if err := x.Poller.Err(); err != nil {
		return fmt.Errorf("%s: %w", x.Name, err)
	}
	if x.Abort != nil && x.Abort.Load() {
		return ErrAborted
	}
	now := time.Now()
	if since.IsZero() || seq != x.sinceSeq {
		*since, x.sinceSeq = now, seq
		return nil
	}
	if now.Sub(*since) > x.Timeout {
		return fmt.Errorf("%s: no completion for %s within %v (%d sends outstanding)", x.Name, waitedFor(seq), x.Timeout, x.SendsOut)
	}
	if x.Peer != nil && now.Sub(*since) >= PeerCheck && now.Sub(x.peerSeen) >= PeerCheck {
		x.peerSeen = now
		return x.peerError(seq)
	}
	return nil
}

// PeerCheck is how long a wait finds nothing before it looks at End.Peer,
// and how often it looks again.
const PeerCheck = 100 * time.Millisecond

// peerError looks at End.Peer without consuming anything: nil while the
// peer keeps it open and silent (or has said it is fine), else the wait
// for message seq's error, matching endpoint.ErrPeerGone or ErrPeerFailed.
func (x *End) peerError(seq uint32) error {
	// connpeek looks through RawConn.Control, not Read: a read past the
	// connection's deadline (Sync's, a -timeout from the handshake) would
	// not run at all.
	var why error
	switch s, first := connpeek.Peek(x.Peer); {
	case s == connpeek.Closed:
		why = endpoint.ErrPeerGone
	case s == connpeek.Data && first == statusFailed:
		why = ErrPeerFailed
	case s == connpeek.Reset:
		why = fmt.Errorf("%w (connection reset)", endpoint.ErrPeerGone)
	default:
		return nil
	}
	return fmt.Errorf("%s: waiting for %s (%d sends outstanding): %w", x.Name, waitedFor(seq), x.SendsOut, why)
}

// sleep waits on the Notifier for a completion, for at most the end's
// timeout; the abort flag is looked at before it sleeps. Unlike the busy
// loop it allocates (the wait's context and its error paths).
func (x *End) sleep(seq uint32) error {
	if err := x.Poller.Err(); err != nil {
		return fmt.Errorf("%s: %w", x.Name, err)
	}
	if x.Abort != nil && x.Abort.Load() {
		return ErrAborted
	}
	// In slices of PeerCheck with a Peer to look at between them.
	for left := x.Timeout; ; {
		d := left
		if x.Peer != nil {
			d = min(d, PeerCheck)
		}
		err := x.Notifier.WaitTimeout(d)
		if err == nil {
			return nil
		}
		if left -= d; left <= 0 || !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s: no completion for %s within %v (%d sends outstanding): %w", x.Name, waitedFor(seq), x.Timeout, x.SendsOut, err)
		}
		if err := x.peerError(seq); err != nil {
			return err
		}
	}
}

// Fail records c as the completion that fails the wait, unless one
// already did: the first is the cause, where a queue pair in error
// flushes the work requests after it and a poll returns their completions
// with it (a send's RETRY_EXC_ERR, then the receives' WR_FLUSH_ERR).
func (x *End) Fail(c *transport.Completion) {
	if !x.Failed {
		x.Bad, x.Failed = *c, true
	}
}

// CompletionError describes the completion that failed a wait for message
// seq (Bad) and clears Failed.
func (x *End) CompletionError(seq uint32) error {
	c := x.Bad
	x.Failed = false
	if err := c.Err(); err != nil {
		return fmt.Errorf("%s: waiting for %s: %w", x.Name, waitedFor(seq), err)
	}
	return fmt.Errorf("%s: waiting for %s: unexpected completion %v (wrid %d, immediate %d, %d bytes)", x.Name, waitedFor(seq), c.Opcode, c.WRID, c.Immediate, c.ByteCount)
}

// Close destroys everything the end created.
func (x *End) Close() error {
	var errs []error
	if x.Notifier != nil {
		errs = append(errs, x.Notifier.Close())
	}
	if x.QP != nil {
		errs = append(errs, x.QP.Close())
	}
	if x.PD != nil {
		errs = append(errs, x.PD.Close())
	}
	if x.CQ != nil {
		errs = append(errs, x.CQ.Close())
	}
	if x.Buf != nil {
		errs = append(errs, x.Buf.Close())
	}
	return errors.Join(errs...)
}
