#include "textflag.h"

// Barriers as rdma-core on aarch64: udma_to_device_barrier is dmb oshst
// (DMB $2), mmio_wc_start and mmio_flush_writes are dsb st (DSB $14).

// func postNEON(dbrecSend unsafe.Pointer, dbval uint32, dst, src unsafe.Pointer, chunks uint, ringBase, ringEnd unsafe.Pointer)
TEXT ·postNEON(SB), NOSPLIT|NOFRAME, $0-56
	MOVD	dbrecSend+0(FP), R0
	MOVWU	dbval+8(FP), R1
	MOVD	dst+16(FP), R2
	MOVD	src+24(FP), R3
	MOVD	chunks+32(FP), R4
	MOVD	ringBase+40(FP), R5
	MOVD	ringEnd+48(FP), R6
	DMB	$2
	MOVW	R1, (R0)
	DSB	$14
chunk:
	VLD1.P	64(R3), [V0.D2, V1.D2, V2.D2, V3.D2]
	VST1.P	[V0.D2, V1.D2, V2.D2, V3.D2], 64(R2)
	CMP	R6, R3
	BNE	next
	MOVD	R5, R3
next:
	SUBS	$1, R4, R4
	BNE	chunk
	DSB	$14
	RET

// func postSTP(dbrecSend unsafe.Pointer, dbval uint32, dst, src unsafe.Pointer, chunks uint, ringBase, ringEnd unsafe.Pointer)
TEXT ·postSTP(SB), NOSPLIT|NOFRAME, $0-56
	MOVD	dbrecSend+0(FP), R0
	MOVWU	dbval+8(FP), R1
	MOVD	dst+16(FP), R2
	MOVD	src+24(FP), R3
	MOVD	chunks+32(FP), R4
	MOVD	ringBase+40(FP), R5
	MOVD	ringEnd+48(FP), R6
	DMB	$2
	MOVW	R1, (R0)
	DSB	$14
chunk:
	LDP	0(R3), (R7, R8)
	LDP	16(R3), (R9, R10)
	LDP	32(R3), (R11, R12)
	LDP	48(R3), (R13, R14)
	STP	(R7, R8), 0(R2)
	STP	(R9, R10), 16(R2)
	STP	(R11, R12), 32(R2)
	STP	(R13, R14), 48(R2)
	ADD	$64, R3, R3
	ADD	$64, R2, R2
	CMP	R6, R3
	BNE	next
	MOVD	R5, R3
next:
	SUBS	$1, R4, R4
	BNE	chunk
	DSB	$14
	RET

// func ringAsm(dbrecSend unsafe.Pointer, dbval uint32, dst unsafe.Pointer, val uint64)
TEXT ·ringAsm(SB), NOSPLIT|NOFRAME, $0-32
	MOVD	dbrecSend+0(FP), R0
	MOVWU	dbval+8(FP), R1
	MOVD	dst+16(FP), R2
	MOVD	val+24(FP), R3
	DMB	$2
	MOVW	R1, (R0)
	DSB	$14
	MOVD	R3, (R2)
	DSB	$14
	RET
