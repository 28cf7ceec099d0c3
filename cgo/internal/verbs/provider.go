//go:build cgo && linux

package verbs

import (
	"fmt"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// Enabled reports whether this build has the hardware provider (cgo on
// Linux). Without it every entry point returns an error wrapping
// ctx.ErrNotSupported.
const Enabled = true

func init() { provider.Register(ctx.ProviderHardware, Provider{}) }

// Provider is the hardware provider registered with ctx as "mlx5". It lists
// and opens mlx5 devices only.
type Provider struct{}

var (
	_ provider.Provider         = Provider{}
	_ provider.Device           = providerDevice{}
	_ provider.ProtectionDomain = providerPD{}
	_ provider.MemoryRegion     = (*MemoryRegion)(nil)
	_ provider.CompletionQueue  = (*CompletionQueue)(nil)
	_ provider.QueuePair        = (*QueuePair)(nil)
	_ provider.SRQ              = (*SharedReceiveQueue)(nil)
	_ provider.SRQLimiter       = (*SharedReceiveQueue)(nil)
	_ provider.AddressHandle    = (*AddressHandle)(nil)
)

// Devices lists the mlx5 devices (an empty list when there are none or no
// RDMA subsystem at all).
func (Provider) Devices() ([]provider.DeviceInfo, error) {
	all, err := ListDevices()
	if err != nil {
		return nil, err
	}
	var out []provider.DeviceInfo
	for _, d := range all {
		if d.MLX5 {
			out = append(out, provider.DeviceInfo{Name: d.Name, NodeGUID: d.NodeGUID, Kind: ctx.KindHardware})
		}
	}
	return out, nil
}

// OpenDevice opens the named mlx5 device, or the first one for "".
func (Provider) OpenDevice(name string) (provider.Device, error) {
	d, err := Open(name)
	if err != nil {
		return nil, err
	}
	return providerDevice{d}, nil
}

// DeviceOf returns the hardware Device behind a ctx device handle
// (provider.DeviceOf of a Context), for the mlx5-specific calls ctx does not have.
func DeviceOf(h provider.Device) (*Device, bool) {
	pd, ok := h.(providerDevice)
	if !ok {
		return nil, false
	}
	return pd.Device, true
}

// providerDevice adapts *Device to provider.Device (whose constructors
// return the interface types).
type providerDevice struct{ *Device }

func (d providerDevice) AllocProtectionDomain() (provider.ProtectionDomain, error) {
	pd, err := d.Device.AllocProtectionDomain()
	if err != nil {
		return nil, err
	}
	return providerPD{pd}, nil
}

func (d providerDevice) CreateCompletionQueue(cfg ctx.CompletionQueueConfig) (provider.CompletionQueue, error) {
	cq, err := d.Device.CreateCompletionQueue(CQConfig{CompletionQueueConfig: cfg})
	if err != nil {
		return nil, err
	}
	return cq, nil
}

// providerPD adapts *ProtectionDomain to provider.ProtectionDomain.
type providerPD struct{ *ProtectionDomain }

func (pd providerPD) RegisterMemory(addr unsafe.Pointer, length uint64, access ctx.Access) (provider.MemoryRegion, error) {
	mr, err := pd.ProtectionDomain.RegisterMemory(addr, length, access)
	if err != nil {
		return nil, err
	}
	return mr, nil
}

func (pd providerPD) CreateQueuePair(cfg provider.QueuePairConfig) (provider.QueuePair, error) {
	foreign := func(what string, h any) error {
		return &VerbError{Verb: "mlx5dv_create_qp", Detail: fmt.Sprintf("%v QP: %s is a %T, not a handle of this provider", cfg.Type, what, h), Sentinel: ctx.ErrInvalidArgument}
	}
	c := QPConfig{Type: cfg.Type, Caps: cfg.Caps, DCKey: cfg.DCKey, ScatterToCQE: cfg.ScatterToCQE}
	var ok bool
	if cfg.SendCQ != nil {
		if c.SendCQ, ok = cfg.SendCQ.(*CompletionQueue); !ok {
			return nil, foreign("send CQ", cfg.SendCQ)
		}
	}
	if cfg.RecvCQ != nil {
		if c.RecvCQ, ok = cfg.RecvCQ.(*CompletionQueue); !ok {
			return nil, foreign("receive CQ", cfg.RecvCQ)
		}
	}
	if cfg.SRQ != nil {
		if c.SRQ, ok = cfg.SRQ.(*SharedReceiveQueue); !ok {
			return nil, foreign("SRQ", cfg.SRQ)
		}
	}
	qp, err := pd.ProtectionDomain.CreateQueuePair(c)
	if err != nil {
		return nil, err
	}
	return qp, nil
}

func (pd providerPD) CreateSRQ(cfg ctx.SRQConfig) (provider.SRQ, error) {
	s, err := pd.ProtectionDomain.CreateSRQ(cfg)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (pd providerPD) CreateAddressHandle(attr ctx.AddressAttr) (provider.AddressHandle, error) {
	ah, err := pd.ProtectionDomain.CreateAddressHandle(attr)
	if err != nil {
		return nil, err
	}
	return ah, nil
}
