//go:build amd64 || arm64 || ppc64 || ppc64le || riscv64

package blueflame

// StoreBarrier orders the stores to ordinary memory that precede it (WQEs,
// receive descriptors) before any store after it that makes the device read
// them, such as a doorbell record or a doorbell register write. It is
// rdma-core's udma_to_device_barrier: on amd64 a compiler-only barrier (x86
// keeps stores to write-back memory in order; the call itself is what stops
// the Go compiler from moving stores across it), on arm64 "dmb oshst", on
// ppc64 "sync", on riscv64 a fence (rdma-core's "fence ow,ow").
//
//go:noescape
func StoreBarrier()

// ReadBarrier orders the read that observed a device write (the owner bit of a
// CQE) before the reads that follow it (the rest of the CQE). It is
// rdma-core's udma_from_device_barrier: "lfence" on amd64, "dmb oshld" on
// arm64, "lwsync" on ppc64, a fence on riscv64 (rdma-core's "fence ir,ir").
//
//go:noescape
func ReadBarrier()

// WCStart orders the stores before it (the doorbell record) before the stores
// to write-combining memory that follow (the BlueFlame register). It is
// rdma-core's mmio_wc_start, which is mmio_flush_writes: "sfence" on amd64,
// "dsb st" on arm64, "sync" on ppc64, a fence on riscv64.
//
//go:noescape
func WCStart()

// FlushWrites pushes the write-combining buffer out to the device and keeps
// later register stores from combining with earlier ones. It is rdma-core's
// mmio_flush_writes: "sfence" on amd64, "dsb st" on arm64, "sync" on ppc64,
// a fence on riscv64.
//
//go:noescape
func FlushWrites()
