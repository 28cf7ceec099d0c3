package rc

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/transport/newqp"
	"github.com/mlx5kit/mlx5kit/internal/transport/qpcore"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

const name = "rc"

// Config configures an RC queue pair. The knobs of type int follow the
// convention of net.Dialer.KeepAlive: 0 picks the default, a negative value
// means 0.
type Config struct {
	// SendDepth is the number of send work requests that may be
	// outstanding (max_send_wr); it must not be 0.
	SendDepth uint32
	// RecvDepth is the number of receive work requests (max_recv_wr) of
	// the QP's own receive queue. 0 creates none: the QP then receives
	// through SRQ, or only serves RDMA reads, writes and atomics.
	RecvDepth uint32
	// MaxSendSGE and MaxRecvSGE are the scatter/gather entries per WQE
	// (default 1). The provider may grant more; see Limits.
	MaxSendSGE, MaxRecvSGE uint32
	// MaxInline is the most payload one send WQE carries inline.
	MaxInline uint32
	// SRQ, when set, receives for the QP (RecvDepth must then be 0).
	SRQ *transport.SharedReceiveQueue
	// RecvCQ, when set, gets the QP's receive completions; unset, they go
	// to the CQ given to New with the send completions.
	RecvCQ *ctx.CompletionQueue

	// Port is the local port (default 1) and GID the local GID table
	// entry used on RoCE: unset, one is
	// chosen (ctx.ChooseGID: a RoCE v2 GID, IPv4-mapped first);
	// ctx.GIDIndex(i) names entry i: an index past the port's GID table
	// (GIDTableLen or more) is refused, wrapping ctx.ErrInvalidArgument;
	// on InfiniBand an empty entry in it is taken as the zero GID (a GID
	// is used there only in a GRH). Endpoint and GID report the entry.
	Port uint8
	GID  ctx.GIDSelector
	// SL is the service level of the path: 0..15 on InfiniBand, 0..7 on
	// RoCE (the VLAN priority); New refuses a wider value.
	SL uint8
	// TrafficClass is the traffic class of the GRH (on RoCE the IP
	// header's DSCP and ECN bits, the TOS) when the path has one: on RoCE.
	// A path by LID (InfiniBand) has no GRH to carry it.
	TrafficClass uint8
	// PSN is the first packet sequence number this QP sends (24 bits); 0
	// picks a random one. Endpoint reports it.
	PSN uint32
	// RemoteAccess is what the peer may do through this QP (the memory
	// regions still decide for themselves); 0 allows remote write, read
	// and, on a device that reports atomics (ctx.DeviceAttr.AtomicHCA),
	// atomics.
	RemoteAccess ctx.Access

	// MaxRdAtomic is the number of RDMA reads and atomics outstanding, as
	// initiator and as responder (default 16, at most what the device
	// allows).
	MaxRdAtomic int
	// MinRNRTimer is the IB RNR timer code a sender is asked to wait
	// after finding no receive posted here (default 12: 0.64 ms; see
	// ctx.RNRTimerDuration).
	MinRNRTimer int
	// Timeout is the local ACK timeout code, 4.096 µs × 2^Timeout (default
	// 14: about 67 ms).
	Timeout int
	// RetryCount is the transport retry count (default 7) and RNRRetry the
	// RNR retry count (default 7: retry forever).
	RetryCount int
	RNRRetry   int
	// ScatterToCQE lets the device put payloads of up to 32 bytes (64 with
	// 128-byte CQEs) in the receive CQE; Complete copies them to the
	// receive buffer.
	ScatterToCQE bool
}

// QP is a reliable-connected queue pair. Its embedded transport.Queue
// posts receives, rings doorbells, turns CQEs into completions and has
// what every transport has (Handle, Limits, Fail, Close); Post starts a
// send WQE. Add the QP to the transport.Poller of its CQ.
//
// A QP is used by one goroutine at a time (posting, polling its CQs,
// Connect, Reset); Close may be called from any goroutine.
type QP struct {
	transport.Queue

	qp     *ctx.QueuePair
	port   newqp.Port
	psn    uint32
	remote endpoint.Endpoint
	attr   ctx.QPAttr // RTR and RTS attributes from the configuration
	access ctx.Access // what the peer may do through the QP
	tclass uint8      // Config.TrafficClass
}

// New creates an RC queue pair in pd with its completions on cq (its
// receive completions on cfg.RecvCQ when set), and moves it to INIT, so
// that receives may be posted before Connect. A configuration the device
// cannot satisfy is refused before anything is created.
func New(pd *ctx.ProtectionDomain, cq *ctx.CompletionQueue, cfg Config) (*QP, error) {
	var attr ctx.QPAttr
	spec := newqp.Spec{Transport: name, Op: "new QP", Type: ctx.QPTypeRC, CQ: cq, RecvCQ: cfg.RecvCQ,
		Caps: ctx.QueuePairCaps{SendDepth: cfg.SendDepth, RecvDepth: cfg.RecvDepth,
			MaxSendSGE: cfg.MaxSendSGE, MaxRecvSGE: cfg.MaxRecvSGE, MaxInline: cfg.MaxInline},
		SRQ: cfg.SRQ, Port: cfg.Port, GID: cfg.GID, SL: cfg.SL, PSN: cfg.PSN,
		RemoteAccess: cfg.RemoteAccess, ScatterToCQE: cfg.ScatterToCQE,
		Check: func(dev ctx.DeviceAttr) (err error) {
			attr, err = rcAttr(cfg, dev)
			return err
		},
	}
	c, err := newqp.Create(pd, spec)
	if err != nil {
		return nil, err
	}
	q := &QP{qp: c.QP, port: c.Port, attr: attr, access: c.Access, tclass: cfg.TrafficClass}
	if err := newqp.BringUp(&q.Queue, spec, c.QP, false,
		ctx.QPAttr{State: ctx.QPStateInit, Port: c.Port.Number, Access: c.Access}); err != nil {
		return nil, err
	}
	q.psn = cfg.PSN
	if q.psn == 0 {
		q.psn = newqp.RandomPSN()
	}
	q.attr.SQPSN = q.psn
	return q, nil
}

// rcAttr resolves the connection knobs of cfg.
func rcAttr(cfg Config, dev ctx.DeviceAttr) (ctx.QPAttr, error) {
	var a ctx.QPAttr
	maxRd := uint8(min(max(dev.MaxQPInitRdAtomic, 1), 255))
	if dev.MaxQPRdAtomic != 0 && dev.MaxQPRdAtomic < uint32(maxRd) {
		maxRd = uint8(dev.MaxQPRdAtomic)
	}
	if err := newqp.Settings(
		newqp.Setting{Name: "max RDMA reads/atomics", Value: cfg.MaxRdAtomic, Default: min(16, maxRd), Max: maxRd, Dst: &a.MaxRdAtomic},
		newqp.Setting{Name: "min RNR timer", Value: cfg.MinRNRTimer, Default: 12, Max: 31, Dst: &a.MinRNRTimer},
		newqp.Setting{Name: "timeout", Value: cfg.Timeout, Default: 14, Max: 31, Dst: &a.Timeout},
		newqp.Setting{Name: "retry count", Value: cfg.RetryCount, Default: 7, Max: 7, Dst: &a.RetryCount},
		newqp.Setting{Name: "RNR retry", Value: cfg.RNRRetry, Default: 7, Max: 7, Dst: &a.RNRRetry},
	); err != nil {
		return a, err
	}
	a.MaxDestRdAtomic = a.MaxRdAtomic
	a.Path.SL = cfg.SL
	return a, nil
}

// Post starts a send WQE with work request id wrid (returned by the
// completion) and flags (wqebuilder.Signaled, Solicited, Fence): pick the
// operation on the stage, add the payload, then Finish (and RingDoorbell
// for a batch) or FinishBlueFlame. Post refuses a QP that is not connected,
// is in error or is closed with a *wqebuilder.PostError (transport.ErrNotConnected, transport.ErrQPError,
// ctx.ErrClosed); the stage it returns then writes nothing and fails at Finish.
// It does not refuse an atomic on a device that reports none
// (ctx.DeviceAttr.AtomicHCA false), as libmlx5's post does with
// EOPNOTSUPP: the device completes that WQE with an error.
// Post allocates nothing and takes no lock.
func (q *QP) Post(wrid uint64, flags wqebuilder.Flags) (s wqebuilder.OpStage, err error) {
	// A closure called once (see newqp.Ready): the whole post compiles
	// into the caller. It spells out newqp.Begin's two halves: a
	// closure around the inlined Begin would be small enough for the
	// inliner to price Post with it, over the budget.
	s = func() wqebuilder.OpStage {
		if newqp.Ready(&q.Queue) {
			return newqp.SendRing(&q.Queue).Begin(wrid, flags).OpStage
		}
		var c wqebuilder.CtrlStage
		c, err = newqp.Refuse(&q.Queue, wrid, flags, newqp.Addressed)
		return c.OpStage
	}()
	return s, err
}

// Endpoint returns what the peer needs to connect to this QP: QPN, LID,
// GID and GID index, first PSN and the port's active MTU. Add the regions
// the peer may use to its Regions before sending it.
func (q *QP) Endpoint() endpoint.Endpoint {
	return q.port.Endpoint(endpoint.TransportRC, q.QPN(), q.psn)
}

// GID returns the local GID table entry the QP sends from (on RoCE): the
// one Config.GID selected.
func (q *QP) GID() ctx.GIDEntry { return q.port.GID }

// Connect connects the QP to the remote RC endpoint: INIT→RTR (remote QPN,
// path by LID or GID, the smaller MTU, the remote's PSN) and RTR→RTS. A
// remote without an address the port can use (no GID on RoCE, no LID on
// InfiniBand, where a GID does not stand for one) is refused before
// anything changes, the error wrapping ctx.ErrInvalidArgument. A failed
// Connect leaves the QP where it stopped (INIT or RTR) and may be called
// again.
func (q *QP) Connect(remote endpoint.Endpoint) error {
	const op = "connect"
	if q.qp == nil {
		return qpcore.Errorf(name, op, "%w", errZeroQP)
	}
	if err := remote.Validate(); err != nil {
		return qpcore.Errorf(name, op, "remote endpoint: %w", err)
	}
	if remote.Transport != endpoint.TransportRC {
		return qpcore.Errorf(name, op, "remote endpoint is %v: %w", remote.Transport, transport.ErrTransport)
	}
	path, err := q.port.PathTo(remote, q.attr.Path.SL)
	if err != nil {
		return qpcore.Errorf(name, op, "%w", err)
	}
	if q.qp.Closed() {
		newqp.SetState(&q.Queue, transport.StateClosed)
		return qpcore.Errorf(name, op, "QP %#x: %w", q.QPN(), ctx.ErrClosed)
	}
	st, err := q.qp.State()
	if err != nil {
		return qpcore.Errorf(name, op, "%w", err)
	}
	switch st {
	case ctx.QPStateInit:
		a := q.attr
		a.State = ctx.QPStateRTR
		a.RemoteQPN = remote.QPN
		a.Path = path
		if a.Path.GlobalRoute {
			a.Path.TrafficClass = q.tclass
		}
		a.PathMTU = q.port.PathMTU(remote)
		a.RQPSN = remote.PSN
		if err := q.qp.Modify(a); err != nil {
			return qpcore.Errorf(name, op, "QP %#x to %v: %w", q.QPN(), remote, err)
		}
		fallthrough
	case ctx.QPStateRTR:
		a := q.attr
		a.State = ctx.QPStateRTS
		if err := q.qp.Modify(a); err != nil {
			return qpcore.Errorf(name, op, "QP %#x to %v: %w", q.QPN(), remote, err)
		}
	case ctx.QPStateError:
		newqp.SetState(&q.Queue, transport.StateError)
		return qpcore.Errorf(name, op, "QP %#x: %w", q.QPN(), transport.ErrQPError)
	default:
		return qpcore.Errorf(name, op, "QP %#x is %v, not INIT: %w", q.QPN(), st, transport.ErrTransport)
	}
	q.remote = remote
	newqp.SetState(&q.Queue, transport.StateReady)
	return nil
}

// Remote returns the endpoint the QP was connected to (zero before
// Connect).
func (q *QP) Remote() endpoint.Endpoint { return q.remote }

// Reset brings the QP back to INIT from any state, error included, so
// that it can Connect again (the peer resets too): RESET discards every
// outstanding work request without a completion and restarts the rings,
// then INIT lets receives be posted. RESET zeroes the QP's doorbell record
// (the device's producer indices restart at 0), so Reset rebuilds the send
// queue's WQE builder and the receive queue's bookkeeping from index 0 too.
// The old ones are closed: a stage begun before Reset, or a SendQueue taken
// before it, fails at Finish with ctx.ErrClosed and writes nothing;
// SendQueue returns the new one. The QPN, the PSN and the Pollers the QP
// was added to stay; the QP's CQEs still in its CQs' rings (through their
// Pollers, or transport.NewCQ's ring where none holds it) are removed
// (monocq.CQ.Discard), as
// rdma-core cleans a QP's CQs on its way to RESET, so that none completes a
// work request posted after the reset. Call it on the goroutine that posts
// on the QP and polls its CQs, between polls: inside a poll of one of
// their rings (the function a Poller's Poll hands completions to, whether
// the QP was added to that Poller or not, or a poll of NewCQ's ring),
// whose batch may still hold the QP's CQEs, Reset changes nothing and
// returns an error wrapping ctx.ErrBusy.
//
// On a QP attached to an SRQ, Reset goes to RESET directly, not through
// the error state and the last-WQE-reached event the IBA asks for: a
// receive of the SRQ that a ConnectX had begun to fill for a message of
// several packets when Reset ran stays taken without a completion, and the
// SRQ holds one receive fewer (docs/hardware.md). Reset a QP whose peer
// has stopped sending.
func (q *QP) Reset() error {
	const op = "reset"
	if q.qp == nil {
		return qpcore.Errorf(name, op, "%w", errZeroQP)
	}
	if q.qp.Closed() {
		newqp.SetState(&q.Queue, transport.StateClosed)
		return qpcore.Errorf(name, op, "QP %#x: %w", q.QPN(), ctx.ErrClosed)
	}
	if err := newqp.Polling(&q.Queue); err != nil {
		return qpcore.Errorf(name, op, "%w", err)
	}
	if err := q.qp.Modify(ctx.QPAttr{State: ctx.QPStateReset}); err != nil {
		return qpcore.Errorf(name, op, "%w", err)
	}
	cfg := q.qp.Config()
	var srq *transport.SharedReceiveQueue
	if cfg.SRQ != nil {
		srq = q.Queue.SRQ()
	}
	if err := newqp.Setup(&q.Queue, name, q.qp, srq); err != nil {
		return qpcore.Errorf(name, op, "%w", err)
	}
	if err := q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: q.port.Number, Access: q.access}); err != nil {
		newqp.SetState(&q.Queue, transport.StateError)
		return qpcore.Errorf(name, op, "%w", err)
	}
	q.remote = endpoint.Endpoint{}
	return nil
}

// errZeroQP is the cause of Connect's and Reset's error on a QP not made
// by New (a zero QP), which is closed (transport.StateClosed).
var errZeroQP = fmt.Errorf("QP not made by New: %w", ctx.ErrInvalidArgument)

// Close destroys the queue pair, as transport.Queue.Close does: from any
// goroutine, idempotent. Close of a nil *QP returns nil.
func (q *QP) Close() error {
	if q == nil {
		return nil
	}
	return q.Queue.Close()
}
