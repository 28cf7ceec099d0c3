package channel

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/transport/newqp"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
)

// Options tune a channel. Zero fields take the defaults.
type Options struct {
	// Transport is endpoint.TransportRC (the default: every peer gets its
	// own reliable connected queue pair) or endpoint.TransportDC (every
	// peer is sent to from one DC initiator and reaches a DC target of its
	// own here, with its own SRQ for the receives posted for it).
	Transport endpoint.Transport
	// SendDepth is the number of sends, writes and reads that may be
	// outstanding to each peer (RC), or in all (DC: the DC initiator's
	// depth). Default 64.
	SendDepth uint32
	// RecvDepth is the number of receives that may be outstanding from
	// each peer. Default 64.
	RecvDepth uint32
	// MaxSendSGE and MaxRecvSGE bound the buffers of one request (default
	// 1); MaxInline is the most payload a send may carry inline.
	MaxSendSGE, MaxRecvSGE, MaxInline uint32
	// CQDepth is the depth of the completion queue all queues share: at
	// least the work the depths allow outstanding (RC: peers × (SendDepth
	// + RecvDepth); DC: SendDepth + peers × RecvDepth), which is the
	// default. New and NewMulti refuse a smaller value, or a default
	// above 2³²−1, with ctx.ErrInvalidArgument. The work outstanding never
	// exceeds what the CQ holds less one, and sends and receives each
	// keep the share their depths allow (the rest of that room less the
	// other class's work): past it a blocking call or scope polls for
	// room, and a raw post fails with the queue-full error
	// (wqebuilder.ErrQueueFull, transport.ErrReceiveQueueFull).
	CQDepth uint32
	// Port (default 1) and GID select the local port and GID table entry.
	// An unset GID is chosen (ctx.ChooseGID: on RoCE a RoCE v2 GID,
	// IPv4-mapped first); ctx.GIDIndex(i) names entry i (an index past
	// the port's GID table is refused, on InfiniBand too). The GID methods
	// and the endpoints report the entry.
	Port uint8
	GID  ctx.GIDSelector
	// RemoteAccess is what peers may do to this side's memory through the
	// channel (the memory regions still decide); default remote write,
	// read and, on a device that reports atomics (ctx.DeviceAttr.AtomicHCA),
	// atomics.
	RemoteAccess ctx.Access
	// DCKey is the DC access key of this side's targets (default: a
	// random key).
	DCKey uint64
	// Events makes blocking calls and scopes sleep on the completion
	// channel after a short spin instead of polling until they are done.
	Events bool
	// WaitTimeout is the longest a blocking call or scope waits without any
	// completion arriving (0: no limit). When it passes, the call returns
	// ErrTimeout with its work still outstanding.
	WaitTimeout time.Duration
	// RetryCount, RNRRetry, Timeout codes and the RNR timer of the queue
	// pairs are those of package rc's defaults.

	// OnEvent, when set, makes the connected channel watch its context's
	// asynchronous events (through ctx.Context.EventRouter, which then
	// consumes every event of the context): OnEvent is called, one event
	// at a time, with each event about the channel's queue pairs, SRQs or
	// completion queue, its port, or the device. It usually runs on the
	// router's goroutine, but also on the goroutine of any caller of
	// EventRouter.Flush: a channel of the same Context whose work failed
	// reads the events the device holds that way, inside its blocking
	// call, scope, Pending.Wait or Pending.Poll, so OnEvent may run on
	// that channel's owner goroutine, this channel's included. It must
	// return promptly, never waiting for a channel's owner (a send on a
	// Go channel must not block: make it buffered, or select with a
	// default), and must not call the channel. An event that leaves the
	// channel unable to complete its work (QP_FATAL, QP_REQ_ERR,
	// QP_ACCESS_ERR, CQ_ERR, SRQ_ERR, PORT_ERR, DEVICE_FATAL, WQ_FATAL)
	// also fails the channel at its next wait (blocking call, scope, Pending.Wait): the outstanding
	// work is flushed as Fail does and the wait returns an error that
	// names the event (*EventError, wrapping ErrAsyncEvent) and wraps
	// ErrFailed. Err reports the event from then on. Reestablish builds
	// the channel again on the same memory regions. Nil: the channel reads
	// no event.
	OnEvent func(ctx.AsyncEvent)

	// Counters makes every queue pair of the channel and its Poller count
	// (transport.Queue.EnableCounters, transport.Poller.EnableCounters):
	// MultiChannel.Counters sums them. Off, the channel's
	// posts and polls pay nothing for it.
	Counters bool
}

func (o Options) withDefaults() Options {
	if o.Transport == 0 {
		o.Transport = endpoint.TransportRC
	}
	if o.SendDepth == 0 {
		o.SendDepth = 64
	}
	if o.RecvDepth == 0 {
		o.RecvDepth = 64
	}
	if o.MaxSendSGE == 0 {
		o.MaxSendSGE = 1
	}
	if o.MaxRecvSGE == 0 {
		o.MaxRecvSGE = 1
	}
	return o
}

// New creates a Channel's queue pair and its completion queue in pd, the
// protection domain every queue and memory region of the channel shares.
// Zero fields of opts take the defaults. Exchange Endpoint with the peer and
// call Handshake.
func New(pd *ctx.ProtectionDomain, opts Options) (*Prepared, error) {
	m, err := build(pd, 1, opts)
	if err != nil {
		return nil, err
	}
	return &Prepared{m: m}, nil
}

// NewMulti creates a MultiChannel to peers peers (at most
// endpoint.MaxPeers): a queue pair per peer (RC), or the initiator and a
// target per peer (DC), all on one completion queue in pd. Zero fields of
// opts take the defaults. Exchange Endpoints with the peers and call
// Handshake.
func NewMulti(pd *ctx.ProtectionDomain, peers int, opts Options) (*PreparedMulti, error) {
	return build(pd, peers, opts)
}

// PreparedMulti is a MultiChannel whose queues exist but are not connected
// yet: send Endpoints()[j] to peer j, collect the endpoint each peer made
// for this side, and Handshake with them.
//
// A zero PreparedMulti (or Prepared), one not made by this package, has
// no peers: its getters return zero values, Close returns nil, and the
// calls that would connect it refuse it with an error wrapping
// ctx.ErrInvalidArgument.
type PreparedMulti struct {
	c       *core
	regions []endpoint.RemoteRegion
	used    bool
}

func build(pd *ctx.ProtectionDomain, peers int, opts Options) (*PreparedMulti, error) {
	const op = "channel: build"
	opts = opts.withDefaults()
	switch {
	case pd == nil:
		return nil, fmt.Errorf("%s: nil protection domain: %w", op, ctx.ErrInvalidArgument)
	case peers < 1 || peers > endpoint.MaxPeers:
		return nil, fmt.Errorf("%s: %d peers (want 1..%d): %w", op, peers, endpoint.MaxPeers, ctx.ErrInvalidArgument)
	case opts.Transport != endpoint.TransportRC && opts.Transport != endpoint.TransportDC:
		return nil, fmt.Errorf("%s: transport %v: %w", op, opts.Transport, ctx.ErrInvalidArgument)
	}
	c := &core{transport: opts.Transport, timeout: opts.WaitTimeout, ctx: pd.Context(), pd: pd,
		links: make([]link, peers), opts: opts}
	ok := false
	defer func() {
		if !ok {
			_ = c.close()
		}
	}()
	// The work the depths allow to be outstanding at once, each request
	// a CQE: a smaller CQ would overrun.
	sendWork := uint64(peers) * uint64(opts.SendDepth)
	if opts.Transport == endpoint.TransportDC {
		sendWork = uint64(opts.SendDepth) // one DCI
	}
	recvWork := uint64(peers) * uint64(opts.RecvDepth)
	work := sendWork + recvWork
	cqDepth := opts.CQDepth
	switch {
	case cqDepth == 0 && work > math.MaxUint32:
		return nil, fmt.Errorf("%s: %d work requests outstanding at most (%d peers, SendDepth %d, RecvDepth %d): more than a completion queue holds: %w",
			op, work, peers, opts.SendDepth, opts.RecvDepth, ctx.ErrInvalidArgument)
	case cqDepth == 0:
		cqDepth = uint32(work)
	case uint64(cqDepth) < work:
		return nil, fmt.Errorf("%s: CQDepth %d is less than the %d work requests the depths allow outstanding (%d peers, SendDepth %d, RecvDepth %d): %w",
			op, cqDepth, work, peers, opts.SendDepth, opts.RecvDepth, ctx.ErrInvalidArgument)
	}
	var err error
	if c.port, err = newqp.QueryPort(c.ctx, opts.Port, opts.GID); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	dev, err := c.ctx.Query()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	c.atomics = dev.AtomicHCA
	c.cq, err = c.ctx.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: cqDepth, EventChannel: opts.Events})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if c.poller, err = transport.NewPoller(c.cq); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	// One CQE less than the ring holds: a poller that finds every slot
	// of the ring valid cannot tell a full ring from an overrun one, and
	// takes it for an overrun (monocq.ErrOverrun).
	c.cqRoom = int(provider.CQDescriptor(c.cq).CQECnt) - 1
	c.sendRoom, c.recvRoom = c.cqRoom-int(recvWork), c.cqRoom-int(sendWork)
	var outstanding uint64
	if opts.Transport == endpoint.TransportRC {
		for i := range c.links {
			qp, err := rc.New(pd, c.cq, rc.Config{
				SendDepth: opts.SendDepth, RecvDepth: opts.RecvDepth,
				MaxSendSGE: opts.MaxSendSGE, MaxRecvSGE: opts.MaxRecvSGE, MaxInline: opts.MaxInline,
				Port: opts.Port, GID: opts.GID, RemoteAccess: opts.RemoteAccess,
			})
			if err != nil {
				return nil, fmt.Errorf("%s: peer %d: %w", op, i, err)
			}
			c.links[i].qp = qp
			c.watchClose(qp.Handle())
			if err := c.poller.Add(qp); err != nil {
				return nil, fmt.Errorf("%s: %w", op, err)
			}
			l := qp.Limits()
			outstanding += uint64(l.SendWQEBBs) + uint64(l.RecvWQEs)
		}
	} else {
		c.dci, err = dc.NewDCI(pd, c.cq, dc.DCIConfig{SendDepth: opts.SendDepth, MaxSendSGE: opts.MaxSendSGE,
			MaxInline: opts.MaxInline, Port: opts.Port, GID: opts.GID})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		c.watchClose(c.dci.Handle())
		if err := c.poller.Add(c.dci); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		outstanding += uint64(c.dci.Limits().SendWQEBBs)
		key := opts.DCKey
		if key == 0 {
			var b [8]byte
			_, _ = rand.Read(b[:])
			key = binary.LittleEndian.Uint64(b[:]) | 1
		}
		for i := range c.links {
			srq, err := transport.NewSharedReceiveQueue(pd, ctx.SRQConfig{Depth: opts.RecvDepth, MaxSGE: opts.MaxRecvSGE})
			if err != nil {
				return nil, fmt.Errorf("%s: peer %d: %w", op, i, err)
			}
			c.srqs = append(c.srqs, srq)
			dct, err := dc.NewDCT(pd, c.cq, dc.DCTConfig{SRQ: srq, Key: key, RemoteAccess: opts.RemoteAccess,
				Port: opts.Port, GID: opts.GID})
			if err != nil {
				return nil, fmt.Errorf("%s: peer %d: %w", op, i, err)
			}
			c.links[i].dct, c.links[i].srq = dct, srq
			c.watchClose(dct.Handle())
			if err := c.poller.Add(dct); err != nil {
				return nil, fmt.Errorf("%s: %w", op, err)
			}
			outstanding += uint64(srq.Free()) + 1
		}
	}
	c.initSlots(outstanding)
	if opts.Counters {
		c.enableCounters()
	}
	if opts.Events {
		if c.notifier, err = completion.NewNotifier(c.cq, c.poller.CQ()); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
	}
	ok = true
	return &PreparedMulti{c: c}, nil
}

// Peers returns the number of peers.
func (p *PreparedMulti) Peers() int {
	if p.zero() {
		return 0
	}
	return len(p.c.links)
}

// zero reports whether p is nil or a zero PreparedMulti (a zero
// Prepared's is nil), one not made by this package.
func (p *PreparedMulti) zero() bool { return p == nil || p.c == nil }

// Share adds mr to the regions every peer learns from Endpoints, with the
// remote access it was registered with. Call it before Endpoints. After
// Handshake it returns ErrUsed: the peers have their endpoints already.
func (p *PreparedMulti) Share(mr *ctx.MemoryRegion) error {
	// After Handshake the peers have the endpoints already: they would
	// never learn the region.
	if err := p.usable("channel: share"); err != nil {
		return err
	}
	if mr == nil {
		return fmt.Errorf("channel: share: nil memory region: %w", ctx.ErrInvalidArgument)
	}
	if mr.Closed() {
		return fmt.Errorf("channel: share: memory region: %w", ctx.ErrClosed)
	}
	if mr.ProtectionDomain() != p.c.pd {
		return fmt.Errorf("channel: share: memory region of another protection domain: %w", ctx.ErrInvalidArgument)
	}
	if len(p.regions) >= endpoint.MaxRegions {
		return fmt.Errorf("channel: share: %w", endpoint.ErrTooManyRegions)
	}
	p.regions = append(p.regions, endpoint.RemoteRegion{
		Address: uint64(mr.Addr()), Length: mr.Len(), RemoteKey: mr.RKey(),
		Access: mr.Access() & endpoint.AccessKnown,
	})
	return nil
}

// Endpoints returns, for each peer j, the endpoint to send to peer j: the
// QPN, PSN and address of the queue pair for j (RC), or the number and key
// of the DC target for j with the initiator's QPN (DC), with the shared
// regions.
func (p *PreparedMulti) Endpoints() []endpoint.Endpoint {
	if p.zero() {
		return nil
	}
	c := p.c
	out := make([]endpoint.Endpoint, len(c.links))
	for j := range c.links {
		var e endpoint.Endpoint
		if c.transport == endpoint.TransportDC {
			e = c.links[j].dct.Endpoint()
			e.QPN = c.dci.QPN()
		} else {
			e = c.links[j].qp.Endpoint()
		}
		e.Regions = append([]endpoint.RemoteRegion(nil), p.regions...)
		out[j] = e
	}
	return out
}

// GID returns the local GID table entry every queue of the channel sends
// from, the one Options.GID selected: on RoCE it is the address the peers
// reach this side by (each endpoint's GID and GIDIndex).
func (p *PreparedMulti) GID() ctx.GIDEntry {
	if p.zero() {
		return ctx.GIDEntry{}
	}
	return p.c.gid()
}

// gid returns the GID table entry the channel's queues use.
func (c *core) gid() ctx.GIDEntry {
	if c.dci != nil {
		return c.dci.GID()
	}
	return c.links[0].qp.GID()
}

// Handshake connects the channel: remote[j] is the endpoint peer j made
// for this side. Every endpoint is checked (count, transport, ranges, an
// address this side's port can use) before anything is connected, so
// garbage changes nothing and the prepared channel may try again; a
// failure while connecting (the device refused) closes it.
func (p *PreparedMulti) Handshake(remote []endpoint.Endpoint) (*MultiChannel, error) {
	const op = "channel: handshake"
	if err := p.usable(op); err != nil {
		return nil, err
	}
	c := p.c
	if len(remote) != len(c.links) {
		return nil, fmt.Errorf("%s: %d endpoints for %d peers: %w", op, len(remote), len(c.links), ErrHandshake)
	}
	want := endpoint.TransportRC
	if c.transport == endpoint.TransportDC {
		want = endpoint.TransportDC
	}
	for j, e := range remote {
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("%s: peer %d: %w: %w", op, j, ErrHandshake, err)
		}
		if e.Transport != want {
			return nil, fmt.Errorf("%s: peer %d sent an endpoint of transport %v, the channel is %v: %w", op, j, e.Transport, c.transport, ErrHandshake)
		}
		if want == endpoint.TransportRC && e.QPN == 0 {
			return nil, fmt.Errorf("%s: peer %d sent QPN 0: %w", op, j, ErrHandshake)
		}
		if _, err := c.port.PathTo(e, 0); err != nil {
			// The address the queues connect by, as they will work it
			// out (rc.QP.Connect, dc.DCI.NewRemote).
			return nil, fmt.Errorf("%s: peer %d: %w: %w", op, j, ErrHandshake, err)
		}
		if want == endpoint.TransportDC && e.DCTNumber == 0 {
			return nil, fmt.Errorf("%s: peer %d sent no DCT number: %w", op, j, ErrHandshake)
		}
		if k := p.own(e); k >= 0 && k != j {
			// (Peer j naming this side's own endpoint for j is a mesh
			// rank's loop to itself.)
			return nil, fmt.Errorf("%s: peer %d sent this side's own endpoint for peer %d (QPN %#x, DCT %#x, LID %d; %s): %w",
				op, j, k, e.QPN, e.DCTNumber, e.LID, loopHint, ErrHandshake)
		}
	}
	p.used = true
	for j, e := range remote {
		var err error
		if c.transport == endpoint.TransportDC {
			c.links[j].remote, err = c.dci.NewRemote(e)
		} else {
			err = c.links[j].qp.Connect(e)
		}
		if err != nil {
			_ = c.close()
			return nil, fmt.Errorf("%s: peer %d: %w", op, j, err)
		}
		c.links[j].ep = e
	}
	c.regions = p.regions
	if err := c.watchEvents(); err != nil {
		_ = c.close()
		return nil, fmt.Errorf("%s: watch async events: %w", op, err)
	}
	return &MultiChannel{c: c}, nil
}

// usable returns nil while the prepared channel may still connect: an
// error naming op that wraps ErrUsed after Handshake, ctx.ErrClosed once
// it was closed (or its queue pairs were closed under it),
// ctx.ErrInvalidArgument for a zero one. Every call that sends its
// endpoints or connects asks it first, so that a peer is never handed the
// endpoint of a queue pair that cannot connect.
func (p *PreparedMulti) usable(op string) error {
	if p.zero() {
		return fmt.Errorf("%s: %w", op, errZeroPrepared)
	}
	if p.used {
		return fmt.Errorf("%s: %w", op, ErrUsed)
	}
	if p.c.shut() {
		return fmt.Errorf("%s: %w", op, closedError{under: p.c.closedUnder})
	}
	return nil
}

// errZeroPrepared is the cause of the refusal of a Prepared or
// PreparedMulti not made by this package (a zero value).
var errZeroPrepared = fmt.Errorf("prepared channel not made by New or NewMulti: %w", ctx.ErrInvalidArgument)

// loopHint is what a refusal of this side's own endpoint says about its
// usual cause: processes on the software HCA that are not on one shared
// fabric each number their queues alike.
const loopHint = "on the software HCA: the two processes are not on one fabric, so each numbers its queues alike; " +
	"give both the same MLX5KIT_SIM_FABRIC and the same /dev/shm"

// own returns the peer whose endpoint of this side e names (its queue
// pair, or its DCT, at the same LID and GID where e gives one), -1 when
// none does. Two peers named alike would share one queue; a Channel's
// one peer naming this side's own endpoint would make it a loop to
// itself, which a mesh's rank has on purpose, a Channel never.
func (p *PreparedMulti) own(e endpoint.Endpoint) int {
	for k, l := range p.Endpoints() {
		same := e.QPN == l.QPN
		if p.c.transport == endpoint.TransportDC {
			same = e.DCTNumber == l.DCTNumber
		}
		if same && e.LID == l.LID && (e.GID.IsZero() || e.GID == l.GID) {
			return k
		}
	}
	return -1
}

// Close releases the queues of a channel that was never connected. Once
// Handshake has started connecting it does nothing and returns nil: the
// queues belong to the MultiChannel Handshake returned, or were closed by
// the Handshake that failed while connecting. A deferred Close therefore
// releases a prepared channel on every path and never touches a live one.
//
// Close of a nil *PreparedMulti returns nil.
func (p *PreparedMulti) Close() error {
	if p.zero() || p.used {
		return nil
	}
	return p.c.close()
}

// close destroys everything the channel created, children first.
func (c *core) close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	if c.watch != nil {
		c.watch.sub.Cancel()
	}
	var errs []error
	add := func(err error) {
		if err != nil && !errors.Is(err, ctx.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if c.notifier != nil {
		add(c.notifier.Close())
	}
	for i := range c.links {
		l := &c.links[i]
		if l.qp != nil {
			add(l.qp.Close())
		}
		if l.remote != nil {
			add(l.remote.Close())
		}
		if l.dct != nil {
			add(l.dct.Close())
		}
	}
	for _, s := range c.srqs {
		add(s.Close())
	}
	if c.dci != nil {
		add(c.dci.Close())
	}
	if c.cq != nil {
		add(c.cq.Close())
	}
	return errors.Join(errs...)
}
