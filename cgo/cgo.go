package cgo

import "github.com/mlx5kit/mlx5kit/cgo/internal/verbs"

// Enabled reports whether this build has the hardware provider (cgo on
// Linux). When it is false every entry point returns ErrUnavailable, which
// wraps ctx.ErrNotSupported.
const Enabled = verbs.Enabled

// ErrUnavailable is returned by every call that needs rdma-core in a build
// without cgo or for an OS other than Linux (Enabled is false). It wraps
// ctx.ErrNotSupported.
var ErrUnavailable = verbs.ErrUnavailable

// ErrNotMLX5 is wrapped by the error of opening an RDMA device that
// mlx5dv_is_supported rejects.
var ErrNotMLX5 = verbs.ErrNotMLX5

// VerbError is the error of a failed rdma-core call: the verb, what it was
// called on, and the errno. errors.Is matches the errno and the ctx
// sentinel it maps to; errors.As finds it in any error ctx returns from the
// hardware provider.
type VerbError = verbs.VerbError

// DeviceListing describes one RDMA device as ListDevices finds it (mlx5 or
// not).
type DeviceListing = verbs.DeviceListing

// DVAttr is what mlx5dv_query_device reports about an mlx5 device.
type DVAttr = verbs.DVAttr

// ExtendedAttr is the part of ibv_query_device_ex beyond ctx.DeviceAttr.
type ExtendedAttr = verbs.ExtendedAttr

// GIDTableEntry is one entry of a port's GID table (ibv_query_gid_table).
type GIDTableEntry = verbs.GIDTableEntry

// ListDevices lists every RDMA device of the host, mlx5 or not (an empty
// list when there is no RDMA subsystem).
func ListDevices() ([]DeviceListing, error) { return verbs.ListDevices() }

// NoDeviceReason returns why there is no mlx5 device ("" when there is
// one): no RDMA subsystem, no device, only devices of other vendors, or a
// build without cgo.
func NoDeviceReason() string { return verbs.NoDeviceReason() }
