// Package verbs is the implementation of the hardware provider of mlx5kit
// (package cgo is its public face): the control plane of an
// NVIDIA/Mellanox mlx5 NIC (ConnectX-4 and later, BlueField) through
// rdma-core's libibverbs and mlx5dv. With the rest of cgo/internal and
// bench it is the only code of the module that says import "C".
//
// Importing the package registers it with ctx as the provider "mlx5", so
// ctx.Open uses the first mlx5 device when there is one. Inside cgo/ the
// types here can also be used directly (Open, Device, ProtectionDomain,
// CompletionQueue, QueuePair, …) for what ctx does not expose: mlx5dv
// attributes, CQE compression, the whole GID table, an async event
// watcher; cgo/emulate's tests drive the provider through them.
//
// # What it does, and what it does not
//
// It opens a device (refusing devices mlx5dv_is_supported rejects),
// queries device, port, GID table and mlx5dv attributes, allocates
// protection domains, registers mmap'd memory, creates completion queues
// (mlx5dv_create_cq, 64- or 128-byte CQEs, optional compression and
// completion channel), shared receive queues, address handles, and RC, UD,
// DCI and DCT queue pairs (mlx5dv_create_qp), moves them through
// INIT→RTR→RTS on InfiniBand (LID) and RoCE (GID index, traffic class, hop
// limit), and fills the ctx descriptors with mlx5dv_init_obj. After that no
// C is called: the data plane writes WQEs into the rings and reads CQEs
// from them directly. rdma-core then treats each CQ as owned by the
// direct-verbs user; ibv_poll_cq, ibv_post_send and ibv_req_notify_cq must
// not be mixed in.
//
// # Errors
//
// Every failure of an rdma-core call is a *VerbError naming the verb and
// the errno. The ibv_* and mlx5dv_* calls that return an int return the
// error number itself and need not set errno, so that value is used; calls
// that return a pointer (or -1) report through errno. errors.Is matches the
// errno (syscall.EINVAL) and the ctx sentinel it maps to
// (ctx.ErrInvalidArgument, ctx.ErrNotSupported, ctx.ErrBusy, …).
//
// # Without cgo
//
// With CGO_ENABLED=0, or on an OS other than Linux, the package still
// builds, exports the same API and registers "mlx5", but Enabled is false
// and ListDevices, Open, the provider and every method that would call
// rdma-core return ErrUnavailable (wrapping ctx.ErrNotSupported); ctx.Open
// with no provider named then fails with that error (it never falls back
// to the software HCA by itself).
//
// # Environment
//
// MLX5KIT_REQUIRE_DEVICE=1 turns the skip of hardware tests (package
// internal/devicetest) into a failure. rdma-core's own variables apply to the
// objects it creates (MLX5_DEBUG_MASK and MLX5_DEBUG_FILE log its
// decisions). Scatter-to-CQE is chosen per QP here (QPConfig.ScatterToCQE);
// with it off, MLX5_SCATTER_TO_CQE cannot turn it back on.
package verbs
