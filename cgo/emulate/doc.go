// Package emulate is the kernel side of the uverbs ABI for the software
// HCA (package sim): with it, the distribution's unmodified libibverbs and
// libmlx5 open and query the model's devices as they would a ConnectX, so
// that the kit's cgo provider and any rdma-core program run without a NIC.
//
// A Go program imports the package (cgo builds on Linux) and runs with
// MLX5KIT_EMULATE=1, or calls Enable before libibverbs first lists
// devices. Other programs load the same code as a C shared library built
// from ./cgo/emulate/preload with -buildmode=c-shared, through LD_PRELOAD,
// with MLX5KIT_EMULATE=1.
//
// Switched on, the package generates a sysfs tree for the model's devices
// (libibverbs reads it through SYSFS_PATH once RDMA netlink is
// found missing), and the C library functions it defines (open, openat,
// stat, ioctl, write, mmap, munmap, close, socket, their 64-bit-offset
// twins and the fortified __open_2 and __openat_2; dup2, dup3,
// close_range and closefrom, which close an emulated descriptor as close
// does), which the dynamic linker prefers to the C library's, hand what
// concerns /dev/infiniband/uverbsN and its descriptors to the emulated
// kernel: the ioctl methods and write commands of the uverbs core and
// mlx5_ib that discovery and queries need, those that create and destroy
// protection domains, memory regions, completion channels, completion
// queues, shared receive queues and queue pairs (RC, UC, UD, DCI and DCT, over
// the rings and doorbell records libmlx5 allocated) with their
// transitions, and address handles, RESIZE_CQ (the model writes the
// resize CQE libmlx5 waits for into the old ring and goes on in the new
// one), and the mmap of UAR pages (in strict mode the model watches the
// doorbell register of each QP's bfreg there, and reports a send doorbell
// record moved with no write to it: sim.ViolationDoorbellRecordOnly). The
// model executes the WQEs libmlx5 writes, writes the CQEs it reads, writes
// completion events to completion channels when libmlx5 arms a CQ, and
// writes the model's async events (CQ error, QP fatal and access errors,
// SRQ limit armed through MODIFY_SRQ, last WQE reached, port events) to
// the async event descriptor, naming the user handle of the QP, CQ or SRQ,
// with the destroy responses reporting the events read. A dma-buf MR
// (REG_DMABUF_MR) is registered on the model when the buffer's exporter
// lets the CPU map it (udmabuf); GPU memory gets EOPNOTSUPP. Not built: the
// ioctl method QP_CREATE and EX_CREATE_QP (libibverbs falls back to
// CREATE_QP), REREG_MR, memory windows, device-memory MRs, XRC, DCI
// streams and DEVX.
// Everything else, and everything while it is off, goes to the C library
// unchanged. The Go runtime's own system calls never pass through the C
// library and are not affected.
//
// Commands the model does not implement get the answer of a kernel
// without them (EPROTONOSUPPORT for an ioctl method, EOPNOTSUPP for a write
// command); malformed ones get the kernel's errno, EINVAL for most, EFAULT
// for an address that cannot be read or written. docs/hardware.md says
// what works and what is not built yet.
//
// The environment, read when the emulation starts:
//
//	MLX5KIT_EMULATE=1              switches it on (EnvEmulate)
//	MLX5KIT_EMULATE_LINK=ethernet  RoCE ports (their GIDs on "lo"); the
//	                               default is infiniband
//	MLX5KIT_EMULATE_NAMES=mlx5     devices named mlx5_0, mlx5_1, as on a
//	                               ConnectX host; sim (or unset) keeps the
//	                               model's sim0, sim1
//	MLX5KIT_EMULATE_PORTS=n        ports per device, 1 to 255
//	MLX5KIT_EMULATE_ABI=write      every ioctl answered ENOTTY, as a kernel
//	                               without the ioctl framework
//	MLX5KIT_EMULATE_DEBUG=1        each refused command logged to stderr
//
// With CGO_ENABLED=0, or for another OS, the package builds with Enable
// returning ErrUnavailable and Enabled false.
package emulate
