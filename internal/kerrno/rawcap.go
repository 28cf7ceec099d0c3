package kerrno

// HasRawCap reports whether the process may use what the uverbs core
// reserves to a holder of CAP_NET_RAW (rdma_uattrs_has_raw_cap in
// drivers/infiniband/core/rdma_core.c, which asks ns_capable for the
// device's network namespace, the initial one unless the RDMA subsystem is
// in exclusive namespace mode): a controlled Q_Key (bit 31 set) at
// ibv_modify_qp, among others. It reads the effective capability set of
// the calling thread. The software HCA and the emulated kernel consult it
// where the kernel does; a test may replace it.
var HasRawCap = hasRawCap
