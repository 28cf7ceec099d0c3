// Package provider is the seam between package ctx and the providers in
// this module: the rdma-core provider (package cgo), the software HCA
// (package sim) and the test doubles built on them. A provider implements
// Provider and the handle interfaces and registers itself from its init
// with Register, the way database/sql drivers do, so ctx never imports
// one. The interfaces name ctx's types (DeviceAttr, QPAttr, the
// descriptors, …), so this package imports ctx; ctx reaches the providers
// through adapters this package registers in internal/seam.
//
// All provider methods are control-plane calls; they may allocate, lock and
// call C. They are called by ctx with the ctx object's lock held, never
// concurrently for the same object.
package provider

import (
	"fmt"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/seam"
)

// Provider is a source of devices: real hardware through rdma-core, or the
// software HCA.
type Provider interface {
	// Devices lists the devices the provider can open now. An empty list
	// with a nil error means the provider works but has no device.
	Devices() ([]DeviceInfo, error)
	// OpenDevice opens the named device; "" opens the first one.
	OpenDevice(name string) (Device, error)
}

// DeviceInfo names a device a provider can open.
type DeviceInfo struct {
	// Name is the device name (e.g. "mlx5_0", "sim0").
	Name string
	// NodeGUID is the node GUID (host byte order).
	NodeGUID uint64
	// Kind says whether it is hardware or the software HCA.
	Kind ctx.Kind
}

// Device is an open device (struct ibv_context plus its mlx5dv context).
type Device interface {
	// Name is the device's name.
	Name() string
	// Kind says whether the device is hardware or the software HCA.
	Kind() ctx.Kind
	// Query returns the device attributes.
	Query() (ctx.DeviceAttr, error)
	// QueryPort returns the attributes of a port (1-based).
	QueryPort(port uint8) (ctx.PortAttr, error)
	// QueryGIDs returns the valid entries of a port's GID table.
	QueryGIDs(port uint8) ([]ctx.GIDEntry, error)
	// AllocProtectionDomain allocates a protection domain.
	AllocProtectionDomain() (ProtectionDomain, error)
	// CreateCompletionQueue creates a completion queue.
	CreateCompletionQueue(cfg ctx.CompletionQueueConfig) (CompletionQueue, error)
	// AsyncEventFD is a descriptor that becomes readable when an async
	// event is pending (-1 if the provider has none; poll ReadAsyncEvent
	// then).
	AsyncEventFD() int
	// ReadAsyncEvent returns the next pending asynchronous event without
	// blocking; ok is false when none is pending.
	ReadAsyncEvent() (ev ctx.AsyncEvent, ok bool, err error)
	// Close releases the device. ctx closes every child first.
	Close() error
}

// ClockDevice is implemented by a provider's device that exposes its
// free-running clock, the one CQE timestamps count in (mlx5dv_get_clock_info
// on hardware). ctx.Context.Clock fails with ctx.ErrNotSupported on a
// device that does not implement it.
type ClockDevice interface {
	// ClockInfo returns a fresh snapshot of the device clock.
	ClockInfo() (ctx.ClockInfo, error)
}

// IdleDevice is implemented by a provider's device whose queues may be
// executed by software that a polling loop can run itself (the software
// HCA, or the model behind the emulated kernel): ctx.Context.Idle calls
// the function IdleFunc returns when the Context opens, nil when there is
// none (a NIC).
type IdleDevice interface {
	// IdleFunc returns what to run while the caller waits, which must
	// not block; nil when nothing.
	IdleFunc() func()
}

// ProtectionDomain is a protection domain (struct ibv_pd).
type ProtectionDomain interface {
	// RegisterMemory registers length bytes at addr (mmap'd memory, never
	// Go heap) with the given access.
	RegisterMemory(addr unsafe.Pointer, length uint64, access ctx.Access) (MemoryRegion, error)
	// CreateQueuePair creates a QP in RESET state and fills its
	// descriptor.
	CreateQueuePair(cfg QueuePairConfig) (QueuePair, error)
	// CreateSRQ creates a shared receive queue.
	CreateSRQ(cfg ctx.SRQConfig) (SRQ, error)
	// CreateAddressHandle creates an address handle for UD sends and DC
	// initiators.
	CreateAddressHandle(attr ctx.AddressAttr) (AddressHandle, error)
	// Close deallocates the protection domain. ctx closes every child
	// first.
	Close() error
}

// DMABufProtectionDomain is implemented by a provider's protection domain
// that can register memory exported as a dma-buf file descriptor
// (ibv_reg_dmabuf_mr). ctx.ProtectionDomain.RegisterDMABuf fails with
// ctx.ErrNotSupported on a provider whose PD does not implement it.
type DMABufProtectionDomain interface {
	// RegisterDMABuf registers length bytes of the dma-buf fd starting at
	// offset; the region's local and remote addresses start at iova.
	// ctx has checked the arguments that need no fd (see
	// ctx.ProtectionDomain.RegisterDMABuf); the provider checks the fd and
	// the range against it.
	RegisterDMABuf(fd int, offset, length, iova uint64, access ctx.Access) (MemoryRegion, error)
}

// MemoryRegion is a registered memory region (struct ibv_mr).
type MemoryRegion interface {
	// LKey is the local key.
	LKey() uint32
	// RKey is the remote key.
	RKey() uint32
	// Close deregisters the region.
	Close() error
}

// CompletionQueue is a completion queue (struct ibv_cq plus mlx5dv_cq).
type CompletionQueue interface {
	// Descriptor returns the ring as the data plane will read it.
	Descriptor() descriptor.CQ
	// EventFD is the completion channel's descriptor (non-blocking), or -1
	// when the CQ was created without EventChannel.
	EventFD() int
	// ReadEvent consumes and acknowledges one completion event without
	// blocking (ibv_get_cq_event + ibv_ack_cq_events); ok is false when none
	// is pending. Exactly one event is consumed per call that returns
	// true. The data plane must arm the CQ again, with the arm sequence
	// number advanced by one per event read, before the next event can
	// arrive.
	ReadEvent() (ok bool, err error)
	// Close destroys the CQ.
	Close() error
}

// QueuePairConfig is what ctx hands a provider to create a QP: the user's
// ctx.QueuePairConfig with the CQs and SRQ resolved to handles of the same
// provider.
type QueuePairConfig struct {
	Type ctx.QPType
	// SendCQ and RecvCQ receive the QP's completions. A DCT has no send
	// queue (SendCQ may equal RecvCQ); a DCI has no receive queue.
	SendCQ, RecvCQ CompletionQueue
	// SRQ, when non-nil, replaces the receive queue (required for DCT).
	SRQ  SRQ
	Caps ctx.QueuePairCaps
	// DCKey is the DC access key of a DCT.
	DCKey uint64
	// ScatterToCQE lets the device place small receive payloads (32 bytes
	// with 64-byte CQEs, 64 with 128-byte CQEs) in the CQE instead of the
	// receive buffer; the poller must then copy them out.
	ScatterToCQE bool
}

// QueuePair is a queue pair (struct ibv_qp plus mlx5dv_qp).
type QueuePair interface {
	// Descriptor returns the rings, doorbell record and BlueFlame register.
	// For a DCT the QPN is the DCT number, valid once the DCT reached RTR;
	// ctx calls Descriptor again after every Modify.
	Descriptor() descriptor.QP
	// Modify moves the QP to attr.State (see ctx.QPAttr for what is used).
	Modify(attr ctx.QPAttr) error
	// State returns the QP's current state as the provider knows it (a
	// QP the device moved to error reports QPStateError).
	State() (ctx.QPState, error)
	// Close destroys the QP.
	Close() error
}

// SRQ is a shared receive queue (struct ibv_srq plus mlx5dv_srq).
type SRQ interface {
	// Descriptor returns the ring as the data plane will write it.
	Descriptor() descriptor.SRQ
	// Close destroys the SRQ.
	Close() error
}

// AddressHandle is an address handle (struct ibv_ah plus mlx5dv_ah).
type AddressHandle interface {
	// AV returns the 48-byte address vector (struct mlx5_wqe_av) to copy
	// into a UD or DC send WQE. The qkey / DC key and remote QPN / DCT
	// number fields are left for the WQE builder to fill.
	AV() [prm.AVSize]byte
	// Close destroys the address handle.
	Close() error
}

// Register makes a provider available to ctx.Open under name. It is meant
// to be called from a provider package's init; it panics if name is empty,
// p is nil or the name is already taken.
func Register(name string, p Provider) {
	if p == nil {
		seam.Register(name, nil)
		return
	}
	seam.Register(name, providerSeam{p})
}

// Open opens a device of the given provider, which need not be registered
// (tests use it to open a private software HCA). name is what
// ctx.Context.Provider reports.
func Open(name string, p Provider, device string) (*ctx.Context, error) {
	var sp any
	if p != nil {
		sp = providerSeam{p}
	}
	c, err := seam.Open(name, sp, device)
	if err != nil {
		return nil, err
	}
	return c.(*ctx.Context), nil
}

// DeviceOf returns the provider's device behind c, for provider-specific
// extensions (the software HCA's controls, the hardware provider's
// mlx5dv queries).
func DeviceOf(c *ctx.Context) Device {
	d, _ := seam.Handle(c).(deviceSeam)
	return d.Device
}

// ProtectionDomainOf returns the provider's protection domain behind pd.
func ProtectionDomainOf(pd *ctx.ProtectionDomain) ProtectionDomain {
	p, _ := seam.Handle(pd).(pdSeam)
	return p.ProtectionDomain
}

// CompletionQueueOf returns the provider's completion queue behind cq.
func CompletionQueueOf(cq *ctx.CompletionQueue) CompletionQueue {
	h, _ := seam.Handle(cq).(CompletionQueue)
	return h
}

// QueuePairOf returns the provider's queue pair behind qp.
func QueuePairOf(qp *ctx.QueuePair) QueuePair {
	h, _ := seam.Handle(qp).(QueuePair)
	return h
}

// SRQOf returns the provider's shared receive queue behind s.
func SRQOf(s *ctx.SharedReceiveQueue) SRQ {
	h, _ := seam.Handle(s).(SRQ)
	return h
}

// QPDescriptor returns the rings, doorbell record and BlueFlame register
// of qp (re-read after every Modify: a DCT's number is known at RTR); the
// transports build their send and receive rings from it.
func QPDescriptor(qp *ctx.QueuePair) descriptor.QP {
	d, _ := seam.Descriptor(qp).(descriptor.QP)
	return d
}

// CQDescriptor returns the ring, doorbell record and UAR page of cq, which
// a poller (monocq) reads.
func CQDescriptor(cq *ctx.CompletionQueue) descriptor.CQ {
	d, _ := seam.Descriptor(cq).(descriptor.CQ)
	return d
}

// SRQDescriptor returns the ring and doorbell record of s.
func SRQDescriptor(s *ctx.SharedReceiveQueue) descriptor.SRQ {
	d, _ := seam.Descriptor(s).(descriptor.SRQ)
	return d
}

// CQEventFD returns the completion channel descriptor of cq, -1 when it
// was created without EventChannel or is closed. completion.Notifier
// sleeps on it.
func CQEventFD(cq *ctx.CompletionQueue) int { return seam.CQEventFD(cq) }

// ReadCQEvent consumes and acknowledges one completion event of cq without
// blocking, under the Context's lock; ok is false when none is pending. For
// every event it returns, the poller of the ring must advance its arm
// sequence number (monocq.CQ.AcknowledgeEvent) before it arms again, as
// completion.Notifier does.
func ReadCQEvent(cq *ctx.CompletionQueue) (ok bool, err error) { return seam.ReadCQEvent(cq) }

// ReadAsyncEvent returns the next asynchronous event of c without
// blocking (ok is false when none is pending), as c's EventRouter reads
// it: logged, under c's lock. Where no router runs, tests read the events
// one at a time with it.
func ReadAsyncEvent(c *ctx.Context) (ev ctx.AsyncEvent, ok bool, err error) {
	e, ok, err := seam.ReadAsyncEvent(c)
	ev, _ = e.(ctx.AsyncEvent)
	return ev, ok, err
}

// providerSeam, deviceSeam and pdSeam adapt the typed interfaces to the
// ones ctx declares for itself, which return the next handle as any.
type (
	providerSeam struct{ p Provider }
	deviceSeam   struct{ Device }
	pdSeam       struct{ ProtectionDomain }
)

// OpenDevice opens a device and returns its deviceSeam.
func (s providerSeam) OpenDevice(name string) (any, error) {
	d, err := s.p.OpenDevice(name)
	if err != nil {
		return nil, err
	}
	return deviceSeam{d}, nil
}

// AllocProtectionDomain allocates a protection domain and returns its
// pdSeam.
func (s deviceSeam) AllocProtectionDomain() (any, error) {
	pd, err := s.Device.AllocProtectionDomain()
	if err != nil {
		return nil, err
	}
	return pdSeam{pd}, nil
}

// CreateCompletionQueue creates a completion queue.
func (s deviceSeam) CreateCompletionQueue(cfg ctx.CompletionQueueConfig) (any, error) {
	return nonNil(s.Device.CreateCompletionQueue(cfg))
}

// ClockInfo returns the device's clock snapshot when the device implements
// ClockDevice, else an error wrapping ctx.ErrNotSupported.
func (s deviceSeam) ClockInfo() (ctx.ClockInfo, error) {
	d, ok := s.Device.(ClockDevice)
	if !ok {
		return ctx.ClockInfo{}, Errorf("clock info", "device %s: %w", s.Device.Name(), ctx.ErrNotSupported)
	}
	return d.ClockInfo()
}

// IdleFunc returns the device's Idle when it implements IdleDevice, else
// nil.
func (s deviceSeam) IdleFunc() func() {
	if d, ok := s.Device.(IdleDevice); ok {
		return d.IdleFunc()
	}
	return nil
}

// RegisterMemory registers memory.
func (s pdSeam) RegisterMemory(addr unsafe.Pointer, length uint64, access ctx.Access) (any, error) {
	return nonNil(s.ProtectionDomain.RegisterMemory(addr, length, access))
}

// DMABuf reports whether the protection domain implements
// DMABufProtectionDomain.
func (s pdSeam) DMABuf() bool {
	_, ok := s.ProtectionDomain.(DMABufProtectionDomain)
	return ok
}

// RegisterDMABuf registers dma-buf memory; ctx calls it only when DMABuf
// is true.
func (s pdSeam) RegisterDMABuf(fd int, offset, length, iova uint64, access ctx.Access) (any, error) {
	return nonNil(s.ProtectionDomain.(DMABufProtectionDomain).RegisterDMABuf(fd, offset, length, iova, access))
}

// CreateQueuePair resolves cfg's CQs and SRQ to this provider's handles
// and creates the QP.
func (s pdSeam) CreateQueuePair(cfg ctx.QueuePairConfig) (any, error) {
	pc := QueuePairConfig{
		Type: cfg.Type, SendCQ: CompletionQueueOf(cfg.SendCQ), RecvCQ: CompletionQueueOf(cfg.RecvCQ),
		Caps: cfg.Caps, DCKey: cfg.DCKey, ScatterToCQE: cfg.ScatterToCQE,
	}
	if cfg.SRQ != nil {
		pc.SRQ = SRQOf(cfg.SRQ)
	}
	return nonNil(s.ProtectionDomain.CreateQueuePair(pc))
}

// CreateSRQ creates a shared receive queue.
func (s pdSeam) CreateSRQ(cfg ctx.SRQConfig) (any, error) {
	return nonNil(s.ProtectionDomain.CreateSRQ(cfg))
}

// CreateAddressHandle creates an address handle.
func (s pdSeam) CreateAddressHandle(attr ctx.AddressAttr) (any, error) {
	return nonNil(s.ProtectionDomain.CreateAddressHandle(attr))
}

// nonNil returns h as any, nil (not a typed nil) when err is set.
func nonNil[H any](h H, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Errorf builds a *ctx.OpError for op whose cause is fmt.Errorf(format,
// args...); use %w in format to wrap a sentinel. Providers use it so that
// every error has the same shape.
func Errorf(op, format string, args ...any) error {
	return &ctx.OpError{Op: op, Err: fmt.Errorf(format, args...)}
}
