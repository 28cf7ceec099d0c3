package ctx

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/internal/descriptor"
)

// QueuePairConfig configures a queue pair.
type QueuePairConfig struct {
	Type QPType
	// SendCQ receives send completions and RecvCQ receive completions; they
	// may be the same CQ. A DCT needs only RecvCQ and a DCI only SendCQ
	// (the missing one defaults to the other).
	SendCQ, RecvCQ *CompletionQueue
	// SRQ, when set, replaces the receive queue. A DCT requires one.
	SRQ  *SharedReceiveQueue
	Caps QueuePairCaps
	// DCKey is the DC access key of a DCT; initiators put the same key in
	// each WQE's address vector.
	DCKey uint64
	// ScatterToCQE lets the device place small receive payloads (32 bytes
	// with 64-byte CQEs, 64 with 128-byte CQEs) in the CQE instead of the
	// receive buffer; the poller must then copy them out. A DCT gets it
	// only with 128-byte CQEs on its receive CQ, as mlx5_ib grants it.
	ScatterToCQE bool
}

// QueuePair is a queue pair created from a protection domain. The
// transports (packages rc, dc, ud) wrap it and build their send-ring writer
// and receive ring on its memory.
type QueuePair struct {
	node
	pd     *ProtectionDomain
	h      qpHandle
	cfg    QueuePairConfig
	desc   descriptor.QP
	state  QPState
	remote uint32
	// port is the port given at INIT (0 before): a later Modify without
	// one applies it.
	port uint8
}

// CreateQueuePair creates a queue pair in RESET state.
func (pd *ProtectionDomain) CreateQueuePair(cfg QueuePairConfig) (*QueuePair, error) {
	op := "create " + cfg.Type.String() + " QP"
	bad := func(format string, args ...any) error {
		return &OpError{Op: op, Err: fmt.Errorf(format+": %w", append(args, ErrInvalidArgument)...)}
	}
	switch cfg.Type {
	case QPTypeRC, QPTypeUD, QPTypeDCI, QPTypeDCT:
	default:
		return nil, bad("QP type %v", cfg.Type)
	}
	if cfg.SendCQ == nil {
		cfg.SendCQ = cfg.RecvCQ
	}
	if cfg.RecvCQ == nil {
		cfg.RecvCQ = cfg.SendCQ
	}
	if cfg.SendCQ == nil {
		return nil, bad("no completion queue")
	}
	if cfg.Type == QPTypeDCT && cfg.SRQ == nil {
		return nil, bad("a DCT needs an SRQ")
	}
	if cfg.Type != QPTypeDCT && cfg.Type != QPTypeDCI && cfg.Caps.SendDepth == 0 {
		return nil, bad("send depth 0")
	}
	if cfg.Type == QPTypeDCI && cfg.Caps.SendDepth == 0 {
		return nil, bad("send depth 0")
	}
	if cfg.Type == QPTypeDCI || cfg.Type == QPTypeDCT {
		cfg.Caps.RecvDepth, cfg.Caps.MaxRecvSGE = 0, 0
	}
	if cfg.Type == QPTypeDCT {
		cfg.Caps.SendDepth, cfg.Caps.MaxSendSGE, cfg.Caps.MaxInline = 0, 0, 0
	}
	if err := pd.lockPD(op); err != nil {
		return nil, err
	}
	defer pd.t.mu.Unlock()
	for _, cq := range []*CompletionQueue{cfg.SendCQ, cfg.RecvCQ} {
		if cq.t != pd.t {
			return nil, bad("CQ of another context")
		}
		if cq.isClosed() {
			return nil, &OpError{Op: op, Err: fmt.Errorf("CQ: %w", ErrClosed)}
		}
	}
	parents := []*node{&pd.node, &cfg.SendCQ.node, &cfg.RecvCQ.node}
	if cfg.SRQ != nil {
		if cfg.SRQ.t != pd.t {
			return nil, bad("SRQ of another context")
		}
		if cfg.SRQ.isClosed() {
			return nil, &OpError{Op: op, Err: fmt.Errorf("SRQ: %w", ErrClosed)}
		}
		parents = append(parents, &cfg.SRQ.node)
	}
	qh, err := pd.h.CreateQueuePair(cfg)
	if err != nil {
		return nil, opErr(op, err)
	}
	h := qh.(qpHandle)
	qp := &QueuePair{pd: pd, h: h, cfg: cfg, desc: pd.ctx.withOptions(h.Descriptor()), state: QPStateReset}
	qp.node.init(pd.t, rankQueuePair, h.Close, parents...)
	return qp, nil
}

// descriptor returns the QP's rings, doorbell record and BlueFlame
// register.
func (qp *QueuePair) descriptor() descriptor.QP {
	qp.t.mu.Lock()
	defer qp.t.mu.Unlock()
	return qp.desc
}

// QPN returns the queue pair number (for a DCT the DCT number, known once
// it reached RTR); 0 for a zero QueuePair.
func (qp *QueuePair) QPN() uint32 {
	if qp.t == nil {
		return 0
	}
	qp.t.mu.Lock()
	defer qp.t.mu.Unlock()
	return qp.desc.QPN
}

// Type returns the QP type.
func (qp *QueuePair) Type() QPType { return qp.cfg.Type }

// Config returns the configuration the QP was created with.
func (qp *QueuePair) Config() QueuePairConfig { return qp.cfg }

// ProtectionDomain returns the PD of the QP.
func (qp *QueuePair) ProtectionDomain() *ProtectionDomain { return qp.pd }

// State returns the QP's state as the provider reports it now (a QP the
// device moved to error on its own reports QPStateError).
func (qp *QueuePair) State() (QPState, error) {
	const op = "query QP"
	if err := qp.lock(op); err != nil {
		return 0, err
	}
	defer qp.t.mu.Unlock()
	s, err := qp.h.State()
	if err != nil {
		return 0, opErr(op, err)
	}
	qp.state = s
	return s, nil
}

// retryHandle is implemented by a provider's QP that counts its retries.
type retryHandle interface {
	Retries() (rnr, transport uint64)
}

// Retries returns the number of times the QP's requests were sent again
// after an RNR NAK (rnr) and after the local ACK timeout (transport), with
// counted true, when the provider counts them: the software HCA does; the
// hardware provider does not read the NIC's counters (rdma statistic,
// hw_counters), and a closed or zero QP has none. It does not allocate.
func (qp *QueuePair) Retries() (rnr, transport uint64, counted bool) {
	if qp.t == nil {
		return 0, 0, false
	}
	qp.t.mu.Lock()
	defer qp.t.mu.Unlock()
	if qp.closed.Load() {
		return 0, 0, false
	}
	r, ok := qp.h.(retryHandle)
	if !ok {
		return 0, 0, false
	}
	rnr, transport = r.Retries()
	return rnr, transport, true
}

// RemoteQPN returns the remote QPN given at RTR (RC only); 0 for a zero
// QueuePair.
func (qp *QueuePair) RemoteQPN() uint32 {
	if qp.t == nil {
		return 0
	}
	qp.t.mu.Lock()
	defer qp.t.mu.Unlock()
	return qp.remote
}

// Modify moves the QP to attr.State; see QPAttr for the attributes each
// transition uses. Attributes that do not fit the verbs and PRM fields
// they go into, whatever the transition uses (a State beyond QPStateError,
// unknown Access bits, RemoteQPN, RQPSN or SQPSN wider than 24 bits,
// MinRNRTimer or Timeout above 31, RetryCount or RNRRetry above 7, a Path
// that CreateAddressHandle would refuse), or a Path.SL above 7 on an
// Ethernet port, fail with ErrInvalidArgument before the provider is
// called.
// On error the QP is unchanged. A move to RESET zeroes the
// doorbell record: whatever posts on the QP must restart its producer
// indices at 0 (see "Resetting a queue pair" in the package documentation).
func (qp *QueuePair) Modify(attr QPAttr) error {
	op := "modify " + qp.cfg.Type.String() + " QP to " + attr.State.String()
	if attr.State > QPStateError {
		return &OpError{Op: op, Err: fmt.Errorf("state %v: %w", attr.State, ErrInvalidArgument)}
	}
	// Logged after the unlock (deferred first), so that the handler may
	// call the Context.
	var moved bool
	var from QPState
	var qpn uint32
	defer func() {
		if moved {
			qp.pd.ctx.logTransition(qp.cfg.Type, qpn, from, attr.State)
		}
	}()
	if err := qp.lock(op); err != nil {
		return err
	}
	defer qp.t.mu.Unlock()
	// A port not given is the one the QP was brought to INIT on (port 1
	// before that).
	if attr.Port == 0 {
		attr.Port = max(qp.port, 1)
	}
	if attr.Path.Port == 0 {
		attr.Path.Port = attr.Port
	}
	if err := attr.validate(); err != nil {
		return &OpError{Op: op, Err: err}
	}
	if err := checkRoCESL(qp.pd.ctx.dev.QueryPort, attr.Path.Port, attr.Path.SL, "Path.SL"); err != nil {
		return &OpError{Op: op, Err: err}
	}
	if err := qp.h.Modify(attr); err != nil {
		return opErr(op, err)
	}
	switch attr.State {
	case QPStateInit:
		qp.port = attr.Port
	case QPStateReset:
		qp.port = 0
	}
	from = qp.state
	qp.state = attr.State
	if attr.State == QPStateRTR && qp.cfg.Type == QPTypeRC {
		qp.remote = attr.RemoteQPN
	}
	qp.desc = qp.pd.ctx.withOptions(qp.h.Descriptor())
	qpn, moved = qp.desc.QPN, true
	return nil
}

// Closed reports whether the QP has been destroyed (directly or by a
// parent). The data plane checks it before posting.
func (qp *QueuePair) Closed() bool { return qp.isClosed() }

// Close destroys the QP. It is idempotent. The rings, doorbell record and
// BlueFlame register of the descriptor are released with it: the data plane
// must stop using them first (transports check Closed before posting).
//
// Close of a nil *QueuePair, or of a zero QueuePair (not made by this package),
// returns nil.
func (qp *QueuePair) Close() error {
	if qp == nil || qp.t == nil {
		return nil
	}
	qp.t.mu.Lock()
	defer qp.t.mu.Unlock()
	return opErr("destroy QP", qp.closeLocked())
}

// withOptions applies the Context's options to a provider's QP
// descriptor: with DisableBlueFlame the register is doorbell only.
func (c *Context) withOptions(d descriptor.QP) descriptor.QP {
	if c.noBlueFlame {
		d.BlueFlameSize = 0
	}
	return d
}
