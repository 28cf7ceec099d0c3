//go:build !amd64 || mlx5kit_lfence

package blueflame

import "runtime"

// OwnershipBarrier orders the sync/atomic loads before it that found
// descriptors software owns before every load after it (see "Reading what
// the device wrote" in the package documentation). On this build it is
// ReadBarrier, rdma-core's udma_from_device_barrier (lfence on amd64 built
// with -tags mlx5kit_lfence, dmb oshld on arm64, lwsync on ppc64, a fence on
// riscv64).
func OwnershipBarrier() { ReadBarrier() }

// OwnershipOrdering names what OwnershipBarrier does on this build.
func OwnershipOrdering() string {
	switch runtime.GOARCH {
	case "amd64":
		return "lfence, as rdma-core (tag mlx5kit_lfence)"
	case "arm64":
		return "dmb oshld, as rdma-core"
	case "ppc64", "ppc64le":
		return "lwsync, as rdma-core"
	case "riscv64":
		return "fence iorw,iorw (rdma-core: fence ir,ir)"
	}
	return "sequentially consistent atomic operation"
}
