#include "textflag.h"

// DMB/DSB option encodings (Arm ARM, "CRm" field):
// OSHLD = 1, OSHST = 2, ST = 14.

// func StoreBarrier()
// udma_to_device_barrier on aarch64: dmb oshst.
TEXT ·StoreBarrier(SB), NOSPLIT|NOFRAME, $0-0
	DMB	$2
	RET

// func ReadBarrier()
// udma_from_device_barrier on aarch64: dmb oshld.
TEXT ·ReadBarrier(SB), NOSPLIT|NOFRAME, $0-0
	DMB	$1
	RET

// func WCStart()
// mmio_wc_start (= mmio_flush_writes) on aarch64: dsb st.
TEXT ·WCStart(SB), NOSPLIT|NOFRAME, $0-0
	DSB	$14
	RET

// func FlushWrites()
// mmio_flush_writes on aarch64: dsb st.
TEXT ·FlushWrites(SB), NOSPLIT|NOFRAME, $0-0
	DSB	$14
	RET
