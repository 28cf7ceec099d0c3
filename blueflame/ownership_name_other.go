//go:build !amd64 && !arm64

package blueflame

// OwnershipOrdering names what OwnershipBarrier does on this build.
const OwnershipOrdering = "sequentially consistent atomic operation"
