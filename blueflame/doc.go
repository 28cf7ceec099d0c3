// Package blueflame writes the doorbell record and the BlueFlame (or plain
// doorbell) register of an mlx5 send queue, and provides the memory barriers
// that the data path needs around device-visible memory.
//
// # Ordering
//
// A post follows rdma-core's post_send_db step by step:
//
//  1. the WQE is already in the send ring (written by package wqebuilder);
//  2. StoreBarrier: the WQE stores become visible before the doorbell record;
//  3. dbrec[1] = big-endian (pi & 0xffff), the producer index after the WQE;
//  4. WCStart: the doorbell record store is ordered before the write-combining
//     stores to the register;
//  5. the whole WQE is copied to the BlueFlame buffer in 64-byte chunks in
//     ascending address order, the source wrapping at the ring end (Post), or
//     the first 8 bytes of the WQE are stored to the register (Ring);
//  6. FlushWrites: the write-combining buffer is pushed out now;
//  7. the BlueFlame offset toggles between the two halves of the register.
//
// Steps 2 to 6 run inside one assembly function per post on amd64 and arm64,
// so a post costs one call. Elsewhere the generic copy runs between calls
// to the barrier functions, which are rdma-core's instructions on ppc64,
// ppc64le and riscv64 too ("sync", or a fence with the device bits, around
// the register writes: lwsync, or an atomic operation's aq/rl, all a
// sync/atomic operation issues there, does not order stores to memory
// before stores to a device register). A SendDoorbell binds a Register to
// its queue's doorbell record and ring once, so that the call passes four
// words (the queue, the producer index, the WQE, its size). The register is
// never written with memmove or string instructions, which do not keep the
// ascending order that the device needs to assemble the WQE.
//
// # Copy modes
//
// The 64-byte chunk copy has several implementations. One is chosen at
// program start from the CPU's features (github.com/klauspost/cpuid/v2):
//
//	amd64: "avx512"  one 64-byte VMOVDQU64 store per chunk (AVX512F)
//	       "store8"  eight ascending 8-byte MOVQ stores per chunk (baseline)
//	arm64: "neon"    one VST1 of four 16-byte registers per chunk (default)
//	       "stp"     four ascending 16-byte STP pair stores per chunk
//	any:   "generic" Go stores with the barrier functions around them
//
// The environment variable MLX5KIT_BLUEFLAME forces a mode by name (for tests
// and measurements); a name that is unknown or not available on the machine
// makes the program panic at start rather than silently test something else.
// It is the only way to choose a mode; the package's tests switch modes at
// run time.
//
// # Concurrency
//
// A Register (and the SendDoorbell that holds it) belongs to one send queue
// and is used by one goroutine at a time. rdma-core may make queue pairs
// share a BlueFlame register (beyond 16 QPs per context); such a register
// needs the caller's own lock around its posts.
//
// # Reading what the device wrote
//
// A descriptor the device hands over, such as a CQE, is read owner field
// first; only once that says software owns it may the rest be read. Package
// monocq loads a CQE's owner field (its last 4-byte word: wqe_counter,
// signature, op_own) with a sync/atomic load and then calls
// OwnershipBarrier once per batch. The atomic load alone keeps the Go
// compiler from moving any later load above it (in the Go memory model it
// is an acquire, which also makes a software device on another goroutine,
// such as package sim, safe to poll). What the processor needs on top:
//
//	amd64 (default)         nothing: x86-64 does not reorder a load with an
//	                        earlier load, and DMA writes to write-back
//	                        memory are coherent. UCX
//	                        (ucs_memory_cpu_load_fence) and DPDK
//	                        (rte_io_rmb) poll mlx5 CQs this way.
//	amd64, -tags mlx5kit_lfence
//	                        lfence, rdma-core's udma_from_device_barrier
//	                        (its cost per poll is in docs/benchmarks.md).
//	arm64                   dmb oshld (rdma-core, UCX and DPDK agree).
//	ppc64, ppc64le          lwsync (rdma-core).
//	riscv64                 fence iorw,iorw (rdma-core: fence ir,ir).
//	elsewhere               ReadBarrier's sequentially consistent atomic
//	                        operation.
//
// OwnershipOrdering names the choice of the running build; ReadBarrier is
// always rdma-core's udma_from_device_barrier.
package blueflame
