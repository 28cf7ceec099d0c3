#include "textflag.h"

// func Now() uint64
TEXT ·Now(SB), NOSPLIT|NOFRAME, $0-8
	RDTSC
	SHLQ	$32, DX
	ORQ	DX, AX
	MOVQ	AX, ret+0(FP)
	RET

// func Start() uint64
// LFENCE waits for every earlier instruction to finish before RDTSC reads
// the counter.
TEXT ·Start(SB), NOSPLIT|NOFRAME, $0-8
	LFENCE
	RDTSC
	SHLQ	$32, DX
	ORQ	DX, AX
	MOVQ	AX, ret+0(FP)
	RET

// func Stop() uint64
// RDTSCP waits for every earlier instruction to finish; the LFENCE after it
// keeps later instructions from starting before the read. Without RDTSCP,
// LFENCE; RDTSC; LFENCE gives the same ordering.
TEXT ·Stop(SB), NOSPLIT|NOFRAME, $0-8
	CMPB	·hasRDTSCP(SB), $0
	JEQ	fallback
	RDTSCP
	LFENCE
	SHLQ	$32, DX
	ORQ	DX, AX
	MOVQ	AX, ret+0(FP)
	RET
fallback:
	LFENCE
	RDTSC
	LFENCE
	SHLQ	$32, DX
	ORQ	DX, AX
	MOVQ	AX, ret+0(FP)
	RET

// func cpuidLeaf(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuidLeaf(SB), NOSPLIT|NOFRAME, $0-24
	MOVL	leaf+0(FP), AX
	MOVL	subleaf+4(FP), CX
	CPUID
	MOVL	AX, eax+8(FP)
	MOVL	BX, ebx+12(FP)
	MOVL	CX, ecx+16(FP)
	MOVL	DX, edx+20(FP)
	RET
