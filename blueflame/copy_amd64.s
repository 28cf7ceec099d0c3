#include "go_asm.h"
#include "textflag.h"

// post is a whole post in the active mode (see post in register.go). The
// doorbell record store needs only a compiler barrier before it on x86-64
// (udma_to_device_barrier): entering an assembly function is one. The
// sfence after it is mmio_wc_start, the sfence at the end
// mmio_flush_writes.

// The steps of a post's prologue (PROLOGUE below) and of its chunk count. The
// Register is embedded in SendDoorbell: REG_f is its field f.
#define REG_reg (SendDoorbell_Register+Register_reg)
#define REG_size (SendDoorbell_Register+Register_size)
#define REG_offset (SendDoorbell_Register+Register_offset)
#define REG_straight (SendDoorbell_Register+Register_straight)

// DX = d, BX = pi, SI = src, CX = n, AX = d.dbrec.
#define POST_ARGS \
	MOVQ	d+0(FP), DX \
	MOVL	pi+8(FP), BX \
	MOVQ	src+16(FP), SI \
	MOVQ	n+24(FP), CX \
	MOVQ	SendDoorbell_dbrec(DX), AX

// DI = d.reg + d.offset, then d.offset ^= d.size.
#define POST_BUFFER \
	MOVL	REG_offset(DX), R10 \
	MOVQ	REG_reg(DX), DI \
	ADDQ	R10, DI \
	XORL	REG_size(DX), R10 \
	MOVL	R10, REG_offset(DX)

// CX = (n+63)/64 chunks, or 0 (the doorbell) when the buffer holds fewer.
#define POST_CHUNKS \
	ADDQ	$63, CX \
	SHRQ	$6, CX \
	MOVL	REG_size(DX), R11 \
	SHRL	$6, R11 \
	XORL	R10, R10 \
	CMPQ	CX, R11 \
	CMOVQHI	R10, CX

// dbrec[1] = big-endian pi & 0xffff, then the WC-start fence.
#define POST_DBREC \
	ANDL	$0xffff, BX \
	BSWAPL	BX \
	MOVL	BX, 4(AX) \
	SFENCE

// The prologue of both modes: the arguments (CX = n), the buffer, the
// doorbell record and the fence. The ring bounds and the chunk count are
// loaded only by a WQE of more than one basic block.
#define PROLOGUE \
	POST_ARGS \
	POST_BUFFER \
	POST_DBREC

// The eight 8-byte stores of one chunk from SI to DI.
#define STORE8 \
	MOVQ	0(SI), AX \
	MOVQ	8(SI), BX \
	MOVQ	16(SI), DX \
	MOVQ	24(SI), R10 \
	MOVQ	AX, 0(DI) \
	MOVQ	BX, 8(DI) \
	MOVQ	DX, 16(DI) \
	MOVQ	R10, 24(DI) \
	MOVQ	32(SI), AX \
	MOVQ	40(SI), BX \
	MOVQ	48(SI), DX \
	MOVQ	56(SI), R10 \
	MOVQ	AX, 32(DI) \
	MOVQ	BX, 40(DI) \
	MOVQ	DX, 48(DI) \
	MOVQ	R10, 56(DI)

// The straight path: one chunk (1 <= n <= 64, a buffer to copy it to)
// goes on below, anything else jumps to label. A WQE of one basic block,
// the common case, never wraps (basic blocks do not cross the ring's end)
// and any BlueFlame buffer holds it, so it needs no loop and no look at
// the ring's bounds.
#define ONE_CHUNK_OR(label) \
	LEAQ	-1(CX), R8 \
	CMPQ	R8, REG_straight(DX) \
	JCC	label

// CX = the chunk count, or jump to the doorbell; R8 = d.ringBase,
// R9 = d.ringEnd.
#define CHUNKS_OR_DOORBELL \
	POST_CHUNKS \
	TESTQ	CX, CX \
	JZ	doorbell \
	MOVQ	SendDoorbell_ringBase(DX), R8 \
	MOVQ	SendDoorbell_ringEnd(DX), R9

// func post(d *SendDoorbell, pi uint32, src unsafe.Pointer, n int)
// The mode is read before anything is written, the default mode of an
// AVX-512 machine first.
TEXT ·post(SB), NOSPLIT|NOFRAME, $0-32
	CMPB	·activeMode(SB), $const_modeAVX512
	JEQ	avx512post
	CMPB	·activeMode(SB), $const_modeStore8
	JNE	generic
	PROLOGUE
	ONE_CHUNK_OR(store8chunks)
	STORE8
	SFENCE
	RET
store8chunks:
	CHUNKS_OR_DOORBELL
store8:
	STORE8
	ADDQ	$64, SI
	ADDQ	$64, DI
	CMPQ	SI, R9
	JNE	store8next
	MOVQ	R8, SI
store8next:
	DECQ	CX
	JNZ	store8
	SFENCE
	RET
avx512post:
	PROLOGUE
	ONE_CHUNK_OR(avx512chunks)
	VMOVDQU64	(SI), Z0
	VMOVDQU64	Z0, (DI)
	SFENCE
	VZEROUPPER
	RET
avx512chunks:
	CHUNKS_OR_DOORBELL
avx512:
	VMOVDQU64	(SI), Z0
	VMOVDQU64	Z0, (DI)
	ADDQ	$64, SI
	ADDQ	$64, DI
	CMPQ	SI, R9
	JNE	avx512next
	MOVQ	R8, SI
avx512next:
	DECQ	CX
	JNZ	avx512
	SFENCE
	VZEROUPPER
	RET
doorbell:
	MOVQ	(SI), AX
	MOVQ	AX, (DI)
	SFENCE
	RET
generic:
	// Same arguments, same frame: a tail jump.
	JMP	·postGeneric(SB)
