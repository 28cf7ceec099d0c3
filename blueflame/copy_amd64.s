#include "textflag.h"

// The doorbell record store needs only a compiler barrier before it on
// x86-64 (udma_to_device_barrier): entering this function is one. The sfence
// after it is mmio_wc_start, the sfence at the end mmio_flush_writes.

// func postStore8(dbrecSend unsafe.Pointer, dbval uint32, dst, src unsafe.Pointer, chunks uint, ringBase, ringEnd unsafe.Pointer)
TEXT ·postStore8(SB), NOSPLIT|NOFRAME, $0-56
	MOVQ	dbrecSend+0(FP), AX
	MOVL	dbval+8(FP), BX
	MOVQ	dst+16(FP), DI
	MOVQ	src+24(FP), SI
	MOVQ	chunks+32(FP), CX
	MOVQ	ringBase+40(FP), R8
	MOVQ	ringEnd+48(FP), R9
	MOVL	BX, (AX)
	SFENCE
chunk:
	MOVQ	0(SI), AX
	MOVQ	8(SI), BX
	MOVQ	16(SI), DX
	MOVQ	24(SI), R10
	MOVQ	AX, 0(DI)
	MOVQ	BX, 8(DI)
	MOVQ	DX, 16(DI)
	MOVQ	R10, 24(DI)
	MOVQ	32(SI), AX
	MOVQ	40(SI), BX
	MOVQ	48(SI), DX
	MOVQ	56(SI), R10
	MOVQ	AX, 32(DI)
	MOVQ	BX, 40(DI)
	MOVQ	DX, 48(DI)
	MOVQ	R10, 56(DI)
	ADDQ	$64, SI
	ADDQ	$64, DI
	CMPQ	SI, R9
	JNE	next
	MOVQ	R8, SI
next:
	DECQ	CX
	JNZ	chunk
	SFENCE
	RET

// func postAVX512(dbrecSend unsafe.Pointer, dbval uint32, dst, src unsafe.Pointer, chunks uint, ringBase, ringEnd unsafe.Pointer)
TEXT ·postAVX512(SB), NOSPLIT|NOFRAME, $0-56
	MOVQ	dbrecSend+0(FP), AX
	MOVL	dbval+8(FP), BX
	MOVQ	dst+16(FP), DI
	MOVQ	src+24(FP), SI
	MOVQ	chunks+32(FP), CX
	MOVQ	ringBase+40(FP), R8
	MOVQ	ringEnd+48(FP), R9
	MOVL	BX, (AX)
	SFENCE
chunk:
	VMOVDQU64	(SI), Z0
	VMOVDQU64	Z0, (DI)
	ADDQ	$64, SI
	ADDQ	$64, DI
	CMPQ	SI, R9
	JNE	next
	MOVQ	R8, SI
next:
	DECQ	CX
	JNZ	chunk
	SFENCE
	VZEROUPPER
	RET

// func ringAsm(dbrecSend unsafe.Pointer, dbval uint32, dst unsafe.Pointer, val uint64)
TEXT ·ringAsm(SB), NOSPLIT|NOFRAME, $0-32
	MOVQ	dbrecSend+0(FP), AX
	MOVL	dbval+8(FP), BX
	MOVQ	dst+16(FP), DI
	MOVQ	val+24(FP), DX
	MOVL	BX, (AX)
	SFENCE
	MOVQ	DX, (DI)
	SFENCE
	RET
