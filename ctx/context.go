package ctx

import (
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/mlx5kit/mlx5kit/internal/fieldcheck"
)

// EnvProvider is the environment variable that names the provider Open
// uses when Options.Provider is empty ("mlx5" or "sim").
const EnvProvider = "MLX5KIT_PROVIDER"

// Options select what Open opens.
type Options struct {
	// Provider is the name of a registered provider: ProviderHardware
	// ("mlx5") or ProviderSoftware ("sim"). Empty means the one the
	// environment variable MLX5KIT_PROVIDER names, and when that is unset
	// too, the hardware provider: the software HCA is never chosen
	// implicitly, so a host whose NIC fails to open gets an error rather
	// than the model.
	Provider string
	// Device is the device name; empty opens the provider's first device.
	Device string
	// DisableBlueFlame turns BlueFlame copies off for every queue pair of
	// the Context, as rdma-core's MLX5_SHUT_UP_BF does for its own posts:
	// descriptors report BlueFlameSize 0, so the data plane rings the
	// 8-byte doorbell and the device fetches each WQE from memory. It
	// trades a little latency for fewer write-combining stores (some
	// virtual machines and CPUs handle those badly).
	DisableBlueFlame bool
	// Logger, when not nil, receives the Context's control-plane events:
	// the GID entry ChooseGID picked (Info), every QP state transition
	// (Debug) and every async event its EventRouter reads (Error for the
	// fatal and error events, Info for the others). Nil is silent. The data
	// plane never logs.
	Logger *slog.Logger
}

// Context is an open device: the root of every other control-plane object.
// Closing it closes everything created from it. A Context may be used from
// several goroutines; the data-plane objects it hands out follow their own
// rules.
type Context struct {
	node
	tree     tree
	provider string
	dev      deviceHandle
	kind     Kind
	name     string
	// noBlueFlame is Options.DisableBlueFlame.
	noBlueFlame bool
	// logger is Options.Logger (see SetLogger).
	logger atomic.Pointer[slog.Logger]
	// idle is the device's Idle (Context.Idle); nil on hardware.
	idle func()
}

// chooseSoftware is the part of Open's error that says how to run on the
// software HCA instead of a NIC.
var chooseSoftware = fmt.Sprintf("to run on the software HCA, set Options.Provider to %q or %s=%s",
	ProviderSoftware, EnvProvider, ProviderSoftware)

// Open opens a device as opts say: of the provider Options.Provider names,
// else of the one MLX5KIT_PROVIDER names, else of the hardware provider.
// In the last case, when there is no mlx5 device, the hardware provider is
// not linked in or its device fails to open, Open returns an error wrapping
// the cause (ErrNoDevice when there is no device) whose text says how to
// choose the software HCA; it never falls back to the model by itself.
func Open(opts Options) (*Context, error) {
	const op = "open"
	name, chosen, from := opts.Provider, true, "Options.Provider"
	if name == "" {
		name, from = os.Getenv(EnvProvider), "$"+EnvProvider
	}
	if name == "" {
		name, chosen = ProviderHardware, false
	}
	p, ok := lookupProvider(name)
	switch {
	case !ok && !chosen:
		return nil, &OpError{Op: op, Err: fmt.Errorf("%w: no provider chosen and the hardware provider %q is not linked in (import mlx5kit/cgo); %s",
			ErrNoDevice, ProviderHardware, chooseSoftware)}
	case !ok:
		return nil, &OpError{Op: op, Err: fmt.Errorf("provider %q (%s): %w (registered: %v)", name, from, ErrNotFound, Providers())}
	}
	c, err := openWith(name, p, opts.Device)
	if err != nil {
		if !chosen {
			return nil, &OpError{Op: op, Err: fmt.Errorf("no provider chosen and the %s device did not open (%w); %s", name, err, chooseSoftware)}
		}
		return nil, err
	}
	c.noBlueFlame = opts.DisableBlueFlame
	c.logger.Store(opts.Logger)
	return c, nil
}

// openWith opens a device of the given provider, which need not be
// registered (internal/provider.Open uses it to open a private software
// HCA). name is what Context.Provider reports.
func openWith(name string, p seamProvider, device string) (*Context, error) {
	const op = "open"
	if p == nil {
		return nil, &OpError{Op: op, Err: fmt.Errorf("nil provider: %w", ErrInvalidArgument)}
	}
	h, err := p.OpenDevice(device)
	if err != nil {
		return nil, opErr(op+" "+name+" device "+fmt.Sprintf("%q", device), err)
	}
	dev := h.(deviceHandle)
	c := &Context{provider: name, dev: dev, kind: dev.Kind(), name: dev.Name()}
	if d, ok := dev.(idleHandle); ok {
		c.idle = d.IdleFunc()
	}
	c.node.init(&c.tree, rankContext, dev.Close)
	return c, nil
}

// Idle is what a busy-polling loop calls after a poll that found nothing.
// On a NIC it returns at once. On the software HCA it runs one round of
// the model on the calling goroutine — doorbells read, work executed,
// messages from other processes delivered, CQEs written — unless another
// goroutine is running one, and then yields the processor. A loop that
// calls it carries its requests to its peers and their answers to its CQs
// itself, instead of waiting for the model's engine goroutine to be
// scheduled: the round trip between processes falls to a few cache-line
// transfers (docs/benchmarks.md). Idle never blocks, allocates nothing,
// and is safe to call from any goroutine, also after Close.
func (c *Context) Idle() {
	if c.idle != nil {
		c.idle()
	}
}

// Kind reports whether the Context drives hardware or the software HCA.
func (c *Context) Kind() Kind { return c.kind }

// Provider returns the name of the provider behind the Context.
func (c *Context) Provider() string { return c.provider }

// DeviceName returns the name of the open device.
func (c *Context) DeviceName() string { return c.name }

// String describes the Context, e.g. "sim0 (software, provider sim)".
func (c *Context) String() string {
	return fmt.Sprintf("%s (%s, provider %s)", c.name, c.kind, c.provider)
}

// Closed reports whether Close has been called.
func (c *Context) Closed() bool { return c.isClosed() }

// Close closes every object created from the Context (QPs, SRQs, CQs,
// address handles, MRs, PDs, in that order) and then the device. It is
// idempotent.
//
// Close of a nil *Context, or of a zero Context (not made by Open),
// returns nil.
func (c *Context) Close() error {
	if c == nil {
		return nil
	}
	c.tree.mu.Lock()
	defer c.tree.mu.Unlock()
	return opErr("close context", c.closeLocked())
}

// errZero is the cause of a call on a zero value of a ctx object, one not
// made by Open or a Create, Alloc or Register method: it names no device
// object. (Close of one returns nil, as Close of a nil pointer does.)
var errZero = fmt.Errorf("a zero value, not made by this package: %w", ErrInvalidArgument)

// errNilContext is the cause of a call on a nil *Context, as the Context
// of a zero ProtectionDomain or CompletionQueue is.
var errNilContext = fmt.Errorf("nil context: %w", ErrInvalidArgument)

// lockContext is lock for the Context's verbs, which also refuse a nil
// *Context (errNilContext).
func (c *Context) lockContext(op string) error {
	if c == nil {
		return &OpError{Op: op, Err: errNilContext}
	}
	return c.lock(op)
}

// errNilPD is the cause of a call on a nil *ProtectionDomain.
var errNilPD = fmt.Errorf("nil protection domain: %w", ErrInvalidArgument)

// lockPD is lock for the protection domain's verbs, which also refuse a
// nil *ProtectionDomain (errNilPD).
func (pd *ProtectionDomain) lockPD(op string) error {
	if pd == nil {
		return &OpError{Op: op, Err: errNilPD}
	}
	return pd.lock(op)
}

// lock takes the tree lock and checks that the object is open (and not a
// zero value: errZero).
func (n *node) lock(op string) error {
	if n.t == nil {
		return &OpError{Op: op, Err: errZero}
	}
	n.t.mu.Lock()
	if n.closed.Load() {
		n.t.mu.Unlock()
		return &OpError{Op: op, Err: ErrClosed}
	}
	return nil
}

// Query returns the device attributes.
func (c *Context) Query() (DeviceAttr, error) {
	const op = "query device"
	if err := c.lockContext(op); err != nil {
		return DeviceAttr{}, err
	}
	defer c.tree.mu.Unlock()
	a, err := c.dev.Query()
	return a, opErr(op, err)
}

// QueryPort returns the attributes of a port (1-based).
func (c *Context) QueryPort(port uint8) (PortAttr, error) {
	const op = "query port"
	if err := c.lockContext(op); err != nil {
		return PortAttr{}, err
	}
	defer c.tree.mu.Unlock()
	a, err := c.dev.QueryPort(port)
	return a, opErr(op, err)
}

// QueryGIDs returns the valid GID table entries of a port.
func (c *Context) QueryGIDs(port uint8) ([]GIDEntry, error) {
	const op = "query GIDs"
	if err := c.lockContext(op); err != nil {
		return nil, err
	}
	defer c.tree.mu.Unlock()
	g, err := c.dev.QueryGIDs(port)
	return g, opErr(op, err)
}

// readAsyncEvent returns the next asynchronous event without blocking; ok
// is false when none is pending. The EventRouter reads with it.
func (c *Context) readAsyncEvent() (ev AsyncEvent, ok bool, err error) {
	const op = "read async event"
	defer func() {
		if ok { // after the unlock: the handler may call the Context
			c.logEvent(ev)
		}
	}()
	if err := c.lock(op); err != nil {
		return AsyncEvent{}, false, err
	}
	defer c.tree.mu.Unlock()
	ev, ok, err = c.dev.ReadAsyncEvent()
	return ev, ok, opErr(op, err)
}

// asyncEventFD returns a descriptor that becomes readable when an async
// event is pending, or -1.
func (c *Context) asyncEventFD() int { return c.dev.AsyncEventFD() }

// AllocProtectionDomain allocates a protection domain.
func (c *Context) AllocProtectionDomain() (*ProtectionDomain, error) {
	const op = "alloc PD"
	if err := c.lockContext(op); err != nil {
		return nil, err
	}
	defer c.tree.mu.Unlock()
	ph, err := c.dev.AllocProtectionDomain()
	if err != nil {
		return nil, opErr(op, err)
	}
	h := ph.(pdHandle)
	pd := &ProtectionDomain{ctx: c, h: h}
	pd.node.init(&c.tree, rankProtectionDomain, h.Close, &c.node)
	return pd, nil
}

// CreateCompletionQueue creates a completion queue.
func (c *Context) CreateCompletionQueue(cfg CompletionQueueConfig) (*CompletionQueue, error) {
	const op = "create CQ"
	if cfg.Depth == 0 || cfg.Depth > fieldcheck.MaxCQDepth {
		return nil, &OpError{Op: op, Err: fmt.Errorf("CQ depth %d out of range 1..%d: %w", cfg.Depth, fieldcheck.MaxCQDepth, ErrInvalidArgument)}
	}
	if cfg.CQESize == 0 {
		cfg.CQESize = 64
	}
	if cfg.CQESize != 64 && cfg.CQESize != 128 {
		return nil, &OpError{Op: op, Err: fmt.Errorf("CQE size %d (want 64 or 128): %w", cfg.CQESize, ErrInvalidArgument)}
	}
	if cfg.Compression > CQECompressionChecksum {
		return nil, &OpError{Op: op, Err: fmt.Errorf("compression %v: %w", cfg.Compression, ErrInvalidArgument)}
	}
	if cfg.CQEPadding && cfg.CQESize != 128 {
		return nil, &OpError{Op: op, Err: fmt.Errorf("CQE padding needs 128-byte CQEs, not %d: %w", cfg.CQESize, ErrInvalidArgument)}
	}
	if err := c.lockContext(op); err != nil {
		return nil, err
	}
	defer c.tree.mu.Unlock()
	ch, err := c.dev.CreateCompletionQueue(cfg)
	if err != nil {
		return nil, opErr(op, err)
	}
	h := ch.(cqHandle)
	cq := &CompletionQueue{ctx: c, h: h, desc: h.Descriptor(), cfg: cfg}
	cq.node.init(&c.tree, rankCompletionQueue, h.Close, &c.node)
	return cq, nil
}
