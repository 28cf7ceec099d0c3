#include "textflag.h"

// The barriers of rdma-core's util/udma_barrier.h for __riscv are "fence
// ow,ow" (udma_to_device_barrier, mmio_flush_writes and so mmio_wc_start)
// and "fence ir,ir" (udma_from_device_barrier): fences with the device
// input and output bits, which the aq/rl bits of an atomic memory
// operation do not give. The assembler's FENCE is "fence iorw,iorw", which
// orders everything either of them does.

// func StoreBarrier()
TEXT ·StoreBarrier(SB), NOSPLIT|NOFRAME, $0-0
	FENCE
	RET

// func ReadBarrier()
TEXT ·ReadBarrier(SB), NOSPLIT|NOFRAME, $0-0
	FENCE
	RET

// func WCStart()
TEXT ·WCStart(SB), NOSPLIT|NOFRAME, $0-0
	FENCE
	RET

// func FlushWrites()
TEXT ·FlushWrites(SB), NOSPLIT|NOFRAME, $0-0
	FENCE
	RET
