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

// DeviceListing describes one RDMA device as ListDevices finds it (mlx5 or
// not).
type DeviceListing struct {
	// Name is the kernel device name, e.g. "mlx5_0".
	Name string
	// NodeGUID is the node GUID in host byte order.
	NodeGUID uint64
	// NodeType is ibv_node_type_str of the device ("InfiniBand channel
	// adapter", "iWARP RNIC", …).
	NodeType string
	// MLX5 reports that the mlx5 provider drives the device
	// (mlx5dv_is_supported); only such devices can be opened.
	MLX5 bool
}

// ListDevices lists every RDMA device of the host, mlx5 or not (an empty
// list when there is no RDMA subsystem).
func ListDevices() ([]DeviceListing, error) {
	found, err := verbs.ListDevices()
	if found == nil {
		return nil, err
	}
	list := make([]DeviceListing, len(found))
	for i, d := range found {
		list[i] = DeviceListing(d) // the same fields: the conversion fails to build otherwise
	}
	return list, err
}

// NoDeviceReason returns why there is no mlx5 device ("" when there is
// one): no RDMA subsystem, no device, only devices of other vendors, or a
// build without cgo.
func NoDeviceReason() string { return verbs.NoDeviceReason() }
