#include "textflag.h"

// func Now() uint64
TEXT ·Now(SB), NOSPLIT|NOFRAME, $0-8
	MRS	CNTVCT_EL0, R0
	MOVD	R0, ret+0(FP)
	RET

// func Start() uint64
// ISB keeps the counter read from being performed before earlier
// instructions.
TEXT ·Start(SB), NOSPLIT|NOFRAME, $0-8
	ISB	$15
	MRS	CNTVCT_EL0, R0
	MOVD	R0, ret+0(FP)
	RET

// func Stop() uint64
TEXT ·Stop(SB), NOSPLIT|NOFRAME, $0-8
	ISB	$15
	MRS	CNTVCT_EL0, R0
	ISB	$15
	MOVD	R0, ret+0(FP)
	RET

// func counterFrequency() uint64
TEXT ·counterFrequency(SB), NOSPLIT|NOFRAME, $0-8
	MRS	CNTFRQ_EL0, R0
	MOVD	R0, ret+0(FP)
	RET
