//go:build !cgo || !linux

package cgo

import (
	"fmt"
	"runtime"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// Enabled reports whether this build has the hardware provider (cgo on
// Linux). In this build it does not: every entry point returns
// ErrUnavailable, which wraps ctx.ErrNotSupported.
const Enabled = false

// ErrUnavailable is returned by every entry point of a build without cgo
// or for an OS other than Linux.
var ErrUnavailable = fmt.Errorf("cgo: the mlx5 hardware provider needs cgo and Linux with rdma-core; this binary was built with CGO_ENABLED=0 or for %s/%s: %w",
	runtime.GOOS, runtime.GOARCH, ctx.ErrNotSupported)

func init() { ctx.Register(ctx.ProviderHardware, Provider{}) }

// Provider is the hardware provider registered with ctx as "mlx5"; in this
// build it has no devices and cannot open one.
type Provider struct{}

var _ ctx.Provider = Provider{}

// Devices returns ErrUnavailable.
func (Provider) Devices() ([]ctx.DeviceInfo, error) { return nil, ErrUnavailable }

// OpenDevice returns ErrUnavailable.
func (Provider) OpenDevice(string) (ctx.ProviderDevice, error) { return nil, ErrUnavailable }

// ListDevices returns ErrUnavailable.
func ListDevices() ([]DeviceListing, error) { return nil, ErrUnavailable }

// NoDeviceReason returns why there is no mlx5 device: this build has no
// hardware provider.
func NoDeviceReason() string { return ErrUnavailable.Error() }

// Device stands for an open mlx5 device; in this build none can be opened.
type Device struct{}

// Open returns ErrUnavailable.
func Open(string) (*Device, error) { return nil, ErrUnavailable }

// Name returns "".
func (*Device) Name() string { return "" }

// Close returns nil.
func (*Device) Close() error { return nil }

// DeviceOf reports false: there are no hardware devices in this build.
func DeviceOf(ctx.ProviderDevice) (*Device, bool) { return nil, false }
