package ctx

import (
	"time"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/seam"
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

// The provider seam as ctx sees it. Providers implement the typed
// interfaces of internal/provider (Provider, Device, ProtectionDomain, …);
// internal/provider registers adapters of them through internal/seam whose
// methods name only ctx's types and hand the next handle back as any. All
// provider methods are control-plane calls; they may allocate, lock and call
// C. ctx calls them with the ctx object's lock held, never concurrently for
// the same object.
type (
	seamProvider interface {
		OpenDevice(name string) (any, error)
	}
	deviceHandle interface {
		Name() string
		Kind() Kind
		Query() (DeviceAttr, error)
		QueryPort(port uint8) (PortAttr, error)
		QueryGIDs(port uint8) ([]GIDEntry, error)
		// AllocProtectionDomain returns a pdHandle.
		AllocProtectionDomain() (any, error)
		// CreateCompletionQueue returns a cqHandle.
		CreateCompletionQueue(cfg CompletionQueueConfig) (any, error)
		AsyncEventFD() int
		ReadAsyncEvent() (ev AsyncEvent, ok bool, err error)
		Close() error
	}
	pdHandle interface {
		// RegisterMemory and RegisterDMABuf return an mrHandle.
		RegisterMemory(addr unsafe.Pointer, length uint64, access Access) (any, error)
		// DMABuf reports whether RegisterDMABuf is supported.
		DMABuf() bool
		RegisterDMABuf(fd int, offset, length, iova uint64, access Access) (any, error)
		// CreateQueuePair returns a qpHandle; cfg is checked, its CQs and
		// SRQ are open objects of the same Context.
		CreateQueuePair(cfg QueuePairConfig) (any, error)
		// CreateSRQ returns an srqHandle.
		CreateSRQ(cfg SRQConfig) (any, error)
		// CreateAddressHandle returns an ahHandle.
		CreateAddressHandle(attr AddressAttr) (any, error)
		Close() error
	}
	mrHandle interface {
		LKey() uint32
		RKey() uint32
		Close() error
	}
	cqHandle interface {
		Descriptor() descriptor.CQ
		EventFD() int
		ReadEvent() (ok bool, err error)
		Close() error
	}
	qpHandle interface {
		Descriptor() descriptor.QP
		Modify(attr QPAttr) error
		State() (QPState, error)
		Close() error
	}
	srqHandle interface {
		Descriptor() descriptor.SRQ
		Close() error
	}
	ahHandle interface {
		AV() [prm.AVSize]byte
		Close() error
	}
)

func init() {
	seam.Open = func(name string, p any, device string) (any, error) {
		sp, _ := p.(seamProvider)
		return openWith(name, sp, device)
	}
	seam.Handle = handleOf
	seam.OnClose = onCloseOf
	seam.SubscribeUntilClose = subscribeUntilCloseOf
	seam.ReadAsyncEvent = func(c any) (any, bool, error) { return c.(*Context).readAsyncEvent() }
	seam.Descriptor = descriptorOf
	seam.CQEventFD = func(cq any) int { return cq.(*CompletionQueue).eventFD() }
	seam.ReadCQEvent = func(cq any) (bool, error) { return cq.(*CompletionQueue).readEvent() }
}

// handleOf returns the provider handle behind a ctx object, or nil.
func handleOf(obj any) any {
	switch x := obj.(type) {
	case *Context:
		return x.dev
	case *ProtectionDomain:
		return x.h
	case *MemoryRegion:
		return x.h
	case *CompletionQueue:
		return x.h
	case *SharedReceiveQueue:
		return x.h
	case *QueuePair:
		return x.h
	case *AddressHandle:
		return x.h
	}
	return nil
}

// descriptorOf returns the descriptor a ctx object keeps of its queue's
// memory: a descriptor.CQ, descriptor.QP or descriptor.SRQ.
func descriptorOf(obj any) any {
	switch x := obj.(type) {
	case *CompletionQueue:
		return x.desc
	case *SharedReceiveQueue:
		return x.desc
	case *QueuePair:
		return x.descriptor()
	}
	return nil
}

// Providers returns the names of the registered providers, sorted.
func Providers() []string { return seam.Names() }

func lookupProvider(name string) (seamProvider, bool) {
	p, ok := seam.Lookup(name)
	if !ok {
		return nil, false
	}
	sp, ok := p.(seamProvider)
	return sp, ok
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
