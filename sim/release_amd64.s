#include "textflag.h"

// func storeRelease64(p *uint64, v uint64)
// A plain store: x86-64 keeps stores in program order, so it releases the
// stores before it without the fence that sync/atomic's XCHG carries.
TEXT ·storeRelease64(SB), NOSPLIT, $0-16
	MOVQ	p+0(FP), AX
	MOVQ	v+8(FP), BX
	MOVQ	BX, (AX)
	RET

// func storeRelease32(p *uint32, v uint32)
// A plain store, as storeRelease64.
TEXT ·storeRelease32(SB), NOSPLIT, $0-12
	MOVQ	p+0(FP), AX
	MOVL	v+8(FP), BX
	MOVL	BX, (AX)
	RET

// func prefetch(p unsafe.Pointer)
// PREFETCHT0: asks for the line at p without waiting for it.
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVQ	p+0(FP), AX
	PREFETCHT0	(AX)
	RET
