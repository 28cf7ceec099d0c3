package dc

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/newqp"
	"github.com/mlx5kit/mlx5kit/internal/transport/qpcore"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
	"sync/atomic"
)

const name = "dc"

// DCIConfig configures a DC initiator. The knobs of type int follow the
// convention of net.Dialer.KeepAlive: 0 picks the default, a negative value
// means 0.
type DCIConfig struct {
	// SendDepth is the number of send work requests that may be
	// outstanding; it must not be 0.
	SendDepth uint32
	// MaxSendSGE is the scatter/gather entries per WQE (default 1) and
	// MaxInline the most payload one WQE carries inline.
	MaxSendSGE uint32
	MaxInline  uint32

	// Port is the local port (default 1), GID the local GID table entry
	// used on RoCE (unset, one is chosen, and an index past the table
	// refused, as for rc.Config.GID), SL the
	// service level of the paths to targets (0..15 on InfiniBand, 0..7
	// on RoCE; NewDCI refuses a wider value).
	Port uint8
	GID  ctx.GIDSelector
	SL   uint8
	// TrafficClass is the traffic class of the GRH of the paths to
	// targets (on RoCE the IP header's DSCP and ECN bits); a path by LID
	// has no GRH and carries none.
	TrafficClass uint8
	// MTU is the path MTU of the DCI's sends: 0 picks the port's active
	// MTU, a larger one is lowered to it.
	MTU ctx.MTU

	// MaxRdAtomic is the number of RDMA reads and atomics outstanding
	// (default 16, at most what the device allows a DC requester:
	// DeviceAttr.MaxDCInitRdAtomic, which may be below RC's).
	MaxRdAtomic int
	// Timeout is the local ACK timeout code (default 14: about 67 ms),
	// RetryCount the transport retry count (default 7), RNRRetry the RNR
	// retry count (default 7: retry forever).
	Timeout    int
	RetryCount int
	RNRRetry   int
}

// DCI is a DC initiator: a send queue whose WQEs each name their target (a
// DCT, by number and DC access key, through a Remote), so one DCI reaches
// any number of DCTs. It has no receive queue. Its embedded
// transport.Queue has what every transport has (Handle, Limits, Fail,
// Close); add the DCI to the transport.Poller of its CQ.
//
// A DCI is used by one goroutine at a time; Close may be called from any
// goroutine.
type DCI struct {
	transport.Queue

	qp   *ctx.QueuePair
	pd   *ctx.ProtectionDomain
	port newqp.Port
	sl   uint8
	// tclass is DCIConfig.TrafficClass.
	tclass uint8
}

// dciSettings checks cfg's RTS settings against dev and fills rts with
// them or their defaults. A DCI's reads and atomics are bounded by DC's
// own requester depth, which kernels with the DC check of
// validate_rd_atomic apply, and by RC's, which earlier kernels apply: the
// lower of the two, as qpstate.CheckAttr bounds the modify (RC's alone
// where the provider cannot tell DC's).
func dciSettings(dev ctx.DeviceAttr, cfg DCIConfig, rts *ctx.QPAttr) error {
	rd := dev.MaxQPInitRdAtomic
	if dc := dev.MaxDCInitRdAtomic; dc != 0 && (rd == 0 || dc < rd) {
		rd = dc
	}
	maxRd := uint8(min(max(rd, 1), 255))
	return newqp.Settings(
		newqp.Setting{Name: "max RDMA reads/atomics", Value: cfg.MaxRdAtomic, Default: min(16, maxRd), Max: maxRd, Dst: &rts.MaxRdAtomic},
		newqp.Setting{Name: "timeout", Value: cfg.Timeout, Default: 14, Max: 31, Dst: &rts.Timeout},
		newqp.Setting{Name: "retry count", Value: cfg.RetryCount, Default: 7, Max: 7, Dst: &rts.RetryCount},
		newqp.Setting{Name: "RNR retry", Value: cfg.RNRRetry, Default: 7, Max: 7, Dst: &rts.RNRRetry},
	)
}

// NewDCI creates a DC initiator in pd with completions on cq and brings it
// to RTS: it may post as soon as it has a Remote.
func NewDCI(pd *ctx.ProtectionDomain, cq *ctx.CompletionQueue, cfg DCIConfig) (*DCI, error) {
	var rts ctx.QPAttr
	if cfg.MTU != 0 && !cfg.MTU.Valid() {
		return nil, qpcore.Errorf(name, "new DCI", "path MTU %d: %w", cfg.MTU, ctx.ErrInvalidArgument)
	}
	spec := newqp.Spec{Transport: name, Op: "new DCI", Type: ctx.QPTypeDCI, CQ: cq,
		Caps: ctx.QueuePairCaps{SendDepth: cfg.SendDepth, MaxSendSGE: cfg.MaxSendSGE, MaxInline: cfg.MaxInline},
		Port: cfg.Port, GID: cfg.GID, SL: cfg.SL,
		Check: func(dev ctx.DeviceAttr) error { return dciSettings(dev, cfg, &rts) },
	}
	c, err := newqp.Create(pd, spec)
	if err != nil {
		return nil, err
	}
	rts.State = ctx.QPStateRTS
	d := &DCI{qp: c.QP, pd: pd, port: c.Port, sl: cfg.SL, tclass: cfg.TrafficClass}
	if err := newqp.BringUp(&d.Queue, spec, c.QP, true,
		ctx.QPAttr{State: ctx.QPStateInit, Port: c.Port.Number},
		ctx.QPAttr{State: ctx.QPStateRTR, Port: c.Port.Number, PathMTU: pathMTU(cfg.MTU, c.Port.MTU)},
		rts); err != nil {
		return nil, err
	}
	return d, nil
}

// Remote is a DCT as a DCI reaches it: the address vector of its port,
// its DCT number and its DC access key. It holds an address handle; Close
// it when it is no longer used. A Remote may be used by every DCI of the
// protection domain it was created in.
type Remote struct {
	av   [prm.AVSize]byte
	dctn uint32
	key  uint64
	ah   *ctx.AddressHandle
	// closed is set by Close: Post refuses r from then on.
	closed atomic.Bool
}

// NewRemote resolves a DC endpoint (a DCT's Endpoint) into a Remote for
// this DCI's posts. An endpoint without an address the port can use (no
// GID on RoCE, no LID on InfiniBand, where a GID does not stand for one)
// is refused, the error wrapping ctx.ErrInvalidArgument; so is a closed
// DCI, the error wrapping ctx.ErrClosed, with no address handle made.
func (d *DCI) NewRemote(remote endpoint.Endpoint) (*Remote, error) {
	const op = "new remote"
	if d.qp == nil {
		return nil, qpcore.Errorf(name, op, "DCI not made by NewDCI: %w", ctx.ErrInvalidArgument)
	}
	if err := remote.Validate(); err != nil {
		return nil, qpcore.Errorf(name, op, "remote endpoint: %w", err)
	}
	if remote.Transport != endpoint.TransportDC {
		return nil, qpcore.Errorf(name, op, "remote endpoint is %v: %w", remote.Transport, transport.ErrTransport)
	}
	path, err := d.port.PathTo(remote, d.sl)
	if err != nil {
		return nil, qpcore.Errorf(name, op, "%w", err)
	}
	if path.GlobalRoute {
		path.TrafficClass = d.tclass
	}
	if d.qp.Closed() {
		// The address handle would outlive the DCI, until its PD closes.
		return nil, qpcore.Errorf(name, op, "DCI %#x: %w", d.QPN(), ctx.ErrClosed)
	}
	ah, err := d.pd.CreateAddressHandle(path)
	if err != nil {
		return nil, qpcore.Errorf(name, op, "%w", err)
	}
	return &Remote{av: ah.AV(), dctn: remote.DCTNumber, key: remote.DCAccessKey, ah: ah}, nil
}

// DCTNumber returns the number of the remote DCT.
func (r *Remote) DCTNumber() uint32 { return r.dctn }

// Key returns the DC access key the remote DCT checks.
func (r *Remote) Key() uint64 { return r.key }

// isClosed reports whether r's Close was called (false for a nil r).
func (r *Remote) isClosed() bool { return r != nil && r.closed.Load() }

// Close destroys the address handle; Post refuses r from then on. It is
// idempotent.
//
// Close of a nil *Remote returns nil.
func (r *Remote) Close() error {
	if r == nil {
		return nil
	}
	r.closed.Store(true)
	return r.ah.Close()
}

// Post starts a send WQE to the remote DCT r with work request id wrid and
// flags: the address vector, DCT number and DC access key are written, then
// pick the operation on the stage (SEND, SEND_IMM, SEND_INV, RDMA_WRITE,
// RDMA_WRITE_IMM, RDMA_READ, atomics), add the payload and Finish. Post
// refuses, with a *wqebuilder.PostError, a DCI in error or closed
// (transport.ErrQPError, ctx.ErrClosed), a nil r (ctx.ErrInvalidArgument)
// and an r after its Close (ctx.ErrClosed); the stage it returns then
// writes nothing and fails at Finish. It does not refuse an atomic on a
// device that reports none (ctx.DeviceAttr.AtomicHCA false), as libmlx5's
// post does with EOPNOTSUPP: the device completes that WQE with an error.
// It allocates nothing and takes no lock.
func (d *DCI) Post(wrid uint64, flags wqebuilder.Flags, r *Remote) (s wqebuilder.OpStage, err error) {
	// A closure called once, as rc's Post. A nil r, or one closed,
	// is refused.
	s = func() wqebuilder.OpStage {
		var c wqebuilder.CtrlStage
		c, err = newqp.Begin(&d.Queue, wrid, flags, newqp.RemoteOf(r == nil, r.isClosed()))
		if r == nil {
			return c.OpStage // the refusal's private full queue
		}
		return c.DC(&r.av, r.dctn, r.key)
	}()
	return s, err
}

// GID returns the local GID table entry the DCI sends from (on RoCE, and
// on InfiniBand with a GRH): the one DCIConfig.GID selected.
func (d *DCI) GID() ctx.GIDEntry { return d.port.GID }

// DCTConfig configures a DC target.
type DCTConfig struct {
	// SRQ receives the SENDs and RDMA writes with immediate that reach the
	// DCT. It is required.
	SRQ *transport.SharedReceiveQueue
	// Key is the DC access key every initiator must present.
	Key uint64
	// RemoteAccess is what initiators may do (the memory regions still
	// decide); 0 allows remote write, read and, on a device that reports
	// atomics (ctx.DeviceAttr.AtomicHCA), atomics.
	RemoteAccess ctx.Access
	// MinRNRTimer is the IB RNR timer code an initiator is asked to wait
	// when the SRQ is empty (0 picks 12: 0.64 ms; negative means 0).
	MinRNRTimer int
	// Port is the local port (default 1); GID the local GID entry (RoCE;
	// unset, one is chosen, and an index past the table refused, as for
	// rc.Config.GID); SL the service level of the DCT's path: on RoCE
	// the priority of the DCT's responses (mlx5_ib's eth_prio; 0..7,
	// NewDCT refuses a wider value), to match the initiators'
	// DCIConfig.SL as perftest's -S sets both; on InfiniBand (0..15)
	// mlx5_ib gives it to no field of the DCT.
	Port uint8
	GID  ctx.GIDSelector
	SL   uint8
	// TrafficClass is the traffic class of the GRH of the DCT's responses
	// on RoCE; MTU its path MTU (0: the port's active MTU, a larger one is
	// lowered to it).
	TrafficClass uint8
	MTU          ctx.MTU
}

// DCT is a DC target: it receives from any DCI that presents its number
// and DC access key, through an SRQ; RDMA reads, writes and atomics reach
// the memory regions of its protection domain.
//
// Its receive completions arrive on its CQ with the DCT number as QPN; add
// the DCT to the transport.Poller of that CQ. Close destroys the DCT, not
// its SRQ: receives it has not completed stay there. A DCT is used by one goroutine at a
// time, the one that polls it and posts to its SRQ.
type DCT struct {
	transport.Queue

	qp   *ctx.QueuePair
	port newqp.Port
	key  uint64
	// mtu is the path MTU of the DCT's RTR transition, which its
	// Endpoint carries.
	mtu ctx.MTU
}

// NewDCT creates a DC target in pd with receive completions on cq and
// brings it to RTR, where it receives; its DCT number is then known.
func NewDCT(pd *ctx.ProtectionDomain, cq *ctx.CompletionQueue, cfg DCTConfig) (*DCT, error) {
	var rnr uint8
	if cfg.MTU != 0 && !cfg.MTU.Valid() {
		return nil, qpcore.Errorf(name, "new DCT", "path MTU %d: %w", cfg.MTU, ctx.ErrInvalidArgument)
	}
	spec := newqp.Spec{Transport: name, Op: "new DCT", Type: ctx.QPTypeDCT, CQ: cq, SRQ: cfg.SRQ,
		Port: cfg.Port, GID: cfg.GID, SL: cfg.SL, RemoteAccess: cfg.RemoteAccess, DCKey: cfg.Key,
		Check: func(ctx.DeviceAttr) error {
			return newqp.Settings(newqp.Setting{Name: "min RNR timer", Value: cfg.MinRNRTimer, Default: 12, Max: 31, Dst: &rnr})
		},
	}
	c, err := newqp.Create(pd, spec)
	if err != nil {
		return nil, err
	}
	port := c.Port
	path := ctx.AddressAttr{Port: port.Number, SL: cfg.SL}
	if port.Link == ctx.LinkLayerEthernet {
		path.GlobalRoute, path.SGIDIndex, path.HopLimit = true, uint8(port.GID.Index), 64
		path.TrafficClass = cfg.TrafficClass
	}
	t := &DCT{qp: c.QP, port: port, key: cfg.Key, mtu: pathMTU(cfg.MTU, port.MTU)}
	if err := newqp.BringUp(&t.Queue, spec, c.QP, true,
		ctx.QPAttr{State: ctx.QPStateInit, Port: port.Number, Access: c.Access},
		ctx.QPAttr{State: ctx.QPStateRTR, Port: port.Number, PathMTU: t.mtu, MinRNRTimer: rnr, Path: path}); err != nil {
		return nil, err
	}
	return t, nil
}

// Endpoint returns what an initiator needs to reach the DCT: DCT number,
// DC access key, LID, GID and GID index, MTU (the DCT's path MTU:
// DCTConfig.MTU, or the port's active one). Add the regions initiators may
// use to its Regions before sending it.
func (t *DCT) Endpoint() endpoint.Endpoint {
	ep := t.port.Endpoint(endpoint.TransportDC, t.QPN(), 0)
	ep.MTU = t.mtu
	ep.DCTNumber = t.QPN()
	ep.DCAccessKey = t.key
	return ep
}

// GID returns the local GID table entry of the DCT (its Endpoint's GID):
// the one DCTConfig.GID selected.
func (t *DCT) GID() ctx.GIDEntry { return t.port.GID }

// pathMTU is the configured MTU m, or the port's active one when m is 0
// or larger.
func pathMTU(m, active ctx.MTU) ctx.MTU {
	if m == 0 || m > active {
		return active
	}
	return m
}

// Close destroys the DC initiator, as transport.Queue.Close does: from
// any goroutine, idempotent. Close of a nil *DCI returns nil.
func (d *DCI) Close() error {
	if d == nil {
		return nil
	}
	return d.Queue.Close()
}

// Close destroys the DC target, not its SRQ, as transport.Queue.Close
// does: from any goroutine, idempotent. Close of a nil *DCT returns nil.
func (t *DCT) Close() error {
	if t == nil {
		return nil
	}
	return t.Queue.Close()
}
