#include "go_asm.h"
#include "textflag.h"

// post is a whole post in the active mode (see post in register.go).
// Barriers as rdma-core on aarch64: udma_to_device_barrier is dmb oshst
// (DMB $2), mmio_wc_start and mmio_flush_writes are dsb st (DSB $14).

// Common prologue: R0 = d.dbrec, R3 = src, R5 = d.ringBase, R6 = d.ringEnd,
// R2 = d.reg + d.offset (then d.offset ^= d.size), R4 = the chunk count or
// 0 for the doorbell; stores dbrec[1] between the barriers. The Register is
// embedded in SendDoorbell: REG_f is its field f.
#define REG_reg (SendDoorbell_Register+Register_reg)
#define REG_size (SendDoorbell_Register+Register_size)
#define REG_offset (SendDoorbell_Register+Register_offset)
#define PROLOGUE \
	MOVD	d+0(FP), R10 \
	MOVWU	pi+8(FP), R1 \
	MOVD	src+16(FP), R3 \
	MOVD	n+24(FP), R4 \
	MOVD	SendDoorbell_dbrec(R10), R0 \
	MOVD	SendDoorbell_ringBase(R10), R5 \
	MOVD	SendDoorbell_ringEnd(R10), R6 \
	MOVWU	REG_offset(R10), R11 \
	MOVD	REG_reg(R10), R2 \
	ADD	R11, R2, R2 \
	MOVWU	REG_size(R10), R12 \
	EORW	R12, R11, R11 \
	MOVW	R11, REG_offset(R10) \
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

// func post(d *SendDoorbell, pi uint32, src unsafe.Pointer, n int)
// The mode is read before anything is written; R15 keeps it.
TEXT ·post(SB), NOSPLIT|NOFRAME, $0-32
	MOVBU	·activeMode(SB), R15
	CMP	$const_modeGeneric, R15
	BEQ	generic
	PROLOGUE
	CBZ	R4, doorbell
	CMP	$const_modeNEON, R15
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
