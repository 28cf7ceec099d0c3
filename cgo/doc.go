// Package cgo is the hardware provider of mlx5kit: the control plane of an
// NVIDIA/Mellanox mlx5 NIC (ConnectX-4 and later, BlueField) through
// rdma-core's libibverbs and mlx5dv. Its implementation, the only import
// "C" of the module with bench, is in cgo/internal; this package is what
// programs and the tools need of it.
//
// Importing the package registers the hardware provider with ctx as
// "mlx5", so ctx.Open uses the first mlx5 device when there is one; every
// object is then created through ctx. Besides that, the package lists the
// host's RDMA devices (ListDevices, NoDeviceReason). A failed rdma-core
// call is a *ctx.OpError like every control-plane error: its message names
// the verb, OpError.Errno returns the errno, and errors.Is matches the
// errno and the ctx sentinel it maps to.
//
// # Without cgo
//
// With CGO_ENABLED=0, or on an OS other than Linux, the package builds
// with the same API and still registers "mlx5", but Enabled is false and
// ListDevices and the provider return ErrUnavailable (wrapping
// ctx.ErrNotSupported); ctx.Open with no provider named then fails with
// that error (it never falls back to the software HCA by itself).
//
// # Environment
//
// MLX5KIT_REQUIRE_DEVICE=1 turns the skip of hardware tests (package
// internal/devicetest) into a failure. rdma-core's own variables apply to the
// objects it creates (MLX5_DEBUG_MASK and MLX5_DEBUG_FILE log its
// decisions).
package cgo
