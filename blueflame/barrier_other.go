//go:build !amd64 && !arm64 && !ppc64 && !ppc64le && !riscv64

package blueflame

import "sync/atomic"

// fence is the target of the atomic operations that stand in for the
// architecture's barrier instructions on platforms without assembly here. A
// sequentially consistent read-modify-write is at least as strong as every
// barrier this package names, though slower.
var fence atomic.Uint32

// StoreBarrier orders the stores to ordinary memory that precede it before
// any store after it that makes the device read them (rdma-core's
// udma_to_device_barrier). On this architecture it is a sequentially
// consistent atomic operation.
func StoreBarrier() { fence.Add(1) }

// ReadBarrier orders the read that observed a device write before the reads
// that follow it (rdma-core's udma_from_device_barrier). On this
// architecture it is a sequentially consistent atomic operation.
func ReadBarrier() { fence.Add(1) }

// WCStart orders the stores before it before the stores to write-combining
// memory that follow (rdma-core's mmio_wc_start). On this architecture it
// is a sequentially consistent atomic operation.
func WCStart() { fence.Add(1) }

// FlushWrites pushes write-combining stores out to the device (rdma-core's
// mmio_flush_writes). On this architecture it is a sequentially consistent
// atomic operation.
func FlushWrites() { fence.Add(1) }
