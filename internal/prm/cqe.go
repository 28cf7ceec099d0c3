package prm

import (
	"sync/atomic"
	"unsafe"
)

// CQE64 layout (struct mlx5_cqe64 and struct mlx5_err_cqe, 64 bytes). In a
// 128-byte CQE the CQE64 is the second half; the first half holds scattered
// data (scatter-to-CQE) or the GRH.
const (
	CQE64Size  = 64
	CQE128Size = 128

	CQEWQEID        = 2  // be16 (striding RQ)
	CQERxHashResult = 12 // be32: RSS hash result (Ethernet; a mini-CQE's first word lands here)
	CQEMLPath       = 17 // u8: DLID path bits 6..0
	CQECheckSum     = 20 // be16
	CQESLID         = 22 // be16
	CQEFlagsRQPN    = 24 // be32: GRH 29..28, SL 27..24, source QP 23..0
	CQEHdsIPExt     = 28 // u8
	CQEL4HdrTypeEtc = 29 // u8
	CQEVlanInfo     = 30 // be16
	CQESRQNUIdx     = 32 // be32: SRQ number or user index (23..0)
	CQEImmInvalPkey = 36 // be32: immediate (as sent), invalidated rkey, or pkey
	CQEApp          = 40 // u8
	CQEAppOp        = 41 // u8
	CQEAppInfo      = 42 // be16
	CQEByteCnt      = 44 // be32
	CQETimestamp    = 48 // be64
	CQESopDropQPN   = 56 // be32: send opcode 31..24 (requester), QPN 23..0
	CQEWQECounter   = 60 // be16
	CQESignature    = 62 // u8
	CQEOpOwn        = 63 // u8

	// Error CQE (struct mlx5_err_cqe) fields that differ from the CQE64.
	ErrCQESRQN           = 32 // be32
	ErrCQEVendorSyndrome = 54 // u8
	ErrCQESyndrome       = 55 // u8
	ErrCQEWQEOpcodeQPN   = 56 // be32: WQE opcode 31..24, QPN 23..0
)

// Fields of flags_rqpn and sop_drop_qpn.
const (
	CQESLShift       = 24 // SL is bits 27..24 of flags_rqpn (IB; RoCE: see CQERoCEL3Shift)
	CQESLMask        = 0xf
	CQEGRHShift      = 28 // GRH presence in bits 29..28 of flags_rqpn
	CQEGRHMask       = 0x3
	CQEQPNMask       = 0xffffff
	CQESRQNMask      = 0xffffff
	CQESendOpShift   = 24
	CQEInvalidOpOwn  = 0xf0 // op_own of a CQE no one has written: INVALID, owner 0
	CQEOwnerMask     = 0x01
	CQESolicitedMask = 0x02
	CQEFormatShift   = 2
	CQEFormatMask    = 0x3
	CQEOpcodeShift   = 4
	CQEMLPathMask    = 0x7f
	CQEPKeyIndexMask = 0xffff // pkey index in imm_inval_pkey of a UD receive
)

// The network header type of a responder CQE on an Ethernet (RoCE) port:
// bits 25..24 of flags_rqpn, which on InfiniBand are the low bits of SL
// (the Linux kernel's MLX5_CQE_ROCE_L3_HEADER_TYPE_*, read by mlx5_ib into
// ib_wc.network_hdr_type). It says what the 40-byte GRH area in front of a
// UD payload holds. mlx5dv.h does not define these values.
const (
	CQERoCEL3Shift = 24
	CQERoCEL3Mask  = 0x3
	CQERoCEL3GRH   = 0 // RoCE v1: an InfiniBand GRH
	CQERoCEL3IPv6  = 1 // RoCE v2 over IPv6: the IPv6 header
	CQERoCEL3IPv4  = 2 // RoCE v2 over IPv4: 20 undefined bytes, then the IPv4 header
)

// The l3_hdr_type field, bits 3..2 of l4_hdr_type_etc, that the device
// fills for Ethernet packets of raw packet QPs (checksum offload:
// rdma-core reads it only for such QPs). A RoCE responder CQE carries its
// network header type in flags_rqpn instead (CQERoCEL3Shift).
const (
	CQEL3HdrTypeShift = 2
	CQEL3HdrTypeMask  = 0x3
	CQEL3HdrTypeNone  = 0
	CQEL3HdrTypeIPv6  = 1
	CQEL3HdrTypeIPv4  = 2
)

// Values of the 2-bit GRH field of flags_rqpn (bits 29..28).
const (
	CQEGRHNone   = 0 // no GRH
	CQEGRHInData = 1 // GRH in the first 40 bytes of the receive buffer
	CQEGRHInCQE  = 2 // GRH in the 40 bytes before the CQE64 (128-byte CQEs)
)

// CQE formats in bits 3..2 of op_own.
const (
	CQEFormatNone       = 0 // plain CQE
	CQEFormatScatter32  = 1 // up to 32 bytes of payload in the CQE (64-byte CQEs)
	CQEFormatScatter64  = 2 // up to 64 bytes of payload in the first half (128-byte CQEs)
	CQEFormatCompressed = 3 // a block of mini-CQEs follows a title
)

// Scatter-to-CQE request bits for RC/UD receive (MLX5_INLINE_SCATTER_32/64).
const (
	InlineScatter32 = 0x4
	InlineScatter64 = 0x8
)

// Mini-CQE (struct mlx5_mini_cqe8, 8 bytes). Eight mini-CQEs fill a 64-byte
// CQE slot of a compressed block.
//
// A compressed session in the basic layout (DPDK's mlx5_rx.c is the public
// reader of it): the slot at index c holds a CQE whose op_own format is
// CQEFormatCompressed; it carries the fields every completion of the session
// shares (QPN, opcode, flags) and, in byte_cnt, the number n of completions.
// The mini-CQE arrays follow: the first in slot c+1, the next ones in slots
// c+8, c+16, ... (eight mini-CQEs each). The session consumes the n slots
// c .. c+n-1 (holes the hardware leaves for software), so the consumer index
// moves by n, and software must reset op_own of those slots to an invalid
// value or the stale bytes look valid on the next lap. Each mini-CQE expands
// into one full CQE copied from the compressed CQE with its own byte_cnt
// (responder) or wqe_counter and opcode (requester).
//
// The requester mini-CQE puts the send opcode at byte 2 as the Linux kernel's
// struct mlx5_mini_cqe8 does; DPDK's header has a validity iteration count
// there (enhanced compression layout) and the opcode at byte 3.
const (
	MiniCQESize       = 8
	MiniCQEsPerSlot   = CQE64Size / MiniCQESize
	MiniRespRxHash    = 0 // be32: RX hash result, or checksum + stride index
	MiniRespByteCnt   = 4 // be32
	MiniReqWQECounter = 0 // be16, as in the wqe_counter of a full CQE
	MiniReqSWOpcode   = 2 // u8: the send WQE opcode
)

// OpOwn composes an op_own byte.
func OpOwn(op CQEOpcode, format uint8, solicited bool, owner uint8) uint8 {
	v := uint8(op)<<CQEOpcodeShift | (format&CQEFormatMask)<<CQEFormatShift | owner&CQEOwnerMask
	if solicited {
		v |= CQESolicitedMask
	}
	return v
}

// LoadOpOwn returns the op_own byte of the CQE64 at cqe, read with one
// sync/atomic load of the CQE's last 4-byte word (wqe_counter, signature,
// op_own; op_own is its most significant byte on the little-endian hosts
// the kit runs on). The atomic load keeps the compiler from moving later
// loads above it; blueflame.OwnershipBarrier adds what the processor needs.
func LoadOpOwn(cqe unsafe.Pointer) uint8 {
	return uint8(atomic.LoadUint32((*uint32)(unsafe.Add(cqe, CQEWQECounter))) >> 24)
}

// OpOwnOpcode extracts the CQE opcode from an op_own byte.
func OpOwnOpcode(opOwn uint8) CQEOpcode { return CQEOpcode(opOwn >> CQEOpcodeShift) }

// OpOwnFormat extracts the CQE format from an op_own byte.
func OpOwnFormat(opOwn uint8) uint8 { return (opOwn >> CQEFormatShift) & CQEFormatMask }
