package ctx_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// fake is a provider that records the order in which objects are released.
type fake struct {
	mu     sync.Mutex
	log    []string
	n      int
	failOn string
	// onRegister, when set, runs inside RegisterMemory, where the
	// provider looks at the memory: what another goroutine may do then.
	onRegister func()
}

func (f *fake) record(s string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, s)
	if f.failOn == s {
		return errors.New("provider refused " + s)
	}
	return nil
}

func (f *fake) name(kind string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return fmt.Sprintf("%s%d", kind, f.n)
}

type closer struct {
	f    *fake
	name string
}

func (c closer) Close() error { return c.f.record("close " + c.name) }

func (f *fake) Devices() ([]provider.DeviceInfo, error) {
	return []provider.DeviceInfo{{Name: "fake0", Kind: ctx.KindSoftware}}, nil
}
func (f *fake) OpenDevice(name string) (provider.Device, error) {
	if name != "" && name != "fake0" {
		return nil, ctx.ErrNotFound
	}
	return fakeDev{closer{f, "dev"}}, nil
}

type fakeDev struct{ closer }

func (d fakeDev) Name() string                                  { return "fake0" }
func (d fakeDev) Kind() ctx.Kind                                { return ctx.KindSoftware }
func (d fakeDev) Query() (ctx.DeviceAttr, error)                { return ctx.DeviceAttr{Name: "fake0"}, nil }
func (d fakeDev) QueryPort(uint8) (ctx.PortAttr, error)         { return ctx.PortAttr{Port: 1}, nil }
func (d fakeDev) QueryGIDs(uint8) ([]ctx.GIDEntry, error)       { return nil, nil }
func (d fakeDev) AsyncEventFD() int                             { return -1 }
func (d fakeDev) ReadAsyncEvent() (ctx.AsyncEvent, bool, error) { return ctx.AsyncEvent{}, false, nil }
func (d fakeDev) AllocProtectionDomain() (provider.ProtectionDomain, error) {
	return fakePD{closer{d.f, d.f.name("PD")}}, nil
}
func (d fakeDev) CreateCompletionQueue(ctx.CompletionQueueConfig) (provider.CompletionQueue, error) {
	return fakeCQ{closer{d.f, d.f.name("CQ")}}, nil
}

type fakePD struct{ closer }

func (p fakePD) RegisterMemory(unsafe.Pointer, uint64, ctx.Access) (provider.MemoryRegion, error) {
	if p.f.onRegister != nil {
		p.f.onRegister()
	}
	if p.f.failOn == "register" {
		return nil, errors.New("provider refused register")
	}
	return fakeMR{closer{p.f, p.f.name("MR")}}, nil
}
func (p fakePD) CreateQueuePair(cfg provider.QueuePairConfig) (provider.QueuePair, error) {
	return &fakeQP{closer: closer{p.f, p.f.name("QP")}, dct: cfg.Type == ctx.QPTypeDCT}, nil
}
func (p fakePD) CreateSRQ(ctx.SRQConfig) (provider.SRQ, error) {
	return fakeSRQ{closer{p.f, p.f.name("SRQ")}}, nil
}
func (p fakePD) CreateAddressHandle(ctx.AddressAttr) (provider.AddressHandle, error) {
	return fakeAH{closer{p.f, p.f.name("AH")}}, nil
}

type fakeMR struct{ closer }

func (fakeMR) LKey() uint32 { return 1 }
func (fakeMR) RKey() uint32 { return 2 }

type fakeCQ struct{ closer }

func (fakeCQ) Descriptor() descriptor.CQ { return descriptor.CQ{CQN: 9} }
func (fakeCQ) EventFD() int              { return -1 }
func (fakeCQ) ReadEvent() (bool, error)  { return false, nil }

type fakeQP struct {
	closer
	state ctx.QPState
	dct   bool
	last  ctx.QPAttr // the attributes of the last Modify
}

// Descriptor numbers a DCT only once it reached RTR, as mlx5 does.
func (q *fakeQP) Descriptor() descriptor.QP {
	switch {
	case !q.dct:
		return descriptor.QP{QPN: 0x42}
	case q.state >= ctx.QPStateRTR && q.state != ctx.QPStateError:
		return descriptor.QP{QPN: 0x43}
	}
	return descriptor.QP{}
}
func (q *fakeQP) Modify(a ctx.QPAttr) error {
	if a.State == ctx.QPStateRTS && q.state != ctx.QPStateRTR {
		return ctx.ErrInvalidState
	}
	q.state, q.last = a.State, a
	return nil
}
func (q *fakeQP) State() (ctx.QPState, error) { return q.state, nil }

type fakeSRQ struct{ closer }

func (fakeSRQ) Descriptor() descriptor.SRQ { return descriptor.SRQ{SRQN: 3} }

type fakeAH struct{ closer }

func (fakeAH) AV() [prm.AVSize]byte { return [prm.AVSize]byte{1} }

func openFake(t *testing.T) (*fake, *ctx.Context) {
	f := &fake{}
	c, err := provider.Open("fake", f, "")
	require.NoError(t, err)
	return f, c
}

type world struct {
	pd       *ctx.ProtectionDomain
	cq1, cq2 *ctx.CompletionQueue
	mr       *ctx.MemoryRegion
	srq      *ctx.SharedReceiveQueue
	qp1, qp2 *ctx.QueuePair
	ah       *ctx.AddressHandle
	buf      *ctx.Buffer
}

func build(t *testing.T, c *ctx.Context) world {
	var w world
	var err error
	w.pd, err = c.AllocProtectionDomain()
	require.NoError(t, err)
	w.cq1, err = c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 4})
	require.NoError(t, err)
	w.cq2, err = c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 4})
	require.NoError(t, err)
	w.buf, err = ctx.AllocBuffer(4096, ctx.BufferOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { w.buf.Close() })
	w.mr, err = w.pd.RegisterBuffer(w.buf, ctx.AccessLocalWrite)
	require.NoError(t, err)
	w.srq, err = w.pd.CreateSRQ(ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	w.qp1, err = w.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: w.cq1, RecvCQ: w.cq2, Caps: ctx.QueuePairCaps{SendDepth: 4}})
	require.NoError(t, err)
	w.qp2, err = w.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeDCT, RecvCQ: w.cq2, SRQ: w.srq})
	require.NoError(t, err)
	w.ah, err = w.pd.CreateAddressHandle(ctx.AddressAttr{DLID: 1})
	require.NoError(t, err)
	return w
}

func TestContextCloseOrder(t *testing.T) {
	f, c := openFake(t)
	build(t, c)
	require.NoError(t, c.Close())
	// PD1 CQ2 CQ3 MR4 SRQ5 QP6 QP7 AH8: QPs (newest first), SRQ, CQs, AH,
	// MR, PD, device.
	require.Equal(t, []string{"close QP7", "close QP6", "close SRQ5", "close CQ3", "close CQ2",
		"close AH8", "close MR4", "close PD1", "close dev"}, f.log)
	require.NoError(t, c.Close(), "idempotent")
	require.Len(t, f.log, 9)
}

func TestCloseCascades(t *testing.T) {
	f, c := openFake(t)
	w := build(t, c)
	// Closing a CQ takes the QPs that use it down first, and nothing else.
	require.NoError(t, w.cq1.Close())
	require.Equal(t, []string{"close QP6", "close CQ2"}, f.log)
	require.True(t, w.qp1.Closed())
	require.False(t, w.qp2.Closed())
	// Closing the SRQ takes the DCT.
	f.log = nil
	require.NoError(t, w.srq.Close())
	require.Equal(t, []string{"close QP7", "close SRQ5"}, f.log)
	// The PD takes the rest of its children.
	f.log = nil
	require.NoError(t, w.pd.Close())
	require.Equal(t, []string{"close AH8", "close MR4", "close PD1"}, f.log)
	f.log = nil
	require.NoError(t, c.Close())
	require.Equal(t, []string{"close CQ3", "close dev"}, f.log)
}

func TestUseAfterClose(t *testing.T) {
	_, c := openFake(t)
	w := build(t, c)
	require.NoError(t, w.pd.Close())
	_, err := w.pd.RegisterBuffer(w.buf, 0)
	require.ErrorIs(t, err, ctx.ErrClosed)
	_, err = w.pd.CreateSRQ(ctx.SRQConfig{Depth: 1})
	require.ErrorIs(t, err, ctx.ErrClosed)
	_, err = w.pd.CreateAddressHandle(ctx.AddressAttr{})
	require.ErrorIs(t, err, ctx.ErrClosed)
	_, err = w.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: w.cq1, Caps: ctx.QueuePairCaps{SendDepth: 1}})
	require.ErrorIs(t, err, ctx.ErrClosed)
	err = w.qp1.Modify(ctx.QPAttr{State: ctx.QPStateInit})
	require.ErrorIs(t, err, ctx.ErrClosed)
	var oe *ctx.OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "modify RC QP to INIT", oe.Op)
	_, err = w.qp1.State()
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.NoError(t, w.mr.Close(), "closing a closed object is fine")
	require.NoError(t, c.Close())
	_, err = c.AllocProtectionDomain()
	require.ErrorIs(t, err, ctx.ErrClosed)
	_, err = c.Query()
	require.ErrorIs(t, err, ctx.ErrClosed)
	_, err = c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 1})
	require.ErrorIs(t, err, ctx.ErrClosed)
	_, err = provider.ReadCQEvent(w.cq2)
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.Equal(t, -1, provider.CQEventFD(w.cq2))
}

// TestZeroValues: a zero value of a ctx object (one not made by Open or a
// Create, Alloc or Register method) does not panic: its Close returns nil,
// as Close of a nil pointer does, and the calls that would reach the
// device return an *OpError wrapping ErrInvalidArgument. Before, Close of
// a zero MemoryRegion, ProtectionDomain, CompletionQueue, SRQ, address
// handle or QP, and a zero Context's AllocProtectionDomain, panicked.
func TestZeroValues(t *testing.T) {
	var (
		c  ctx.Context
		pd ctx.ProtectionDomain
		qp ctx.QueuePair
	)
	invalid := func(err error, op string) {
		t.Helper()
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, op)
		var oe *ctx.OpError
		require.ErrorAs(t, err, &oe, op)
		require.Equal(t, op, oe.Op)
	}
	_, err := c.AllocProtectionDomain()
	invalid(err, "alloc PD")
	_, err = c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 1})
	invalid(err, "create CQ")
	_, err = c.Query()
	invalid(err, "query device")
	_, err = pd.RegisterMemory(make([]byte, 64), ctx.AccessLocalWrite)
	invalid(err, "register MR")
	_, err = pd.CreateSRQ(ctx.SRQConfig{Depth: 1})
	invalid(err, "create SRQ")
	_, err = pd.CreateAddressHandle(ctx.AddressAttr{})
	invalid(err, "create AH")
	_, err = qp.State()
	invalid(err, "query QP")
	for name, x := range map[string]interface{ Close() error }{
		"Context": &c, "ProtectionDomain": &pd, "QueuePair": &qp,
		"MemoryRegion": &ctx.MemoryRegion{}, "CompletionQueue": &ctx.CompletionQueue{},
		"SharedReceiveQueue": &ctx.SharedReceiveQueue{}, "AddressHandle": &ctx.AddressHandle{},
	} {
		require.NoError(t, x.Close(), name)
		require.NoError(t, x.Close(), name)
	}
}

// TestZeroQueuePairAccessors: QPN, RemoteQPN and Retries of a zero
// QueuePair report nothing (0, not counted), as a closed QP's do; they took
// the nil tree's lock and panicked.
func TestZeroQueuePairAccessors(t *testing.T) {
	var qp ctx.QueuePair
	require.Zero(t, qp.QPN())
	require.Zero(t, qp.RemoteQPN())
	rnr, tr, counted := qp.Retries()
	require.Zero(t, rnr)
	require.Zero(t, tr)
	require.False(t, counted)
}

func TestCloseKeepsGoingOnProviderError(t *testing.T) {
	f, c := openFake(t)
	build(t, c)
	f.failOn = "close SRQ5"
	err := c.Close()
	require.Error(t, err)
	require.Contains(t, err.Error(), "close context")
	require.Contains(t, err.Error(), "provider refused close SRQ5")
	require.Len(t, f.log, 9, "everything is released despite the error")
	require.True(t, c.Closed())
}

func TestInvalidArguments(t *testing.T) {
	_, c := openFake(t)
	defer c.Close()
	w := build(t, c)
	_, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 0})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 1, CQESize: 96})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = w.pd.RegisterMemory(nil, ctx.AccessLocalWrite)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = w.pd.RegisterBuffer(w.buf, ctx.AccessRemoteWrite)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument, "remote write needs local write")
	_, err = w.pd.RegisterBuffer(w.buf, 1<<7)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = w.pd.CreateQueuePair(ctx.QueuePairConfig{Type: 9, SendCQ: w.cq1})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = w.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, Caps: ctx.QueuePairCaps{SendDepth: 1}})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = w.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeDCT, RecvCQ: w.cq1})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = w.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: w.cq1})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, c2 := openFake(t)
	defer c2.Close()
	cqOther, err := c2.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 1})
	require.NoError(t, err)
	_, err = w.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cqOther, Caps: ctx.QueuePairCaps{SendDepth: 1}})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	err = w.qp1.Modify(ctx.QPAttr{State: ctx.QPStateRTS})
	require.ErrorIs(t, err, ctx.ErrInvalidState)
	require.NoError(t, w.qp1.Modify(ctx.QPAttr{State: ctx.QPStateInit}))
	require.NoError(t, w.qp1.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: 7}))
	require.Equal(t, uint32(7), w.qp1.RemoteQPN())
	s, err := w.qp1.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTR, s)
}

// registrations makes each run of TestRegisterAndOpen (go test -count=N)
// register a provider name of its own: the registry is process-wide.
var registrations int

func TestRegisterAndOpen(t *testing.T) {
	registrations++
	name := fmt.Sprintf("fake-registered-%d", registrations)
	require.Panics(t, func() { provider.Register("", &fake{}) })
	provider.Register(name, &fake{})
	require.Panics(t, func() { provider.Register(name, &fake{}) })
	require.Contains(t, ctx.Providers(), name)
	c, err := ctx.Open(ctx.Options{Provider: name})
	require.NoError(t, err)
	require.Equal(t, name, c.Provider())
	require.Equal(t, ctx.KindSoftware, c.Kind())
	require.Equal(t, "fake0 (software, provider "+name+")", c.String())
	require.NoError(t, c.Close())
	_, err = ctx.Open(ctx.Options{Provider: name, Device: "other"})
	require.ErrorIs(t, err, ctx.ErrNotFound)
	t.Setenv(ctx.EnvProvider, name)
	c, err = ctx.Open(ctx.Options{})
	require.NoError(t, err)
	require.Equal(t, name, c.Provider())
	require.NoError(t, c.Close())
}

func TestBuffer(t *testing.T) {
	b, err := ctx.AllocBuffer(5000, ctx.BufferOptions{Guard: true})
	require.NoError(t, err)
	require.Equal(t, 8192, b.Len())
	require.Zero(t, uintptr(b.Pointer())%4096)
	m := b.Bytes()
	m[0], m[len(m)-1] = 1, 2
	require.False(t, b.HugePages())
	require.NoError(t, b.Close())
	require.NoError(t, b.Close())
	require.Nil(t, b.Bytes())
	require.True(t, b.Closed())
	_, err = ctx.AllocBuffer(0, ctx.BufferOptions{})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)

	// Huge pages fall back to normal pages when none are reserved.
	h, err := ctx.AllocBuffer(1<<20, ctx.BufferOptions{HugePages: true})
	require.NoError(t, err)
	if h.HugePages() {
		require.Equal(t, ctx.HugePageSize, h.Len())
	} else {
		require.Equal(t, 1<<20, h.Len())
	}
	h.Bytes()[h.Len()-1] = 1
	require.NoError(t, h.Close())
}

func TestTimers(t *testing.T) {
	require.Equal(t, "655.36ms", ctx.RNRTimerDuration(0).String())
	require.Equal(t, "10µs", ctx.RNRTimerDuration(1).String())
	require.Equal(t, "1.28ms", ctx.RNRTimerDuration(14).String())
	require.Equal(t, "491.52ms", ctx.RNRTimerDuration(31).String())
	require.Zero(t, ctx.AckTimeoutDuration(0))
	require.Equal(t, "67.108864ms", ctx.AckTimeoutDuration(14).String())
}

func TestStrings(t *testing.T) {
	require.Equal(t, "LocalWrite|RemoteAtomic", (ctx.AccessLocalWrite | ctx.AccessRemoteAtomic).String())
	require.Equal(t, "RTS", ctx.QPStateRTS.String())
	require.Equal(t, "DCT", ctx.QPTypeDCT.String())
	require.Equal(t, "4096", ctx.MTU4096.String())
	require.Equal(t, 1024, ctx.MTU1024.Bytes())
	var g ctx.GID
	g[0], g[1], g[15] = 0xfe, 0x80, 1
	require.Equal(t, "fe80::1", g.String())
	require.Equal(t, "CQ_ERR cqn=0x5: overrun", ctx.AsyncEvent{Type: ctx.EventCQError, CQN: 5, Detail: "overrun"}.String())
	require.Equal(t, "COMM_EST qpn=0x105", ctx.AsyncEvent{Type: ctx.EventCommEstablished, QPN: 0x105}.String())
	require.Equal(t, "SRQ_ERR srqn=0x7", ctx.AsyncEvent{Type: ctx.EventSRQError, SRQN: 7}.String())
	require.Equal(t, "GID_CHANGE port=1", ctx.AsyncEvent{Type: ctx.EventGIDChange, Port: 1}.String())
	require.Equal(t, "WQ_FATAL", ctx.AsyncEvent{Type: ctx.EventWQFatal}.String())
	require.Equal(t, "AsyncEventType(21)", ctx.AsyncEventType(21).String())
	var attr ctx.DeviceAttr
	require.Equal(t, ctx.SupportUnknown, attr.MaskedAtomics, "an unfilled capability is unknown, not absent")
	require.False(t, attr.MaskedAtomics.Known())
	require.True(t, ctx.SupportNo.Known())
	require.Equal(t, "no", ctx.SupportNo.String())
	require.Equal(t, "yes", ctx.SupportYes.String())
	j, err := json.Marshal(struct{ M ctx.Support }{ctx.SupportUnknown})
	require.NoError(t, err)
	require.JSONEq(t, `{"M":"unknown"}`, string(j))
	var back struct{ M ctx.Support }
	require.NoError(t, json.Unmarshal([]byte(`{"M":"yes"}`), &back))
	require.Equal(t, ctx.SupportYes, back.M)
	require.ErrorIs(t, json.Unmarshal([]byte(`{"M":"maybe"}`), &back), ctx.ErrInvalidArgument)
	err = provider.Errorf("create QP", "depth: %w", ctx.ErrInvalidArgument)
	require.Equal(t, "ctx: create QP: depth: invalid argument", err.Error())
}

// TestModifyRefreshesDescriptor moves a DCT, whose number the provider
// assigns at RTR, through INIT to RTR: QPN and Descriptor report the
// number from then on.
func TestModifyRefreshesDescriptor(t *testing.T) {
	_, c := openFake(t)
	defer c.Close()
	w := build(t, c)
	require.Zero(t, w.qp2.QPN())
	require.NoError(t, w.qp2.Modify(ctx.QPAttr{State: ctx.QPStateInit}))
	require.Zero(t, w.qp2.QPN())
	require.NoError(t, w.qp2.Modify(ctx.QPAttr{State: ctx.QPStateRTR}))
	require.Equal(t, uint32(0x43), w.qp2.QPN())
	require.Equal(t, uint32(0x43), provider.QPDescriptor(w.qp2).QPN)
	require.Equal(t, uint32(0x42), w.qp1.QPN())
}

// TestClosedObjectsLeaveTheirParents creates and closes many children of
// one PD and CQ: each close takes the child out of its parents, so that a
// long-lived PD or CQ does not keep every object ever closed.
func TestClosedObjectsLeaveTheirParents(t *testing.T) {
	_, c := openFake(t)
	defer c.Close()
	w := build(t, c)
	pdChildren, cqChildren := ctx.Children(w.pd), ctx.Children(w.cq1)
	require.Equal(t, 5, pdChildren, "MR, SRQ, two QPs, AH")
	require.Equal(t, 1, cqChildren)
	for range 100 {
		mr, err := w.pd.RegisterBuffer(w.buf, ctx.AccessLocalWrite)
		require.NoError(t, err)
		ah, err := w.pd.CreateAddressHandle(ctx.AddressAttr{DLID: 2})
		require.NoError(t, err)
		qp, err := w.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: w.cq1, Caps: ctx.QueuePairCaps{SendDepth: 1}})
		require.NoError(t, err)
		require.Equal(t, pdChildren+3, ctx.Children(w.pd))
		require.Equal(t, cqChildren+1, ctx.Children(w.cq1))
		require.NoError(t, mr.Close())
		require.NoError(t, ah.Close())
		require.NoError(t, qp.Close())
	}
	require.Equal(t, pdChildren, ctx.Children(w.pd))
	require.Equal(t, cqChildren, ctx.Children(w.cq1))
	// A parent's close takes its children out of their other parents too.
	require.NoError(t, w.srq.Close())
	require.Equal(t, pdChildren-2, ctx.Children(w.pd), "the SRQ and the DCT on it")
	require.Equal(t, 1, ctx.Children(w.cq2), "the RC QP; the DCT left")
}

// Open with no provider named never picks the software HCA: here the
// hardware provider is not linked in, and the error says how to choose.
func TestOpenWithoutChoiceDoesNotFallBack(t *testing.T) {
	t.Setenv(ctx.EnvProvider, "")
	require.Contains(t, ctx.Providers(), ctx.ProviderSoftware)
	require.NotContains(t, ctx.Providers(), ctx.ProviderHardware)
	c, err := ctx.Open(ctx.Options{})
	require.Nil(t, c)
	require.ErrorIs(t, err, ctx.ErrNoDevice)
	require.Contains(t, err.Error(), `not linked in`)
	require.Contains(t, err.Error(), ctx.EnvProvider+"=sim")

	t.Setenv(ctx.EnvProvider, ctx.ProviderSoftware)
	c, err = ctx.Open(ctx.Options{})
	require.NoError(t, err)
	require.Equal(t, ctx.KindSoftware, c.Kind())
	require.NoError(t, c.Close())

	// A provider that is not registered: the error names where the name
	// came from.
	t.Setenv(ctx.EnvProvider, "bogus")
	_, err = ctx.Open(ctx.Options{})
	require.ErrorIs(t, err, ctx.ErrNotFound)
	require.Contains(t, err.Error(), `provider "bogus" ($`+ctx.EnvProvider+`): not found`)
	_, err = ctx.Open(ctx.Options{Provider: "other"})
	require.Contains(t, err.Error(), `provider "other" (Options.Provider): not found`)
}

// TestParseLinkLayer: the names the tools and environment variables take,
// in any case; anything else is refused. LinkLayer still encodes and
// decodes in JSON as a number.
func TestParseLinkLayer(t *testing.T) {
	for text, want := range map[string]ctx.LinkLayer{"infiniband": ctx.LinkLayerInfiniBand, "IB": ctx.LinkLayerInfiniBand, "InfiniBand": ctx.LinkLayerInfiniBand,
		"ethernet": ctx.LinkLayerEthernet, "Ethernet": ctx.LinkLayerEthernet, "eth": ctx.LinkLayerEthernet, "RoCE": ctx.LinkLayerEthernet} {
		l, err := ctx.ParseLinkLayer(text)
		require.NoError(t, err, text)
		require.Equal(t, want, l, text)
	}
	for _, text := range []string{"", "iwarp", "ether net"} {
		_, err := ctx.ParseLinkLayer(text)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%q", text)
	}
	b, err := json.Marshal(ctx.PortAttr{LinkLayer: ctx.LinkLayerEthernet})
	require.NoError(t, err)
	var back ctx.PortAttr
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, ctx.LinkLayerEthernet, back.LinkLayer)
}
