//go:build amd64 && mlx5kit_lfence

package blueflame

// OwnershipOrdering names what OwnershipBarrier does on this build.
const OwnershipOrdering = "lfence, as rdma-core (tag mlx5kit_lfence)"
