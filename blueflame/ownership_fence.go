//go:build !amd64 || mlx5kit_lfence

package blueflame

// OwnershipBarrier orders the sync/atomic loads before it that found
// descriptors software owns before every load after it (see "Reading what
// the device wrote" in the package documentation). On this build it is
// ReadBarrier, rdma-core's udma_from_device_barrier (lfence on amd64 built
// with -tags mlx5kit_lfence, dmb oshld on arm64).
func OwnershipBarrier() { ReadBarrier() }
