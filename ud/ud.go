package ud

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/newqp"
	"github.com/mlx5kit/mlx5kit/internal/transport/qpcore"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
	"sync/atomic"
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
	SRQ *transport.SharedReceiveQueue
	// RecvCQ, when set, gets the QP's receive completions; unset, they go
	// to the CQ given to New with the send completions.
	RecvCQ *ctx.CompletionQueue
	// QKey is the queue key senders must present (its high bit set is a
	// controlled qkey senders cannot use as their own).
	QKey uint32
	// Port is the local port (default 1), GID the local GID table entry
	// (RoCE; unset, one is chosen, and an index past the table refused,
	// as for rc.Config.GID), SL the service
	// level of the paths to remotes (0..15 on InfiniBand, 0..7 on RoCE;
	// New refuses a wider value), PSN the send PSN (0: random).
	Port uint8
	GID  ctx.GIDSelector
	SL   uint8
	PSN  uint32
	// TrafficClass is the traffic class of the GRH of the paths NewRemote
	// makes (on RoCE the IP header's DSCP and ECN bits); a path by LID has
	// no GRH and carries none.
	TrafficClass uint8
}

// QP is an unreliable-datagram queue pair: each send names its
// destination through a Remote (address vector, remote QPN, qkey); receive
// buffers start with GRHSize bytes for the GRH. Its embedded
// transport.Queue posts receives and has what every transport has
// (Handle, Limits, Fail, Close); add the QP to the transport.Poller of its
// CQ.
//
// A QP is used by one goroutine at a time; Close may be called from any
// goroutine.
type QP struct {
	transport.Queue

	qp   *ctx.QueuePair
	pd   *ctx.ProtectionDomain
	port newqp.Port
	qkey uint32
	psn  uint32
	sl   uint8
	// tclass is Config.TrafficClass.
	tclass uint8
}

// New creates a UD queue pair in pd with its completions on cq (its
// receive completions on cfg.RecvCQ when set) and brings it to RTS: it may
// send and receive at once.
func New(pd *ctx.ProtectionDomain, cq *ctx.CompletionQueue, cfg Config) (*QP, error) {
	spec := newqp.Spec{Transport: name, Op: "new QP", Type: ctx.QPTypeUD, CQ: cq, RecvCQ: cfg.RecvCQ,
		Caps: ctx.QueuePairCaps{SendDepth: cfg.SendDepth, RecvDepth: cfg.RecvDepth,
			MaxSendSGE: cfg.MaxSendSGE, MaxRecvSGE: cfg.MaxRecvSGE, MaxInline: cfg.MaxInline},
		SRQ: cfg.SRQ, Port: cfg.Port, GID: cfg.GID, SL: cfg.SL, PSN: cfg.PSN}
	c, err := newqp.Create(pd, spec)
	if err != nil {
		return nil, err
	}
	psn := cfg.PSN
	if psn == 0 {
		psn = newqp.RandomPSN()
	}
	q := &QP{qp: c.QP, pd: pd, port: c.Port, qkey: cfg.QKey, psn: psn, sl: cfg.SL, tclass: cfg.TrafficClass}
	if err := newqp.BringUp(&q.Queue, spec, c.QP, true,
		ctx.QPAttr{State: ctx.QPStateInit, Port: c.Port.Number, QKey: cfg.QKey},
		ctx.QPAttr{State: ctx.QPStateRTR},
		ctx.QPAttr{State: ctx.QPStateRTS, SQPSN: psn}); err != nil {
		return nil, err
	}
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
	// borrowed is set when ah belongs to someone else (RemoteVia).
	borrowed bool
	// closed is set by Close: Post refuses r from then on.
	closed atomic.Bool
}

// NewRemote resolves a UD endpoint (a peer's Endpoint) into a Remote. An
// endpoint without an address the port can use (no GID on RoCE, no LID on
// InfiniBand, where a GID does not stand for one) is refused, the error
// wrapping ctx.ErrInvalidArgument; so is a closed QP, the error wrapping
// ctx.ErrClosed, with no address handle made.
func (q *QP) NewRemote(remote endpoint.Endpoint) (*Remote, error) {
	const op = "new remote"
	if err := remote.Validate(); err != nil {
		return nil, qpcore.Errorf(name, op, "remote endpoint: %w", err)
	}
	if remote.Transport != endpoint.TransportUD {
		return nil, qpcore.Errorf(name, op, "remote endpoint is %v: %w", remote.Transport, transport.ErrTransport)
	}
	path, err := q.port.PathTo(remote, q.sl)
	if err != nil {
		return nil, qpcore.Errorf(name, op, "%w", err)
	}
	if path.GlobalRoute {
		path.TrafficClass = q.tclass
	}
	return q.remote(op, path, remote.QPN, remote.QKey)
}

// errZeroQP is the cause of NewRemote's, RemoteVia's and ReplyRemote's
// error on a QP not made by New (a zero QP).
var errZeroQP = fmt.Errorf("QP not made by New: %w", ctx.ErrInvalidArgument)

// remote makes the address handle of a Remote (NewRemote, ReplyRemote);
// a closed QP is refused first: the handle would outlive it, until its PD
// closes.
func (q *QP) remote(op string, attr ctx.AddressAttr, qpn, qkey uint32) (*Remote, error) {
	if q.qp == nil {
		return nil, qpcore.Errorf(name, op, "%w", errZeroQP)
	}
	if q.qp.Closed() {
		return nil, qpcore.Errorf(name, op, "QP %#x: %w", q.QPN(), ctx.ErrClosed)
	}
	ah, err := q.pd.CreateAddressHandle(attr)
	if err != nil {
		return nil, qpcore.Errorf(name, op, "%w", err)
	}
	return &Remote{av: ah.AV(), qpn: qpn, qkey: qkey, ah: ah}, nil
}

// RemoteVia returns a Remote that sends through ah, an address handle the
// caller keeps (an ibpath.AddressCache's, for one), to the remote QPN qpn
// with the qkey qkey. ah must have been created in the QP's protection
// domain (another is refused with ctx.ErrInvalidArgument, as a closed
// QP or handle is with ctx.ErrClosed). The Remote borrows ah: its Close
// leaves ah open, and ah must stay open while the Remote is used.
func (q *QP) RemoteVia(ah *ctx.AddressHandle, qpn, qkey uint32) (*Remote, error) {
	const op = "remote via address handle"
	switch {
	case q.qp == nil:
		return nil, qpcore.Errorf(name, op, "%w", errZeroQP)
	case q.qp.Closed():
		return nil, qpcore.Errorf(name, op, "QP %#x: %w", q.QPN(), ctx.ErrClosed)
	case ah == nil:
		return nil, qpcore.Errorf(name, op, "nil address handle: %w", ctx.ErrInvalidArgument)
	case ah.Closed():
		return nil, qpcore.Errorf(name, op, "address handle: %w", ctx.ErrClosed)
	case ah.ProtectionDomain() != q.pd:
		return nil, qpcore.Errorf(name, op, "address handle of another protection domain than QP %#x's: %w", q.QPN(), ctx.ErrInvalidArgument)
	case qpn > prm.AVDQPNMask:
		return nil, qpcore.Errorf(name, op, "remote QPN %#x out of range (0..%#x): %w", qpn, prm.AVDQPNMask, ctx.ErrInvalidArgument)
	}
	return &Remote{av: ah.AV(), qpn: qpn, qkey: qkey, ah: ah, borrowed: true}, nil
}

// ReplyRemote returns a Remote that answers the sender of a receive
// completion c (ibv_init_ah_from_wc): its QPN, and its path: the
// completion's source LID and SL, its path bits as the source path bits,
// and, when a GRH was received, a GRH back to the GRH's source GID (grh is
// the first GRHSize bytes of the receive buffer; it may be nil when c.GRH
// is false), from the local GID the datagram was sent to, of its type (the
// QP's own GID when the port has no such entry). On InfiniBand the source LID
// stays the destination LID beside the GRH, as in ibv_init_ah_from_wc: the
// local route header still needs it (the sender's, or its router's). The
// GRH area holds an InfiniBand GRH or RoCE v2 IPv6 header, or, for RoCE v2
// over IPv4, an IPv4 header in its last 20 bytes, whose source address
// becomes the IPv4-mapped destination GID (::ffff:a.b.c.d). Anything else is
// refused with transport.ErrBadGRH. The qkey is this QP's own. It creates an address
// handle: a control-plane call, to be cached by a caller that replies often.
// A closed QP is refused, the error wrapping ctx.ErrClosed.
func (q *QP) ReplyRemote(c *transport.Completion, grh []byte) (*Remote, error) {
	const op = "reply remote"
	if c == nil || c.IsError() || c.IsSend() {
		return nil, qpcore.Errorf(name, op, "not a successful receive completion: %w", ctx.ErrInvalidArgument)
	}
	attr := ctx.AddressAttr{Port: q.port.Number, DLID: c.SLID, SL: c.SL, SrcPathBits: c.PathBits}
	if c.GRH || q.port.Link == ctx.LinkLayerEthernet {
		if len(grh) < GRHSize {
			return nil, qpcore.Errorf(name, op, "the completion carries a GRH: need its %d bytes, got %d: %w", GRHSize, len(grh), ctx.ErrInvalidArgument)
		}
		g, err := transport.ParseGRH(grh)
		if err != nil {
			return nil, qpcore.Errorf(name, op, "%w", err)
		}
		attr.GlobalRoute = true
		attr.FlowLabel = g.FlowLabel
		attr.TrafficClass = g.TrafficClass
		attr.HopLimit = 0xff
		attr.DGID = g.SGID
		attr.SGIDIndex = uint8(q.port.GID.Index)
		if q.qp != nil && !q.qp.Closed() { // else q.remote refuses q
			i, err := q.addressedGID(g)
			if err != nil {
				return nil, qpcore.Errorf(name, op, "%w", err)
			}
			attr.SGIDIndex = i
		}
	}
	return q.remote(op, attr, c.SourceQPN, q.qkey)
}

// addressedGID returns the index of the local GID a datagram with header
// g was sent to, in an entry of the kind it came as (RoCE v2 for a RoCE v2
// header, RoCE v1 or InfiniBand for a GRH, an entry of unknown type
// either), as ibv_init_ah_from_wc finds it with ibv_find_gid_index and
// ibpath.Reply does; the QP's own GID index when the port has no such
// entry.
func (q *QP) addressedGID(g transport.GRH) (uint8, error) {
	gids, err := q.pd.Context().QueryGIDs(q.port.Number)
	if err != nil {
		return 0, err
	}
	if i, ok := addrvec.AddressedGID(gids, g.DGID, g.RoCEv2); ok {
		return i, nil
	}
	return uint8(q.port.GID.Index), nil
}

// QPN returns the remote QPN.
func (r *Remote) QPN() uint32 { return r.qpn }

// QKey returns the qkey sends to r carry.
func (r *Remote) QKey() uint32 { return r.qkey }

// isClosed reports whether r's Close was called (false for a nil r).
func (r *Remote) isClosed() bool { return r != nil && r.closed.Load() }

// Close destroys the address handle, unless the Remote borrowed it
// (RemoteVia); either way Post refuses r from then on. It is idempotent.
//
// Close of a nil *Remote returns nil.
func (r *Remote) Close() error {
	if r == nil {
		return nil
	}
	r.closed.Store(true)
	if r.borrowed {
		return nil
	}
	return r.ah.Close()
}

// Post starts a send to r with work request id wrid and flags: the address
// vector, remote QPN and qkey are written; pick Send or SendImm on the
// stage, add the payload (at most the path MTU) and Finish. Post refuses,
// with a *wqebuilder.PostError, a QP in error or closed
// (transport.ErrQPError, ctx.ErrClosed), a nil r (ctx.ErrInvalidArgument)
// and an r after its Close (ctx.ErrClosed); the stage it returns then
// writes nothing and fails at Finish. It allocates nothing and takes no
// lock.
func (q *QP) Post(wrid uint64, flags wqebuilder.Flags, r *Remote) (s wqebuilder.DatagramStage, err error) {
	// A closure called once, as rc's Post. A nil r, or one closed,
	// is refused.
	s = func() wqebuilder.DatagramStage {
		var c wqebuilder.CtrlStage
		c, err = newqp.Begin(&q.Queue, wrid, flags, newqp.RemoteOf(r == nil, r.isClosed()))
		if r == nil {
			return c.UD(&noRemote.av, 0, 0) // the refusal's private full queue
		}
		return c.UD(&r.av, r.qpn, r.qkey)
	}()
	return s, err
}

// noRemote is the address of a refused post to a nil Remote, which its
// stage writes only to a private full queue.
var noRemote Remote

// GID returns the local GID table entry the QP sends from (on RoCE, and
// on InfiniBand with a GRH): the one Config.GID selected.
func (q *QP) GID() ctx.GIDEntry { return q.port.GID }

// Close destroys the queue pair, as transport.Queue.Close does: from any
// goroutine, idempotent. Close of a nil *QP returns nil.
func (q *QP) Close() error {
	if q == nil {
		return nil
	}
	return q.Queue.Close()
}
