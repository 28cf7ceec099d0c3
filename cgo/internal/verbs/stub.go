//go:build !cgo || !linux

package verbs

import (
	"time"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// This file gives a build without cgo (or for an OS other than Linux) the
// same exported API as the hardware provider, so that a program written
// against it builds either way: no object can be created, and every entry
// point returns ErrUnavailable, which wraps ctx.ErrNotSupported
// (TestSameAPIWithAndWithoutCgo keeps the two in step).

// Enabled reports whether this build has the hardware provider (cgo on
// Linux). In this build it does not: every entry point returns
// ErrUnavailable, which wraps ctx.ErrNotSupported.
const Enabled = false

func init() { provider.Register(ctx.ProviderHardware, Provider{}) }

// Provider is the hardware provider registered with ctx as "mlx5"; in this
// build it has no devices and cannot open one.
type Provider struct{}

var _ provider.Provider = Provider{}

// Devices returns ErrUnavailable.
func (Provider) Devices() ([]provider.DeviceInfo, error) { return nil, ErrUnavailable }

// OpenDevice returns ErrUnavailable.
func (Provider) OpenDevice(name string) (provider.Device, error) { return nil, ErrUnavailable }

// ListDevices returns ErrUnavailable.
func ListDevices() ([]DeviceListing, error) { return nil, ErrUnavailable }

// FailAllocations does nothing: nothing is allocated.
func FailAllocations(on bool) {}

// NoDeviceReason returns why there is no mlx5 device: this build has no
// hardware provider.
func NoDeviceReason() string { return ErrUnavailable.Error() }

// Device stands for an open mlx5 device; in this build none can be opened.
type Device struct{}

// Open returns ErrUnavailable.
func Open(name string) (*Device, error) { return nil, ErrUnavailable }

// DeviceOf reports false: there are no hardware devices in this build.
func DeviceOf(h provider.Device) (*Device, bool) { return nil, false }

// Name returns "".
func (d *Device) Name() string { return "" }

// Kind returns ctx.KindHardware.
func (d *Device) Kind() ctx.Kind { return ctx.KindHardware }

// NodeGUID returns 0.
func (d *Device) NodeGUID() uint64 { return 0 }

// Close returns nil.
func (d *Device) Close() error { return nil }

// DVAttr returns the zero DVAttr.
func (d *Device) DVAttr() DVAttr { return DVAttr{} }

// AsyncEventFD returns -1.
func (d *Device) AsyncEventFD() int { return -1 }

// Query returns ErrUnavailable.
func (d *Device) Query() (ctx.DeviceAttr, error) { return ctx.DeviceAttr{}, ErrUnavailable }

// ClockInfo returns ErrUnavailable.
func (d *Device) ClockInfo() (ctx.ClockInfo, error) { return ctx.ClockInfo{}, ErrUnavailable }

// QueryDV returns ErrUnavailable.
func (d *Device) QueryDV() (DVAttr, error) { return DVAttr{}, ErrUnavailable }

// QueryExtended returns ErrUnavailable.
func (d *Device) QueryExtended() (ExtendedAttr, error) { return ExtendedAttr{}, ErrUnavailable }

// QueryPort returns ErrUnavailable.
func (d *Device) QueryPort(port uint8) (ctx.PortAttr, error) { return ctx.PortAttr{}, ErrUnavailable }

// QueryGID returns ErrUnavailable.
func (d *Device) QueryGID(port uint8, index int) (GIDTableEntry, error) {
	return GIDTableEntry{}, ErrUnavailable
}

// QueryGIDTable returns ErrUnavailable.
func (d *Device) QueryGIDTable() ([]GIDTableEntry, error) { return nil, ErrUnavailable }

// QueryGIDs returns ErrUnavailable.
func (d *Device) QueryGIDs(port uint8) ([]ctx.GIDEntry, error) { return nil, ErrUnavailable }

// ReadAsyncEvent returns ErrUnavailable.
func (d *Device) ReadAsyncEvent() (ev ctx.AsyncEvent, ok bool, err error) {
	return ctx.AsyncEvent{}, false, ErrUnavailable
}

// WatchAsyncEvents returns ErrUnavailable.
func (d *Device) WatchAsyncEvents(fn func(ctx.AsyncEvent)) (*AsyncWatcher, error) {
	return nil, ErrUnavailable
}

// AllocProtectionDomain returns ErrUnavailable.
func (d *Device) AllocProtectionDomain() (*ProtectionDomain, error) { return nil, ErrUnavailable }

// CreateCompletionQueue returns ErrUnavailable.
func (d *Device) CreateCompletionQueue(cfg CQConfig) (*CompletionQueue, error) {
	return nil, ErrUnavailable
}

// AsyncWatcher stands for a goroutine reading asynchronous events; in this
// build there is none.
type AsyncWatcher struct{}

// Stop returns nil.
func (w *AsyncWatcher) Stop() error { return nil }

// Close returns nil.
func (pd *ProtectionDomain) Close() error { return nil }

// RegisterMemory returns ErrUnavailable.
func (pd *ProtectionDomain) RegisterMemory(addr unsafe.Pointer, length uint64, access ctx.Access) (*MemoryRegion, error) {
	return nil, ErrUnavailable
}

// RegisterBytes returns ErrUnavailable.
func (pd *ProtectionDomain) RegisterBytes(b []byte, access ctx.Access) (*MemoryRegion, error) {
	return nil, ErrUnavailable
}

// CreateQueuePair returns ErrUnavailable.
func (pd *ProtectionDomain) CreateQueuePair(cfg QPConfig) (*QueuePair, error) {
	return nil, ErrUnavailable
}

// CreateSRQ returns ErrUnavailable.
func (pd *ProtectionDomain) CreateSRQ(cfg ctx.SRQConfig) (*SharedReceiveQueue, error) {
	return nil, ErrUnavailable
}

// CreateAddressHandle returns ErrUnavailable.
func (pd *ProtectionDomain) CreateAddressHandle(attr ctx.AddressAttr) (*AddressHandle, error) {
	return nil, ErrUnavailable
}

// Addr returns nil.
func (mr *MemoryRegion) Addr() unsafe.Pointer { return nil }

// Len returns 0.
func (mr *MemoryRegion) Len() uint64 { return 0 }

// IOVA returns 0.
func (mr *MemoryRegion) IOVA() uint64 { return 0 }

// LKey returns 0.
func (mr *MemoryRegion) LKey() uint32 { return 0 }

// RKey returns 0.
func (mr *MemoryRegion) RKey() uint32 { return 0 }

// Close returns nil.
func (mr *MemoryRegion) Close() error { return nil }

// CompletionQueue stands for a struct ibv_cq; in this build none can be
// created.
type CompletionQueue struct{}

// Descriptor returns the zero descriptor.
func (cq *CompletionQueue) Descriptor() descriptor.CQ { return descriptor.CQ{} }

// EventFD returns -1.
func (cq *CompletionQueue) EventFD() int { return -1 }

// Events returns 0.
func (cq *CompletionQueue) Events() uint64 { return 0 }

// ReadEvent returns ErrUnavailable.
func (cq *CompletionQueue) ReadEvent() (ok bool, err error) { return false, ErrUnavailable }

// WaitEvent returns ErrUnavailable.
func (cq *CompletionQueue) WaitEvent(timeout time.Duration) (ok bool, err error) {
	return false, ErrUnavailable
}

// Close returns nil.
func (cq *CompletionQueue) Close() error { return nil }

// QueuePair stands for a struct ibv_qp; in this build none can be created.
type QueuePair struct{}

// Type returns 0.
func (qp *QueuePair) Type() ctx.QPType { return 0 }

// Descriptor returns the zero descriptor.
func (qp *QueuePair) Descriptor() descriptor.QP { return descriptor.QP{} }

// DedicatedBlueFlame returns false.
func (qp *QueuePair) DedicatedBlueFlame() bool { return false }

// Modify returns ErrUnavailable.
func (qp *QueuePair) Modify(a ctx.QPAttr) error { return ErrUnavailable }

// State returns ErrUnavailable.
func (qp *QueuePair) State() (ctx.QPState, error) { return 0, ErrUnavailable }

// Close returns nil.
func (qp *QueuePair) Close() error { return nil }

// SharedReceiveQueue stands for a struct ibv_srq; in this build none can be
// created.
type SharedReceiveQueue struct{}

// Descriptor returns the zero descriptor.
func (s *SharedReceiveQueue) Descriptor() descriptor.SRQ { return descriptor.SRQ{} }

// Close returns nil.
func (s *SharedReceiveQueue) Close() error { return nil }

// AddressHandle stands for a struct ibv_ah; in this build none can be
// created.
type AddressHandle struct{}

// AV returns the zero address vector.
func (ah *AddressHandle) AV() [prm.AVSize]byte { return [prm.AVSize]byte{} }

// Close returns nil.
func (ah *AddressHandle) Close() error { return nil }

// SetIdle does nothing: without cgo there is no emulated kernel.
func SetIdle(fn func()) {}

// IdleFunc returns nil.
func (d *Device) IdleFunc() func() { return nil }
