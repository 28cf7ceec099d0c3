// Package newqp is what the constructors of packages rc, dc and ud share:
// the checks of a configuration against the device before anything is
// created, the defaults, the creation of the control-plane queue pair and
// its bring-up into a transport.Queue. Each transport keeps its own rules
// (its knobs, its state sequence) and passes them in a Spec.
package newqp

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport/qpcore"
	"github.com/mlx5kit/mlx5kit/transport"
)

// Spec is a queue pair to create, as a transport's constructor asks for it.
type Spec struct {
	// Transport ("rc", "dc", "ud") and Op ("new QP", "new DCI", …) name
	// the errors.
	Transport, Op string
	Type          ctx.QPType
	// CQ receives the queue pair's completions: its send completions, and
	// its receive completions too unless RecvCQ is set. A DCT's receive
	// completions go to CQ.
	CQ, RecvCQ *ctx.CompletionQueue
	// Caps are the sizes asked for. MaxSendSGE (with a send queue) and
	// MaxRecvSGE (with a receive queue) default to 1.
	Caps ctx.QueuePairCaps
	// SRQ receives for the queue pair; a DCT needs one.
	SRQ *transport.SharedReceiveQueue
	// Port, GID and SL select the local port, GID entry and the service
	// level of the paths from it.
	Port uint8
	GID  ctx.GIDSelector
	SL   uint8
	// PSN, when not 0, is checked to fit 24 bits.
	PSN uint32
	// RemoteAccess is checked to hold only remote access flags (and local
	// write); 0 resolves to remote write, read and, on a device that
	// reports atomics (ctx.DeviceAttr.AtomicHCA), atomics.
	RemoteAccess ctx.Access
	// ScatterToCQE and DCKey go to the provider as they are.
	ScatterToCQE bool
	DCKey        uint64
	// Check, when set, checks the transport's own knobs against the
	// device, after the sizes and before the port.
	Check func(dev ctx.DeviceAttr) error
}

// Created is what Create made and found.
type Created struct {
	QP     *ctx.QueuePair
	Device ctx.DeviceAttr
	Port   Port
	// Access is the resolved RemoteAccess.
	Access ctx.Access
}

// allAccess is what a peer may do through a queue pair created with
// RemoteAccess 0 on a device with atomics; without them, the same less
// remote atomics, which mlx5_ib refuses there (EOPNOTSUPP from
// to_mlx5_access_flags at RTR, from mlx5_ib_modify_dct at INIT).
const allAccess = ctx.AccessRemoteWrite | ctx.AccessRemoteRead | ctx.AccessRemoteAtomic

// Create checks s against the device and creates the queue pair in pd, in
// the RESET state. A configuration the device cannot satisfy is refused
// with an error naming the value and the limit, wrapping
// ctx.ErrInvalidArgument, before anything is created.
func Create(pd *ctx.ProtectionDomain, s Spec) (Created, error) {
	var r Created
	fail := func(err error) (Created, error) {
		return Created{}, qpcore.Errorf(s.Transport, s.Op, "%w", err)
	}
	bad := func(format string, args ...any) (Created, error) {
		return Created{}, qpcore.Errorf(s.Transport, s.Op, format+": %w", append(args, ctx.ErrInvalidArgument)...)
	}
	dct := s.Type == ctx.QPTypeDCT
	hasRQ := s.Caps.RecvDepth > 0
	switch {
	case pd == nil:
		return bad("nil protection domain")
	case s.CQ == nil && dct:
		return bad("nil receive completion queue")
	case s.CQ == nil:
		return bad("nil send completion queue")
	case !dct && s.Caps.SendDepth == 0:
		return bad("send depth 0")
	case dct && s.SRQ == nil:
		return bad("a DCT needs an SRQ")
	case s.SRQ != nil && hasRQ:
		return bad("receive depth %d with an SRQ (the SRQ receives)", s.Caps.RecvDepth)
	case s.SRQ != nil && s.SRQ.Handle() == nil:
		return bad("SRQ not made by NewSharedReceiveQueue")
	case s.SRQ != nil && s.SRQ.Closed():
		return Created{}, qpcore.Errorf(s.Transport, s.Op, "SRQ: %w", ctx.ErrClosed)
	case s.PSN > ctx.MaxPSN:
		return bad("PSN %#x wider than 24 bits", s.PSN)
	case s.RemoteAccess&^(allAccess|ctx.AccessLocalWrite) != 0:
		return bad("remote access %v", s.RemoteAccess)
	}
	if !dct && s.Caps.MaxSendSGE == 0 {
		s.Caps.MaxSendSGE = 1
	}
	if hasRQ && s.Caps.MaxRecvSGE == 0 {
		s.Caps.MaxRecvSGE = 1
	}
	dev, err := pd.Context().Query()
	if err != nil {
		return fail(err)
	}
	if (s.Type == ctx.QPTypeDCI || dct) && !dev.DC {
		return Created{}, qpcore.Errorf(s.Transport, s.Op, "device %s: %w", dev.Name, ctx.ErrNotSupported)
	}
	if !dct {
		if err := CheckCaps(dev, s.Type, s.Caps, hasRQ); err != nil {
			return fail(err)
		}
	}
	if s.Check != nil {
		if err := s.Check(dev); err != nil {
			return fail(err)
		}
	}
	if err := CheckFields(PortField(dev, s.Port)); err != nil {
		return fail(err)
	}
	port, err := QueryPort(pd.Context(), s.Port, s.GID)
	if err != nil {
		return fail(err)
	}
	if err := CheckFields(SLField(port, s.SL)); err != nil {
		return fail(err)
	}
	cfg := ctx.QueuePairConfig{Type: s.Type, Caps: s.Caps, ScatterToCQE: s.ScatterToCQE, DCKey: s.DCKey}
	if dct {
		cfg.RecvCQ = s.CQ
	} else {
		cfg.SendCQ, cfg.RecvCQ = s.CQ, s.RecvCQ
		if s.Type == ctx.QPTypeDCI {
			cfg.RecvCQ = nil
		} else if cfg.RecvCQ == nil {
			cfg.RecvCQ = s.CQ
		}
	}
	if s.SRQ != nil {
		cfg.SRQ = s.SRQ.Handle()
	}
	qp, err := pd.CreateQueuePair(cfg)
	if err != nil {
		return fail(err)
	}
	r.QP, r.Device, r.Port, r.Access = qp, dev, port, s.RemoteAccess
	if r.Access == 0 {
		r.Access = allAccess
		if !dev.AtomicHCA {
			r.Access &^= ctx.AccessRemoteAtomic
		}
	}
	return r, nil
}

// BringUp moves the queue pair Create made through states (none for a QP
// that stays in RESET until later) and sets q up over it; ready marks q
// ready to post (a QP that reached RTS, a DCT at RTR). On failure it closes
// the queue pair.
func BringUp(q *transport.Queue, s Spec, qp *ctx.QueuePair, ready bool, states ...ctx.QPAttr) error {
	for _, a := range states {
		if err := qp.Modify(a); err != nil {
			_ = qp.Close()
			return qpcore.Errorf(s.Transport, s.Op, "%w", err)
		}
	}
	if err := Setup(q, s.Transport, qp, s.SRQ); err != nil {
		_ = qp.Close()
		return qpcore.Errorf(s.Transport, s.Op, "%w", err)
	}
	if ready {
		SetState(q, transport.StateReady)
	}
	return nil
}
