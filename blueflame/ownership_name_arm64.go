package blueflame

// OwnershipOrdering names what OwnershipBarrier does on this build.
const OwnershipOrdering = "dmb oshld, as rdma-core"
