package ud

import (
	"errors"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

const name = "ud"

// GRHSize is the space at the start of every UD receive buffer where the
// device puts the 40-byte global route header (whether or not the packet
// had one; on RoCE v2 the IPv6 header, or 20 undefined bytes and the IPv4
// header): a receive of n payload bytes needs a buffer of GRHSize+n bytes,
// and its Completion.ByteCount counts them all.
const GRHSize = prm.GRHSize

// Config configures a UD queue pair.
type Config struct {
	// SendDepth and RecvDepth are the numbers of send and receive work
	// requests that may be outstanding. SendDepth must not be 0; RecvDepth
	// 0 with no SRQ makes a send-only QP.
	SendDepth, RecvDepth uint32
	// MaxSendSGE and MaxRecvSGE are the scatter/gather entries per WQE
	// (default 1), MaxInline the most payload one send carries inline.
	MaxSendSGE, MaxRecvSGE uint32
	MaxInline              uint32
	// SRQ, when set, receives for the QP (RecvDepth must then be 0).
	SRQ *SharedReceiveQueue
	// QKey is the queue key senders must present (its high bit set is a
	// controlled qkey senders cannot use as their own).
	QKey uint32
	// Port is the local port (default 1), GID the local GID table entry
	// (RoCE; unset, one is chosen as for rc.Config.GID), SL the service
	// level of the paths to remotes (0..15 on InfiniBand, 0..7 on RoCE;
	// New refuses a wider value), PSN the send PSN (0: random).
	Port uint8
	GID  ctx.GIDSelector
	SL   uint8
	PSN  uint32
}

// QP is an unreliable-datagram queue pair: each send names its
// destination through a Remote (address vector, remote QPN, qkey); receive
// buffers start with GRHSize bytes for the GRH.
//
// A QP is used by one goroutine at a time; Close may be called from any
// goroutine.
type QP struct {
	// Queue is the data-plane part shared with the other transports; add
	// &qp.Queue to a Poller.
	Queue

	qp   *ctx.QueuePair
	pd   *ctx.ProtectionDomain
	port transport.Port
	qkey uint32
	psn  uint32
	sl   uint8
}

// New creates a UD queue pair in pd (send completions on sendCQ, receive
// completions on recvCQ, nil meaning sendCQ) and brings it to RTS: it may
// send and receive at once.
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
	if err := transport.CheckCaps(dev, ctx.QPTypeUD, caps, cfg.RecvDepth > 0); err != nil {
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
	qcfg := ctx.QueuePairConfig{Type: ctx.QPTypeUD, SendCQ: sendCQ, RecvCQ: recvCQ, Caps: caps}
	if cfg.SRQ != nil {
		qcfg.SRQ = cfg.SRQ.Handle()
	}
	qp, err := pd.CreateQueuePair(qcfg)
	if err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	psn := cfg.PSN
	if psn == 0 {
		psn = transport.RandomPSN()
	}
	for _, a := range []ctx.QPAttr{
		{State: ctx.QPStateInit, Port: port.Number, QKey: cfg.QKey},
		{State: ctx.QPStateRTR},
		{State: ctx.QPStateRTS, SQPSN: psn},
	} {
		if err := qp.Modify(a); err != nil {
			_ = qp.Close()
			return nil, transport.Errorf(name, op, "%w", err)
		}
	}
	q := &QP{qp: qp, pd: pd, port: port, qkey: cfg.QKey, psn: psn, sl: cfg.SL}
	if err := transport.Setup(&q.Queue, name, qp, cfg.SRQ); err != nil {
		_ = qp.Close()
		return nil, transport.Errorf(name, op, "%w", err)
	}
	transport.SetState(&q.Queue, transport.StateReady)
	return q, nil
}

// QKey returns the QP's qkey.
func (q *QP) QKey() uint32 { return q.qkey }

// Endpoint returns what a peer needs to send to this QP: QPN, qkey, LID,
// GID and GID index, MTU (the largest payload one datagram carries).
func (q *QP) Endpoint() endpoint.Endpoint {
	ep := q.port.Endpoint(endpoint.TransportUD, q.QPN(), q.psn)
	ep.QKey = q.qkey
	return ep
}

// Remote is a destination of UD sends: the address vector of the remote
// port, the remote QPN and the qkey it checks. It holds an address handle;
// Close it when it is no longer used.
type Remote struct {
	av   [prm.AVSize]byte
	qpn  uint32
	qkey uint32
	ah   *ctx.AddressHandle
}

// NewRemote resolves a UD endpoint (a peer's Endpoint) into a Remote.
func (q *QP) NewRemote(remote endpoint.Endpoint) (*Remote, error) {
	const op = "new remote"
	if err := remote.Validate(); err != nil {
		return nil, transport.Errorf(name, op, "remote endpoint: %w", err)
	}
	if remote.Transport != endpoint.TransportUD {
		return nil, transport.Errorf(name, op, "remote endpoint is %v: %w", remote.Transport, transport.ErrTransport)
	}
	return q.remote(op, q.port.PathTo(remote, q.sl), remote.QPN, remote.QKey)
}

func (q *QP) remote(op string, attr ctx.AddressAttr, qpn, qkey uint32) (*Remote, error) {
	ah, err := q.pd.CreateAddressHandle(attr)
	if err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	return &Remote{av: ah.AV(), qpn: qpn, qkey: qkey, ah: ah}, nil
}

// ReplyRemote returns a Remote that answers the sender of a receive
// completion c (ibv_init_ah_from_wc): its QPN, and its path: the
// completion's source LID and SL and, when a GRH was received, a GRH back to
// the GRH's source GID (grh is the first GRHSize bytes of the receive
// buffer; it may be nil when c.GRH is false). On InfiniBand the source LID
// stays the destination LID beside the GRH, as in ibv_init_ah_from_wc: the
// local route header still needs it (the sender's, or its router's). The
// GRH area holds an InfiniBand GRH or RoCE v2 IPv6 header, or, for RoCE v2
// over IPv4, an IPv4 header in its last 20 bytes, whose source address
// becomes the IPv4-mapped destination GID (::ffff:a.b.c.d). Anything else is
// refused with transport.ErrBadGRH. The qkey is this QP's own. It creates an address
// handle: a control-plane call, to be cached by a caller that replies often.
func (q *QP) ReplyRemote(c *Completion, grh []byte) (*Remote, error) {
	const op = "reply remote"
	if c == nil || c.IsError() || c.IsSend() {
		return nil, transport.Errorf(name, op, "not a successful receive completion: %w", ctx.ErrInvalidArgument)
	}
	attr := ctx.AddressAttr{Port: q.port.Number, DLID: c.SLID, SL: c.SL}
	if c.GRH || q.port.Link == ctx.LinkLayerEthernet {
		if len(grh) < GRHSize {
			return nil, transport.Errorf(name, op, "the completion carries a GRH: need its %d bytes, got %d: %w", GRHSize, len(grh), ctx.ErrInvalidArgument)
		}
		g, err := transport.ParseGRH(grh)
		if err != nil {
			return nil, transport.Errorf(name, op, "%w", err)
		}
		attr.GlobalRoute = true
		attr.FlowLabel = g.FlowLabel
		attr.TrafficClass = g.TrafficClass
		attr.HopLimit = 0xff
		attr.DGID = g.SGID
		attr.SGIDIndex = uint8(q.port.GID.Index)
	}
	return q.remote(op, attr, c.SourceQPN, q.qkey)
}

// QPN returns the remote QPN.
func (r *Remote) QPN() uint32 { return r.qpn }

// QKey returns the qkey sends to r carry.
func (r *Remote) QKey() uint32 { return r.qkey }

// Close destroys the address handle. It is idempotent.
func (r *Remote) Close() error { return r.ah.Close() }

// Post starts a send to r with work request id wrid and flags: the address
// vector, remote QPN and qkey are written; pick Send or SendImm on the
// stage, add the payload (at most the path MTU) and Finish. Post refuses a
// QP in error or closed with a *wqebuilder.PostError (transport.ErrQPError, ctx.ErrClosed); the stage
// it returns then writes nothing and fails at Finish. It allocates nothing
// and takes no lock.
func (q *QP) Post(wrid uint64, flags wqebuilder.Flags, r *Remote) (s wqebuilder.DatagramStage, err error) {
	// A closure called once, as rc's Post.
	s = func() wqebuilder.DatagramStage {
		var c wqebuilder.CtrlStage
		c, err = transport.Begin(&q.Queue, wrid, flags)
		return c.UD(&r.av, r.qpn, r.qkey)
	}()
	return s, err
}

// GID returns the local GID table entry the QP sends from (on RoCE, and
// on InfiniBand with a GRH): the one Config.GID selected.
func (q *QP) GID() ctx.GIDEntry { return q.port.GID }

// Handle returns the control-plane queue pair.
func (q *QP) Handle() *ctx.QueuePair { return q.qp }

// Limits returns what the provider granted.
func (q *QP) Limits() Limits { return transport.LimitsOf(q.qp) }

// Fail moves the QP to the error state: its outstanding work requests
// complete with WR_FLUSH_ERR.
func (q *QP) Fail() error {
	if err := q.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}); err != nil {
		return transport.Errorf(name, "move to error", "%w", err)
	}
	transport.SetState(&q.Queue, transport.StateError)
	return nil
}

// Close destroys the QP. Work requests the device has not completed are
// lost, with no completion.
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
