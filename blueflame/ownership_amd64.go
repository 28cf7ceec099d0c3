//go:build amd64 && !mlx5kit_lfence

package blueflame

// OwnershipBarrier orders the sync/atomic loads before it that found
// descriptors software owns before every load after it (see "Reading what
// the device wrote" in the package documentation). On amd64 that takes no
// instruction: the processor keeps loads in order, and the atomic loads keep
// the compiler's order. It inlines to nothing. Build with -tags
// mlx5kit_lfence for rdma-core's lfence instead.
func OwnershipBarrier() {}

// OwnershipOrdering names what OwnershipBarrier does on this build.
func OwnershipOrdering() string { return "x86-64 load order (no instruction), as UCX and DPDK" }
