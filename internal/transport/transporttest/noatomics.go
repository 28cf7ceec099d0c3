package transporttest

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/mlx5kit/mlx5kit/sim"
)

// NoAtomics returns the Fabric f as a provider whose devices report
// atomic_cap IBV_ATOMIC_NONE (ctx.DeviceAttr.AtomicHCA false), for the
// tests of what the kit does on such a device.
func NoAtomics(f *sim.Fabric) provider.Provider { return noAtomicsProvider{f} }

type noAtomicsProvider struct{ f *sim.Fabric }

func (p noAtomicsProvider) Devices() ([]provider.DeviceInfo, error) {
	return simadopt.Provider(p.f).Devices()
}

func (p noAtomicsProvider) OpenDevice(name string) (provider.Device, error) {
	d, err := simadopt.Provider(p.f).OpenDevice(name)
	if err != nil {
		return nil, err
	}
	return noAtomicsDevice{d}, nil
}

type noAtomicsDevice struct{ provider.Device }

func (d noAtomicsDevice) Query() (ctx.DeviceAttr, error) {
	a, err := d.Device.Query()
	a.AtomicHCA = false
	return a, err
}
