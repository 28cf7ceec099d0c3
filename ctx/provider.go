package ctx

import (
	"sort"
	"sync"
	"time"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// Names of the two providers in this module.
const (
	// ProviderHardware is the name the rdma-core provider (package cgo)
	// registers under.
	ProviderHardware = "mlx5"
	// ProviderSoftware is the name the software HCA (package sim) registers
	// under.
	ProviderSoftware = "sim"
)

// Provider is a source of devices: real hardware through rdma-core, or the
// software HCA. A provider registers itself from its package's init with
// Register, the way database/sql drivers do, so ctx never imports one.
//
// All provider methods are control-plane calls; they may allocate, lock and
// call C. They are called by ctx with the ctx object's lock held, never
// concurrently for the same object.
type Provider interface {
	// Devices lists the devices the provider can open now. An empty list
	// with a nil error means the provider works but has no device.
	Devices() ([]DeviceInfo, error)
	// OpenDevice opens the named device; "" opens the first one.
	OpenDevice(name string) (ProviderDevice, error)
}

// ProviderDevice is an open device (struct ibv_context plus its mlx5dv
// context).
type ProviderDevice interface {
	// Name is the device's name.
	Name() string
	// Kind says whether the device is hardware or the software HCA.
	Kind() Kind
	// Query returns the device attributes.
	Query() (DeviceAttr, error)
	// QueryPort returns the attributes of a port (1-based).
	QueryPort(port uint8) (PortAttr, error)
	// QueryGIDs returns the valid entries of a port's GID table.
	QueryGIDs(port uint8) ([]GIDEntry, error)
	// AllocProtectionDomain allocates a protection domain.
	AllocProtectionDomain() (ProviderProtectionDomain, error)
	// CreateCompletionQueue creates a completion queue.
	CreateCompletionQueue(cfg CompletionQueueConfig) (ProviderCompletionQueue, error)
	// AsyncEventFD is a descriptor that becomes readable when an async
	// event is pending (-1 if the provider has none; poll ReadAsyncEvent
	// then).
	AsyncEventFD() int
	// ReadAsyncEvent returns the next pending asynchronous event without
	// blocking; ok is false when none is pending.
	ReadAsyncEvent() (ev AsyncEvent, ok bool, err error)
	// Close releases the device. ctx closes every child first.
	Close() error
}

// ProviderProtectionDomain is a protection domain (struct ibv_pd).
type ProviderProtectionDomain interface {
	// RegisterMemory registers length bytes at addr (mmap'd memory, never
	// Go heap) with the given access.
	RegisterMemory(addr unsafe.Pointer, length uint64, access Access) (ProviderMemoryRegion, error)
	// CreateQueuePair creates a QP in RESET state and fills its
	// descriptor.
	CreateQueuePair(cfg ProviderQueuePairConfig) (ProviderQueuePair, error)
	// CreateSRQ creates a shared receive queue.
	CreateSRQ(cfg SRQConfig) (ProviderSRQ, error)
	// CreateAddressHandle creates an address handle for UD sends and DC
	// initiators.
	CreateAddressHandle(attr AddressAttr) (ProviderAddressHandle, error)
	// Close deallocates the protection domain. ctx closes every child
	// first.
	Close() error
}

// ProviderMemoryRegion is a registered memory region (struct ibv_mr).
type ProviderMemoryRegion interface {
	LKey() uint32
	RKey() uint32
	Close() error
}

// ProviderCompletionQueue is a completion queue (struct ibv_cq plus
// mlx5dv_cq).
type ProviderCompletionQueue interface {
	// Descriptor returns the ring as the data plane will read it.
	Descriptor() CQDescriptor
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
	Close() error
}

// ProviderQueuePairConfig is what ctx hands a provider to create a QP: the
// user's QueuePairConfig with the CQs and SRQ resolved to provider handles
// of the same provider.
type ProviderQueuePairConfig struct {
	Type QPType
	// SendCQ and RecvCQ receive the QP's completions. A DCT has no send
	// queue (SendCQ may equal RecvCQ); a DCI has no receive queue.
	SendCQ, RecvCQ ProviderCompletionQueue
	// SRQ, when non-nil, replaces the receive queue (required for DCT).
	SRQ  ProviderSRQ
	Caps QueuePairCaps
	// DCKey is the DC access key of a DCT.
	DCKey uint64
	// ScatterToCQE lets the device place small receive payloads (32 bytes
	// with 64-byte CQEs, 64 with 128-byte CQEs) in the CQE instead of the
	// receive buffer; the poller must then copy them out.
	ScatterToCQE bool
}

// ProviderQueuePair is a queue pair (struct ibv_qp plus mlx5dv_qp).
type ProviderQueuePair interface {
	// Descriptor returns the rings, doorbell record and BlueFlame register.
	// For a DCT the QPN is the DCT number, valid once the DCT reached RTR;
	// ctx calls Descriptor again after every Modify.
	Descriptor() QPDescriptor
	// Modify moves the QP to attr.State (see QPAttr for what is used).
	Modify(attr QPAttr) error
	// State returns the QP's current state as the provider knows it (a
	// QP the device moved to error reports QPStateError).
	State() (QPState, error)
	Close() error
}

// ProviderSRQ is a shared receive queue (struct ibv_srq plus mlx5dv_srq).
type ProviderSRQ interface {
	Descriptor() SRQDescriptor
	Close() error
}

// ProviderAddressHandle is an address handle (struct ibv_ah plus mlx5dv_ah).
type ProviderAddressHandle interface {
	// AV returns the 48-byte address vector (struct mlx5_wqe_av) to copy
	// into a UD or DC send WQE. The qkey / DC key and remote QPN / DCT
	// number fields are left for the WQE builder to fill.
	AV() [prm.AVSize]byte
	Close() error
}

var (
	providersMu sync.RWMutex
	providers   = map[string]Provider{}
)

// Register makes a provider available under name. It is meant to be called
// from a provider package's init; it panics if name is empty, p is nil or the
// name is already taken.
func Register(name string, p Provider) {
	providersMu.Lock()
	defer providersMu.Unlock()
	if name == "" || p == nil {
		panic("ctx: Register: empty name or nil provider")
	}
	if _, dup := providers[name]; dup {
		panic("ctx: Register called twice for provider " + name)
	}
	providers[name] = p
}

// Providers returns the names of the registered providers, sorted.
func Providers() []string {
	providersMu.RLock()
	defer providersMu.RUnlock()
	names := make([]string, 0, len(providers))
	for n := range providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func lookupProvider(name string) (Provider, bool) {
	providersMu.RLock()
	defer providersMu.RUnlock()
	p, ok := providers[name]
	return p, ok
}

// RNRTimerDuration converts the 5-bit IB RNR timer code of QPAttr.MinRNRTimer
// to a duration (IBTA table: code 0 is 655.36 ms, 1 is 0.01 ms, up to 31 at
// 491.52 ms).
func RNRTimerDuration(code uint8) time.Duration {
	return rnrTimer10ns[code&31] * time.Microsecond / 100
}

// rnrTimer10ns holds the table in units of 10 ns (hundredths of a µs).
var rnrTimer10ns = [32]time.Duration{
	65536000, 1000, 2000, 3000, 4000, 6000, 8000, 12000,
	16000, 24000, 32000, 48000, 64000, 96000, 128000, 192000,
	256000, 384000, 512000, 768000, 1024000, 1536000, 2048000, 3072000,
	4096000, 6144000, 8192000, 12288000, 16384000, 24576000, 32768000, 49152000,
}

// AckTimeoutDuration converts the 5-bit local ACK timeout code of
// QPAttr.Timeout to a duration: 4.096 µs × 2^code; 0 means infinite and
// returns 0.
func AckTimeoutDuration(code uint8) time.Duration {
	if code == 0 {
		return 0
	}
	return time.Duration(4096<<(code&31)) * time.Nanosecond
}
