package dc

import (
	"errors"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
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
	// used on RoCE (unset, one is chosen as for rc.Config.GID), SL the
	// service level of the paths to targets (0..15 on InfiniBand, 0..7
	// on RoCE; NewDCI refuses a wider value).
	Port uint8
	GID  ctx.GIDSelector
	SL   uint8

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
// any number of DCTs. It has no receive queue.
//
// A DCI is used by one goroutine at a time; Close may be called from any
// goroutine.
type DCI struct {
	// Queue is the data-plane part shared with the other transports; add
	// &dci.Queue to the Poller of its CQ.
	Queue

	qp   *ctx.QueuePair
	pd   *ctx.ProtectionDomain
	port transport.Port
	sl   uint8
}

// NewDCI creates a DC initiator in pd with completions on sendCQ and brings
// it to RTS: it may post as soon as it has a Remote.
func NewDCI(pd *ctx.ProtectionDomain, sendCQ *ctx.CompletionQueue, cfg DCIConfig) (*DCI, error) {
	const op = "new DCI"
	bad := func(format string, args ...any) (*DCI, error) {
		return nil, transport.Errorf(name, op, format+": %w", append(args, ctx.ErrInvalidArgument)...)
	}
	switch {
	case pd == nil:
		return bad("nil protection domain")
	case sendCQ == nil:
		return bad("nil send completion queue")
	case cfg.SendDepth == 0:
		return bad("send depth 0")
	}
	if cfg.MaxSendSGE == 0 {
		cfg.MaxSendSGE = 1
	}
	dev, err := pd.Context().Query()
	if err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	if !dev.DC {
		return nil, transport.Errorf(name, op, "device %s: %w", dev.Name, ctx.ErrNotSupported)
	}
	caps := ctx.QueuePairCaps{SendDepth: cfg.SendDepth, MaxSendSGE: cfg.MaxSendSGE, MaxInline: cfg.MaxInline}
	if err := transport.CheckCaps(dev, ctx.QPTypeDCI, caps, false); err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	var rts ctx.QPAttr
	// A DCI's reads and atomics are bounded by DC's own requester depth;
	// RC's is the best guess where the provider cannot tell it.
	rd := dev.MaxDCInitRdAtomic
	if rd == 0 {
		rd = dev.MaxQPInitRdAtomic
	}
	maxRd := uint8(min(max(rd, 1), 255))
	for _, k := range []struct {
		name     string
		v        int
		def, max uint8
		dst      *uint8
	}{
		{"max RDMA reads/atomics", cfg.MaxRdAtomic, min(16, maxRd), maxRd, &rts.MaxRdAtomic},
		{"timeout", cfg.Timeout, 14, 31, &rts.Timeout},
		{"retry count", cfg.RetryCount, 7, 7, &rts.RetryCount},
		{"RNR retry", cfg.RNRRetry, 7, 7, &rts.RNRRetry},
	} {
		if *k.dst, err = transport.Knob(k.v, k.def, k.max); err != nil {
			return bad("%s: %v", k.name, err)
		}
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
	qp, err := pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeDCI, SendCQ: sendCQ, Caps: caps})
	if err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	rts.State = ctx.QPStateRTS
	for _, a := range []ctx.QPAttr{
		{State: ctx.QPStateInit, Port: port.Number},
		{State: ctx.QPStateRTR, Port: port.Number, PathMTU: port.MTU},
		rts,
	} {
		if err := qp.Modify(a); err != nil {
			_ = qp.Close()
			return nil, transport.Errorf(name, op, "%w", err)
		}
	}
	d := &DCI{qp: qp, pd: pd, port: port, sl: cfg.SL}
	if err := transport.Setup(&d.Queue, name, qp, nil); err != nil {
		_ = qp.Close()
		return nil, transport.Errorf(name, op, "%w", err)
	}
	transport.SetState(&d.Queue, transport.StateReady)
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
	ep   endpoint.Endpoint
}

// NewRemote resolves a DC endpoint (a DCT's Endpoint) into a Remote for
// this DCI's posts.
func (d *DCI) NewRemote(remote endpoint.Endpoint) (*Remote, error) {
	const op = "new remote"
	if err := remote.Validate(); err != nil {
		return nil, transport.Errorf(name, op, "remote endpoint: %w", err)
	}
	if remote.Transport != endpoint.TransportDC {
		return nil, transport.Errorf(name, op, "remote endpoint is %v: %w", remote.Transport, transport.ErrTransport)
	}
	ah, err := d.pd.CreateAddressHandle(d.port.PathTo(remote, d.sl))
	if err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	return &Remote{av: ah.AV(), dctn: remote.DCTNumber, key: remote.DCAccessKey, ah: ah, ep: remote}, nil
}

// DCTNumber returns the number of the remote DCT.
func (r *Remote) DCTNumber() uint32 { return r.dctn }

// Key returns the DC access key the remote DCT checks.
func (r *Remote) Key() uint64 { return r.key }

// Endpoint returns the endpoint the Remote was made from.
func (r *Remote) Endpoint() endpoint.Endpoint { return r.ep }

// Close destroys the address handle. It is idempotent.
func (r *Remote) Close() error { return r.ah.Close() }

// Post starts a send WQE to the remote DCT r with work request id wrid and
// flags: the address vector, DCT number and DC access key are written, then
// pick the operation on the stage (SEND, SEND_IMM, SEND_INV, RDMA_WRITE,
// RDMA_WRITE_IMM, RDMA_READ, atomics), add the payload and Finish. Post
// refuses a DCI that is in error or closed with a *wqebuilder.PostError (transport.ErrQPError,
// ctx.ErrClosed); the stage it returns then writes nothing and fails at Finish.
// It allocates nothing and takes no lock.
func (d *DCI) Post(wrid uint64, flags wqebuilder.Flags, r *Remote) (s wqebuilder.OpStage, err error) {
	// A closure called once, as rc's Post.
	s = func() wqebuilder.OpStage {
		var c wqebuilder.CtrlStage
		c, err = transport.Begin(&d.Queue, wrid, flags)
		return c.DC(&r.av, r.dctn, r.key)
	}()
	return s, err
}

// PostStream is Post with a DCI stream id in the control segment
// (mlx5dv_wr_set_dc_addr_stream): WQEs of different streams of one DCI may
// be executed concurrently by the device.
func (d *DCI) PostStream(wrid uint64, flags wqebuilder.Flags, r *Remote, streamID uint16) (s wqebuilder.OpStage, err error) {
	// A closure called once, as rc's Post.
	s = func() wqebuilder.OpStage {
		var c wqebuilder.CtrlStage
		c, err = transport.Begin(&d.Queue, wrid, flags)
		return c.DCStream(&r.av, r.dctn, r.key, streamID)
	}()
	return s, err
}

// GID returns the local GID table entry the DCI sends from (on RoCE, and
// on InfiniBand with a GRH): the one DCIConfig.GID selected.
func (d *DCI) GID() ctx.GIDEntry { return d.port.GID }

// Handle returns the control-plane queue pair.
func (d *DCI) Handle() *ctx.QueuePair { return d.qp }

// Limits returns what the provider granted.
func (d *DCI) Limits() Limits { return transport.LimitsOf(d.qp) }

// Fail moves the DCI to the error state: its outstanding work requests
// complete with WR_FLUSH_ERR.
func (d *DCI) Fail() error {
	if err := d.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}); err != nil {
		return transport.Errorf(name, "move DCI to error", "%w", err)
	}
	transport.SetState(&d.Queue, transport.StateError)
	return nil
}

// Close destroys the DCI. Work requests the device has not completed are
// lost, with no completion.
//
// Close may be called from any goroutine, also while the owner posts on
// the DCI and polls its Pollers, as net.Conn.Close may: it closes only
// the control-plane queue pair (Handle), so the owner's posts fail with
// ctx.ErrClosed from then on (a stage begun before fails at Finish), and each
// Poller the DCI was added to drops it on the owner's goroutine, in a
// later Poll, once no CQE of it is left in the CQ; until then its CQEs
// are handed over as the device wrote them (Remove drops it at once).
// Close is idempotent.
func (d *DCI) Close() error {
	if err := d.qp.Close(); err != nil && !errors.Is(err, ctx.ErrClosed) {
		return transport.Errorf(name, "close DCI", "%w", err)
	}
	return nil
}

// DCTConfig configures a DC target.
type DCTConfig struct {
	// SRQ receives the SENDs and RDMA writes with immediate that reach the
	// DCT. It is required.
	SRQ *SharedReceiveQueue
	// Key is the DC access key every initiator must present.
	Key uint64
	// RemoteAccess is what initiators may do (the memory regions still
	// decide); 0 allows remote write, read and atomics.
	RemoteAccess ctx.Access
	// MinRNRTimer is the IB RNR timer code an initiator is asked to wait
	// when the SRQ is empty (0 picks 12: 0.64 ms; negative means 0).
	MinRNRTimer int
	// Port is the local port (default 1); GID the local GID entry (RoCE;
	// unset, one is chosen as for rc.Config.GID).
	Port uint8
	GID  ctx.GIDSelector
}

// DCT is a DC target: it receives from any DCI that presents its number
// and DC access key, through an SRQ; RDMA reads, writes and atomics reach
// the memory regions of its protection domain.
//
// Its receive completions arrive on its CQ with the DCT number as QPN; add
// &dct.Queue to the Poller of that CQ. A DCT is used by one goroutine at a
// time, the one that polls it and posts to its SRQ.
type DCT struct {
	// Queue is the data-plane part shared with the other transports.
	Queue

	qp   *ctx.QueuePair
	port transport.Port
	key  uint64
	srq  *SharedReceiveQueue
}

// NewDCT creates a DC target in pd with receive completions on recvCQ and
// brings it to RTR, where it receives; its DCT number is then known.
func NewDCT(pd *ctx.ProtectionDomain, recvCQ *ctx.CompletionQueue, cfg DCTConfig) (*DCT, error) {
	const op = "new DCT"
	bad := func(format string, args ...any) (*DCT, error) {
		return nil, transport.Errorf(name, op, format+": %w", append(args, ctx.ErrInvalidArgument)...)
	}
	switch {
	case pd == nil:
		return bad("nil protection domain")
	case recvCQ == nil:
		return bad("nil receive completion queue")
	case cfg.SRQ == nil:
		return bad("a DCT needs an SRQ")
	case cfg.SRQ.Closed():
		return nil, transport.Errorf(name, op, "SRQ: %w", ctx.ErrClosed)
	case cfg.RemoteAccess&^(ctx.AccessRemoteWrite|ctx.AccessRemoteRead|ctx.AccessRemoteAtomic|ctx.AccessLocalWrite) != 0:
		return bad("remote access %v", cfg.RemoteAccess)
	}
	dev, err := pd.Context().Query()
	if err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	if !dev.DC {
		return nil, transport.Errorf(name, op, "device %s: %w", dev.Name, ctx.ErrNotSupported)
	}
	rnr, err := transport.Knob(cfg.MinRNRTimer, 12, 31)
	if err != nil {
		return bad("min RNR timer: %v", err)
	}
	if err := transport.CheckFields(transport.PortField(dev, cfg.Port)); err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	port, err := transport.QueryPort(pd.Context(), cfg.Port, cfg.GID)
	if err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	qp, err := pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeDCT, RecvCQ: recvCQ, SRQ: cfg.SRQ.Handle(), DCKey: cfg.Key})
	if err != nil {
		return nil, transport.Errorf(name, op, "%w", err)
	}
	access := cfg.RemoteAccess
	if access == 0 {
		access = ctx.AccessRemoteWrite | ctx.AccessRemoteRead | ctx.AccessRemoteAtomic
	}
	path := ctx.AddressAttr{Port: port.Number}
	if port.Link == ctx.LinkLayerEthernet {
		path.GlobalRoute, path.SGIDIndex, path.HopLimit = true, uint8(port.GID.Index), 64
	}
	for _, a := range []ctx.QPAttr{
		{State: ctx.QPStateInit, Port: port.Number, Access: access},
		{State: ctx.QPStateRTR, Port: port.Number, PathMTU: port.MTU, MinRNRTimer: rnr, Path: path},
	} {
		if err := qp.Modify(a); err != nil {
			_ = qp.Close()
			return nil, transport.Errorf(name, op, "%w", err)
		}
	}
	t := &DCT{qp: qp, port: port, key: cfg.Key, srq: cfg.SRQ}
	if err := transport.Setup(&t.Queue, name, qp, cfg.SRQ); err != nil {
		_ = qp.Close()
		return nil, transport.Errorf(name, op, "%w", err)
	}
	transport.SetState(&t.Queue, transport.StateReady)
	return t, nil
}

// Number returns the DCT number (its QPN).
func (t *DCT) Number() uint32 { return t.QPN() }

// SRQ returns the shared receive queue the DCT receives through.
func (t *DCT) SRQ() *SharedReceiveQueue { return t.srq }

// Endpoint returns what an initiator needs to reach the DCT: DCT number,
// DC access key, LID, GID and GID index, MTU. Add the regions initiators may
// use to its Regions before sending it.
func (t *DCT) Endpoint() endpoint.Endpoint {
	ep := t.port.Endpoint(endpoint.TransportDC, t.QPN(), 0)
	ep.DCTNumber = t.QPN()
	ep.DCAccessKey = t.key
	return ep
}

// GID returns the local GID table entry of the DCT (its Endpoint's GID):
// the one DCTConfig.GID selected.
func (t *DCT) GID() ctx.GIDEntry { return t.port.GID }

// Handle returns the control-plane queue pair.
func (t *DCT) Handle() *ctx.QueuePair { return t.qp }

// Close destroys the DCT (not its SRQ). Receives it has not completed
// stay in the SRQ.
//
// Close may be called from any goroutine, also while the owner polls the
// DCT's Pollers and posts on its SRQ, as net.Conn.Close may: it closes
// only the control-plane queue pair (Handle), so the DCT receives no more,
// and each Poller the DCT was added to drops it on the owner's goroutine,
// in a later Poll, once no CQE of it is left in the CQ; until then its
// CQEs are handed over as the device wrote them (Remove drops it at once).
// Close is idempotent.
func (t *DCT) Close() error {
	if err := t.qp.Close(); err != nil && !errors.Is(err, ctx.ErrClosed) {
		return transport.Errorf(name, "close DCT", "%w", err)
	}
	return nil
}
