#include "textflag.h"

// func storeRelease64(p *uint64, v uint64)
// stlr: a store-release.
TEXT ·storeRelease64(SB), NOSPLIT, $0-16
	MOVD	p+0(FP), R0
	MOVD	v+8(FP), R1
	STLR	R1, (R0)
	RET

// func storeRelease32(p *uint32, v uint32)
// stlrw: a store-release of a word.
TEXT ·storeRelease32(SB), NOSPLIT, $0-12
	MOVD	p+0(FP), R0
	MOVWU	v+8(FP), R1
	STLRW	R1, (R0)
	RET

// func prefetch(p unsafe.Pointer)
// PRFM PLDL1KEEP: asks for the line at p without waiting for it.
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVD	p+0(FP), R0
	PRFM	(R0), PLDL1KEEP
	RET
