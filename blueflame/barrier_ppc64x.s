//go:build ppc64 || ppc64le

#include "textflag.h"

// The barriers of rdma-core's util/udma_barrier.h for __PPC64__. SYNC is
// the heavyweight sync (hwsync): the only one that orders stores to
// ordinary memory before stores to caching-inhibited memory (a doorbell
// or BlueFlame register). LWSYNC orders loads from memory.

// func StoreBarrier()
// udma_to_device_barrier on ppc64: sync.
TEXT ·StoreBarrier(SB), NOSPLIT|NOFRAME, $0-0
	SYNC
	RET

// func ReadBarrier()
// udma_from_device_barrier on ppc64: lwsync.
TEXT ·ReadBarrier(SB), NOSPLIT|NOFRAME, $0-0
	LWSYNC
	RET

// func WCStart()
// mmio_wc_start (= mmio_flush_writes) on ppc64: sync.
TEXT ·WCStart(SB), NOSPLIT|NOFRAME, $0-0
	SYNC
	RET

// func FlushWrites()
// mmio_flush_writes on ppc64: sync.
TEXT ·FlushWrites(SB), NOSPLIT|NOFRAME, $0-0
	SYNC
	RET
