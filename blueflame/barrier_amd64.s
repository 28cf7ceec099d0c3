#include "textflag.h"

// func StoreBarrier()
// udma_to_device_barrier on x86-64 is a compiler barrier only. An assembly
// function body is opaque to the Go compiler, so the call alone keeps Go
// stores on their side of it; no instruction is needed.
TEXT ·StoreBarrier(SB), NOSPLIT|NOFRAME, $0-0
	RET

// func ReadBarrier()
// udma_from_device_barrier on x86-64: lfence.
TEXT ·ReadBarrier(SB), NOSPLIT|NOFRAME, $0-0
	LFENCE
	RET

// func WCStart()
// mmio_wc_start on x86-64: sfence.
TEXT ·WCStart(SB), NOSPLIT|NOFRAME, $0-0
	SFENCE
	RET

// func FlushWrites()
// mmio_flush_writes on x86-64: sfence.
TEXT ·FlushWrites(SB), NOSPLIT|NOFRAME, $0-0
	SFENCE
	RET
