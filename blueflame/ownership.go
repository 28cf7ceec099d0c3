package blueflame

// The read side of a descriptor the device hands over, such as a CQE: its
// owner field is loaded first, and only once that says software owns the
// descriptor may the rest of it be read. monocq loads the owner field
// (the CQE's last 4-byte word: wqe_counter, signature, op_own) with a
// sync/atomic load and then calls OwnershipBarrier once for the batch.
//
// The atomic load alone keeps the Go compiler from moving any later load
// above it (in the Go memory model it is an acquire, which is also what
// makes a software device on another goroutine, such as package sim, safe to
// poll). What the processor needs on top differs by architecture and by
// whose choice is followed:
//
//   - amd64, default: nothing. x86-64 does not reorder a load with an
//     earlier load, and DMA writes to write-back memory are coherent. UCX
//     (ucs_memory_cpu_load_fence) and DPDK (rte_io_rmb) poll mlx5 CQs this
//     way.
//   - amd64 built with the tag mlx5kit_lfence: lfence, rdma-core's
//     udma_from_device_barrier. It costs about 20 cycles per poll on
//     current Xeons (see docs/benchmarks.md).
//   - arm64: dmb oshld (rdma-core, UCX and DPDK agree).
//   - elsewhere: ReadBarrier's sequentially consistent atomic operation.
