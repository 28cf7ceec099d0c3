package rc

import (
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
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
	SRQ *SharedReceiveQueue

	// Port is the local port (default 1) and GID the local GID table
	// entry used on RoCE or towards a remote without a LID: unset, one is
	// chosen (ctx.ChooseGID: a RoCE v2 GID, IPv4-mapped first);
	// ctx.GIDIndex(i) names entry i. Endpoint and GID report the entry.
	Port uint8
	GID  ctx.GIDSelector
	// SL is the service level of the path: 0..15 on InfiniBand, 0..7 on
	// RoCE (the VLAN priority); New refuses a wider value.
	SL uint8
	// PSN is the first packet sequence number this QP sends (24 bits); 0
	// picks a random one. Endpoint reports it.
	PSN uint32
	// RemoteAccess is what the peer may do through this QP (the memory
	// regions still decide for themselves); 0 allows remote write, read
	// and atomics.
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

// QP is a reliable-connected queue pair. Its embedded Queue posts
// receives, rings doorbells and turns CQEs into completions; Post starts a
// send WQE.
//
// A QP is used by one goroutine at a time (posting, polling its CQs,
// Connect, Reset); Close may be called from any goroutine.
type QP struct {
	// Queue is the data-plane part shared with the other transports; add
	// &qp.Queue to a Poller.
	Queue

	qp     *ctx.QueuePair
	port   transport.Port
	psn    uint32
	remote endpoint.Endpoint
	attr   ctx.QPAttr // RTR and RTS attributes from the configuration
	access ctx.Access // what the peer may do through the QP
}

// New creates an RC queue pair in pd with send completions on sendCQ and
// receive completions on recvCQ (nil: sendCQ), and moves it to INIT, so
// that receives may be posted before Connect. A configuration the device
// cannot satisfy is refused before anything is created.
func New(pd *ctx.ProtectionDomain, sendCQ, recvCQ *ctx.CompletionQueue, cfg Config) (*QP, error) {
	const op = "new QP"
	bad := func(format string, args ...any) (*QP, error) {
		return nil, transport.Errorf(name, op, format+": %w", append(args, ctx.ErrInvalidArgument)...)
	}
	switch {
	case pd == nil:
		return bad("nil protection domain")
	case sendCQ == nil:
		return bad("nil send completion queue")
	case cfg.SendDepth == 0:
		return bad("send depth 0")
	case cfg.SRQ != nil && cfg.RecvDepth != 0:
		return bad("receive depth %d with an SRQ (the SRQ receives)", cfg.RecvDepth)
	case cfg.SRQ != nil && cfg.SRQ.Closed():
		return nil, transport.Errorf(name, op, "SRQ: %w", ctx.ErrClosed)
	case cfg.PSN > endpoint.MaxPSN:
		return bad("PSN %#x wider than 24 bits", cfg.PSN)
	case cfg.RemoteAccess&^(ctx.AccessRemoteWrite|ctx.AccessRemoteRead|ctx.AccessRemoteAtomic|ctx.AccessLocalWrite) != 0:
		return bad("remote access %v", cfg.RemoteAccess)
	}
	if recvCQ == nil {
		recvCQ = sendCQ
	}
	if cfg.MaxSendSGE == 0 {
		cfg.MaxSendSGE = 1
	}
	if cfg.MaxRecvSGE == 0 && cfg.RecvDepth > 0 {
		cfg.MaxRecvSGE = 1
	}
	dev, err := pd.Context().Query()
	if err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	caps := ctx.QueuePairCaps{SendDepth: cfg.SendDepth, RecvDepth: cfg.RecvDepth,
		MaxSendSGE: cfg.MaxSendSGE, MaxRecvSGE: cfg.MaxRecvSGE, MaxInline: cfg.MaxInline}
	if err := transport.CheckCaps(dev, ctx.QPTypeRC, caps, cfg.RecvDepth > 0); err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	attr, err := rcAttr(cfg, dev)
	if err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	if err := transport.CheckFields(transport.PortField(dev, cfg.Port)); err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	port, err := transport.QueryPort(pd.Context(), cfg.Port, cfg.GID)
	if err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	if err := transport.CheckFields(transport.SLField(port, cfg.SL)); err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	qcfg := ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: sendCQ, RecvCQ: recvCQ, Caps: caps, ScatterToCQE: cfg.ScatterToCQE}
	if cfg.SRQ != nil {
		qcfg.SRQ = cfg.SRQ.Handle()
	}
	cq, err := pd.CreateQueuePair(qcfg)
	if err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	access := cfg.RemoteAccess
	if access == 0 {
		access = ctx.AccessRemoteWrite | ctx.AccessRemoteRead | ctx.AccessRemoteAtomic
	}
	if err := cq.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: port.Number, Access: access}); err != nil {
		_ = cq.Close()
		return nil, transport.Errorf(name, op, "%w", err)
	}
	q := &QP{qp: cq, port: port, attr: attr, access: access}
	if err := transport.Setup(&q.Queue, name, cq, cfg.SRQ); err != nil {
		_ = cq.Close()
		return nil, transport.Errorf(name, op, "%w", err)
	}
	q.psn = cfg.PSN
	if q.psn == 0 {
		q.psn = transport.RandomPSN()
	}
	q.attr.SQPSN = q.psn
	return q, nil
}

// rcAttr resolves the connection knobs of cfg.
func rcAttr(cfg Config, dev ctx.DeviceAttr) (ctx.QPAttr, error) {
	var a ctx.QPAttr
	var err error
	maxRd := uint8(min(max(dev.MaxQPInitRdAtomic, 1), 255))
	if dev.MaxQPRdAtomic != 0 && dev.MaxQPRdAtomic < uint32(maxRd) {
		maxRd = uint8(dev.MaxQPRdAtomic)
	}
	for _, k := range []struct {
		name     string
		v        int
		def, max uint8
		dst      *uint8
	}{
		{"max RDMA reads/atomics", cfg.MaxRdAtomic, min(16, maxRd), maxRd, &a.MaxRdAtomic},
		{"min RNR timer", cfg.MinRNRTimer, 12, 31, &a.MinRNRTimer},
		{"timeout", cfg.Timeout, 14, 31, &a.Timeout},
		{"retry count", cfg.RetryCount, 7, 7, &a.RetryCount},
		{"RNR retry", cfg.RNRRetry, 7, 7, &a.RNRRetry},
	} {
		if *k.dst, err = transport.Knob(k.v, k.def, k.max); err != nil {
			return a, fmt.Errorf("%s: %w", k.name, err)
		}
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
// Post allocates nothing and takes no lock.
func (q *QP) Post(wrid uint64, flags wqebuilder.Flags) (s wqebuilder.OpStage, err error) {
	// A closure called once (see transport.Ready): the whole post compiles
	// into the caller. It spells out transport.Begin's two halves: a
	// closure around the inlined Begin would be small enough for the
	// inliner to price Post with it, over the budget.
	s = func() wqebuilder.OpStage {
		if transport.Ready(&q.Queue) {
			return transport.SendRing(&q.Queue).Begin(wrid, flags).OpStage
		}
		var c wqebuilder.CtrlStage
		c, err = transport.Refuse(&q.Queue, wrid, flags)
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

// GID returns the local GID table entry the QP sends from (on RoCE, and
// on InfiniBand towards a remote without a LID): the one Config.GID
// selected.
func (q *QP) GID() ctx.GIDEntry { return q.port.GID }

// Connect connects the QP to the remote RC endpoint: INIT→RTR (remote QPN,
// path by LID or GID, the smaller MTU, the remote's PSN) and RTR→RTS. A
// failed Connect leaves the QP where it stopped (INIT or RTR) and may be
// called again.
func (q *QP) Connect(remote endpoint.Endpoint) error {
	const op = "connect"
	if err := remote.Validate(); err != nil {
		return transport.Errorf(name, op, "remote endpoint: %w", err)
	}
	if remote.Transport != endpoint.TransportRC {
		return transport.Errorf(name, op, "remote endpoint is %v: %w", remote.Transport, transport.ErrTransport)
	}
	if q.qp.Closed() {
		transport.SetState(&q.Queue, transport.StateClosed)
		return transport.Errorf(name, op, "QP %#x: %w", q.QPN(), ctx.ErrClosed)
	}
	st, err := q.qp.State()
	if err != nil {
		return transport.Errorf(name, op, "%w", err)
	}
	switch st {
	case ctx.QPStateInit:
		a := q.attr
		a.State = ctx.QPStateRTR
		a.RemoteQPN = remote.QPN
		a.Path = q.port.PathTo(remote, q.attr.Path.SL)
		a.PathMTU = q.port.PathMTU(remote)
		a.RQPSN = remote.PSN
		if err := q.qp.Modify(a); err != nil {
			return transport.Errorf(name, op, "QP %#x to %v: %w", q.QPN(), remote, err)
		}
		fallthrough
	case ctx.QPStateRTR:
		a := q.attr
		a.State = ctx.QPStateRTS
		if err := q.qp.Modify(a); err != nil {
			return transport.Errorf(name, op, "QP %#x to %v: %w", q.QPN(), remote, err)
		}
	case ctx.QPStateError:
		transport.SetState(&q.Queue, transport.StateError)
		return transport.Errorf(name, op, "QP %#x: %w", q.QPN(), transport.ErrQPError)
	default:
		return transport.Errorf(name, op, "QP %#x is %v, not INIT: %w", q.QPN(), st, transport.ErrTransport)
	}
	q.remote = remote
	transport.SetState(&q.Queue, transport.StateReady)
	return nil
}

// Remote returns the endpoint the QP was connected to (zero before
// Connect).
func (q *QP) Remote() endpoint.Endpoint { return q.remote }

// Handle returns the control-plane queue pair.
func (q *QP) Handle() *ctx.QueuePair { return q.qp }

// Limits returns what the provider granted: the send and receive ring
// sizes in WQEs, max SGE and max inline.
func (q *QP) Limits() Limits { return limits(q.qp) }

// Fail moves the QP to the error state: every outstanding work request
// completes with WR_FLUSH_ERR, and no more may be posted.
func (q *QP) Fail() error {
	if err := q.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}); err != nil {
		return transport.Errorf(name, "move to error", "%w", err)
	}
	transport.SetState(&q.Queue, transport.StateError)
	return nil
}

// Reset brings the QP back to INIT from any state, error included, so
// that it can Connect again (the peer resets too): RESET discards every
// outstanding work request without a completion and restarts the rings,
// then INIT lets receives be posted. RESET zeroes the QP's doorbell record
// (the device's producer indices restart at 0), so Reset rebuilds the send
// queue's WQE builder and the receive queue's bookkeeping from index 0 too.
// The QPN, the PSN and the Pollers the QP was added to stay.
func (q *QP) Reset() error {
	const op = "reset"
	if q.qp.Closed() {
		transport.SetState(&q.Queue, transport.StateClosed)
		return transport.Errorf(name, op, "QP %#x: %w", q.QPN(), ctx.ErrClosed)
	}
	if err := q.qp.Modify(ctx.QPAttr{State: ctx.QPStateReset}); err != nil {
		return transport.Errorf(name, op, "%w", err)
	}
	cfg := q.qp.Config()
	var srq *SharedReceiveQueue
	if cfg.SRQ != nil {
		srq = q.Queue.SRQ()
	}
	if err := transport.Setup(&q.Queue, name, q.qp, srq); err != nil {
		return transport.Errorf(name, op, "%w", err)
	}
	if err := q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: q.port.Number, Access: q.access}); err != nil {
		transport.SetState(&q.Queue, transport.StateError)
		return transport.Errorf(name, op, "%w", err)
	}
	q.remote = endpoint.Endpoint{}
	return nil
}

// Close destroys the QP. Work requests the device has not completed are
// lost, with no completion: drain them (Fail, then poll the flushes) first
// if they matter.
//
// Close may be called from any goroutine, also while the owner posts on
// the QP and polls its Pollers, as net.Conn.Close may: it closes only
// the control-plane queue pair (Handle), so the owner's posts fail with
// ctx.ErrClosed from then on (a stage begun before fails at Finish), and each
// Poller the QP was added to drops it on the owner's goroutine, in a
// later Poll, once no CQE of it is left in the CQ; until then its CQEs
// are handed over as the device wrote them (Remove drops it at once).
// Close is idempotent.
func (q *QP) Close() error {
	if err := q.qp.Close(); err != nil && !errors.Is(err, ctx.ErrClosed) {
		return transport.Errorf(name, "close", "%w", err)
	}
	return nil
}
