#include "go_asm.h"
#include "textflag.h"

// post is a whole post in the active mode (see post in register.go).
// Barriers as rdma-core on aarch64: udma_to_device_barrier is dmb oshst
// (DMB $2), mmio_wc_start and mmio_flush_writes are dsb st (DSB $14).

// Common prologue: R0 = dbrec, R3 = src, R5 = ringBase, R6 = ringEnd,
// R2 = r.reg + r.offset (then r.offset ^= r.size), R4 = the chunk count or
// 0 for the doorbell; stores dbrec[1] between the barriers.
#define PROLOGUE \
	MOVD	r+0(FP), R10 \
	MOVD	dbrec+8(FP), R0 \
	MOVWU	pi+16(FP), R1 \
	MOVD	src+24(FP), R3 \
	MOVD	n+32(FP), R4 \
	MOVD	ringBase+40(FP), R5 \
	MOVD	ringEnd+48(FP), R6 \
	MOVWU	Register_offset(R10), R11 \
	MOVD	Register_reg(R10), R2 \
	ADD	R11, R2, R2 \
	MOVWU	Register_size(R10), R12 \
	EORW	R12, R11, R11 \
	MOVW	R11, Register_offset(R10) \
	ADD	$63, R4, R4 \
	LSR	$6, R4, R4 \
	LSR	$6, R12, R12 \
	CMP	R12, R4 \
	CSEL	HI, ZR, R4, R4 \
	ANDW	$0xffff, R1, R1 \
	REVW	R1, R1 \
	DMB	$2 \
	MOVW	R1, 4(R0) \
	DSB	$14

// func post(r *Register, dbrec unsafe.Pointer, pi uint32, src unsafe.Pointer, n int, ringBase, ringEnd unsafe.Pointer)
// The mode is read before anything is written; R15 keeps it.
TEXT ·post(SB), NOSPLIT|NOFRAME, $0-56
	MOVBU	·activeMode(SB), R15
	CMP	$const_ModeGeneric, R15
	BEQ	generic
	PROLOGUE
	CBZ	R4, doorbell
	CMP	$const_ModeNEON, R15
	BEQ	neon
stp:
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
	BNE	stpnext
	MOVD	R5, R3
stpnext:
	SUBS	$1, R4, R4
	BNE	stp
	DSB	$14
	RET
neon:
	VLD1.P	64(R3), [V0.D2, V1.D2, V2.D2, V3.D2]
	VST1.P	[V0.D2, V1.D2, V2.D2, V3.D2], 64(R2)
	CMP	R6, R3
	BNE	neonnext
	MOVD	R5, R3
neonnext:
	SUBS	$1, R4, R4
	BNE	neon
	DSB	$14
	RET
doorbell:
	MOVD	(R3), R7
	MOVD	R7, (R2)
	DSB	$14
	RET
generic:
	// Same arguments, same frame: a tail jump.
	JMP	·postGeneric(SB)
