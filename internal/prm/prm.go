// Package prm holds every byte layout and constant of the mlx5 Programmer's
// Reference Manual that mlx5kit speaks: send-queue segments (control, remote
// address, atomic, masked atomic, data, inline, datagram / address vector),
// receive segments, opcodes, fm_ce_se flags, CQE64 fields, op_own bits, CQE
// opcodes, error syndromes, mini-CQEs and doorbell-record slots.
//
// The builder (wqebuilder), the poller (monocq), the doorbell code
// (blueflame) and the software HCA (sim) all use this package, so each format
// is written down once. Multi-byte fields on the wire are big-endian unless a
// comment says otherwise. Offsets are checked byte for byte against
// rdma-core's infiniband/mlx5dv.h in the tests of package
// cgo/internal/dvcheck.
//
// The package has no dependencies beyond the standard library and must not
// acquire any: it is the bottom of the import graph.
package prm

import (
	"math/bits"
	"strconv"
	"unsafe"
)

// Send-queue geometry.
const (
	// WQEBBSize is the size of a send-queue basic block (MLX5_SEND_WQE_BB).
	WQEBBSize = 64
	// WQEBBShift is log2(WQEBBSize) (MLX5_SEND_WQE_SHIFT).
	WQEBBShift = 6
	// SegmentSize is the unit of the ds count in the control segment: every
	// segment is a multiple of 16 bytes and 16-byte aligned.
	SegmentSize = 16
	// SegmentsPerWQEBB is WQEBBSize / SegmentSize.
	SegmentsPerWQEBB = WQEBBSize / SegmentSize
	// MaxDS is the largest ds count the 6-bit field of qpn_ds can hold.
	MaxDS = 0x3f
)

// Control segment (struct mlx5_wqe_ctrl_seg, 16 bytes).
const (
	CtrlSize            = 16
	CtrlOpmodIdxOpcode  = 0  // be32: opmod<<24 | wqe_index<<8 | opcode
	CtrlQPNDS           = 4  // be32: qpn<<8 | ds
	CtrlSignature       = 8  // u8
	CtrlDCIStreamID     = 9  // be16
	CtrlFmCeSe          = 11 // u8
	CtrlImm             = 12 // be32: immediate data, or rkey for SEND_INV
	CtrlOpmodShift      = 24
	CtrlWQEIndexShift   = 8
	CtrlQPNShift        = 8
	CtrlDSMask          = 0x3f
	CtrlWQEIndexMask    = 0xffff
	CtrlOpcodeMask      = 0xff
	CtrlQPNMask         = 0xffffff
	CtrlOpmodMaskedAtom = 0x08 // opmod of masked atomics: 0x08 | (log2(size)-2)
)

// Opcode modifiers (the opmod byte of the control segment) of the extended,
// masked atomics. rdma-core never posts masked atomics itself (it only
// declares struct mlx5_wqe_masked_atomic_seg); the encoding below is the one
// UCX and the older libmlx5 use: 0x08 | (log2(operand size) - 2).
const (
	// OpmodExtAtomic marks an extended atomic; the low three bits carry
	// log2(operand size) - 2.
	OpmodExtAtomic = CtrlOpmodMaskedAtom
	// OpmodExtAtomicSizeMask covers the size bits of an extended-atomic opmod.
	OpmodExtAtomicSizeMask = 0x07
	// OpmodMaskedAtomic32 is the opmod of a masked atomic on 4 bytes.
	OpmodMaskedAtomic32 = OpmodExtAtomic // log2(4) - 2 == 0
	// OpmodMaskedAtomic64 is the opmod of a masked atomic on 8 bytes.
	OpmodMaskedAtomic64 = OpmodExtAtomic | 1
	// AtomicResultSize is the byte count of the data segment that receives
	// the old value of a standard (8-byte) atomic (MLX5_ATOMIC_SIZE in
	// rdma-core's qp.c). A masked atomic's data segment carries its operand
	// size instead.
	AtomicResultSize = 8
)

// MaskedAtomicOpmod returns the opmod of a masked atomic whose operand is
// size bytes (4 or 8; any power of two from 4 to 512 encodes), or 0 when size
// is not such a power of two.
func MaskedAtomicOpmod(size int) uint8 {
	if size < 4 || size > 512 || size&(size-1) != 0 {
		return 0
	}
	return OpmodExtAtomic | uint8(bits.TrailingZeros(uint(size))-2)
}

// MaskedAtomicSize returns the operand size in bytes that an extended-atomic
// opmod encodes, or 0 when opmod does not mark an extended atomic.
func MaskedAtomicSize(opmod uint8) int {
	if opmod&^OpmodExtAtomicSizeMask != OpmodExtAtomic {
		return 0
	}
	return 1 << (opmod&OpmodExtAtomicSizeMask + 2)
}

// fm_ce_se flags of the control segment.
const (
	// FlagCQUpdate requests a CQE for this WQE (MLX5_WQE_CTRL_CQ_UPDATE).
	FlagCQUpdate uint8 = 2 << 2
	// FlagSolicited sets the solicited-event bit (MLX5_WQE_CTRL_SOLICITED).
	FlagSolicited uint8 = 1 << 1
	// FlagFence waits for all prior RDMA reads and atomics to complete
	// (MLX5_WQE_CTRL_FENCE, used for IBV_SEND_FENCE).
	FlagFence uint8 = 4 << 5
	// FlagInitiatorSmallFence is the small fence used after a local
	// invalidate (MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE).
	FlagInitiatorSmallFence uint8 = 1 << 5
	// FlagFenceMask covers the fence mode bits 7..5.
	FlagFenceMask uint8 = 7 << 5
	// FenceShift is the position of the fence mode in fm_ce_se.
	FenceShift = 5
)

// FenceMode is the three-bit fence field (bits 7..5) of fm_ce_se.
type FenceMode uint8

// Fence modes, named as the Linux kernel's MLX5_FENCE_MODE_*. mlx5dv.h
// calls mode 1 MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE and mode 4
// MLX5_WQE_CTRL_FENCE (what rdma-core sets for IBV_SEND_FENCE, so FlagFence
// == FenceSmallAndFence.Flag()).
const (
	FenceNone           FenceMode = 0
	FenceInitiatorSmall FenceMode = 1
	FenceFence          FenceMode = 2
	FenceStrongOrdering FenceMode = 3
	FenceSmallAndFence  FenceMode = 4
	fenceModeCount                = 8
)

var fenceModeNames = [fenceModeCount]string{
	FenceNone:           "NONE",
	FenceInitiatorSmall: "INITIATOR_SMALL",
	FenceFence:          "FENCE",
	FenceStrongOrdering: "STRONG_ORDERING",
	FenceSmallAndFence:  "SMALL_AND_FENCE",
}

// String returns the name of the fence mode, or its number if it has none.
func (m FenceMode) String() string {
	if int(m) < len(fenceModeNames) && fenceModeNames[m] != "" {
		return fenceModeNames[m]
	}
	return "FENCE_MODE(" + strconv.Itoa(int(m)) + ")"
}

// Flag returns the fence mode placed in bits 7..5 of fm_ce_se.
func (m FenceMode) Flag() uint8 { return uint8(m) << FenceShift }

// FenceModeOf extracts the fence mode from an fm_ce_se byte.
func FenceModeOf(fmCeSe uint8) FenceMode { return FenceMode(fmCeSe >> FenceShift) }

// Remote address segment (struct mlx5_wqe_raddr_seg, 16 bytes).
const (
	RaddrSize  = 16
	RaddrAddr  = 0 // be64
	RaddrRkey  = 8 // be32
	RaddrResvd = 12
)

// Atomic segment (struct mlx5_wqe_atomic_seg, 16 bytes).
const (
	AtomicSize    = 16
	AtomicSwapAdd = 0 // be64: swap value (CS) or addend (FA)
	AtomicCompare = 8 // be64: compare value (CS)
)

// Masked atomic segments. A masked compare-and-swap on 8 bytes carries swap,
// compare, swap mask and compare mask (32 bytes, two segments); a masked
// fetch-and-add on 8 bytes carries the addend and the field-boundary mask (16
// bytes). On 4 bytes both forms pack their four (or two) 32-bit values into
// one 16-byte segment.
const (
	MaskedCS64Size        = 32
	MaskedCS64Swap        = 0  // be64
	MaskedCS64Compare     = 8  // be64
	MaskedCS64SwapMask    = 16 // be64
	MaskedCS64CompareMask = 24 // be64

	MaskedFA64Size          = 16
	MaskedFA64Add           = 0 // be64
	MaskedFA64FieldBoundary = 8 // be64

	MaskedCS32Size        = 16
	MaskedCS32Swap        = 0  // be32
	MaskedCS32Compare     = 4  // be32
	MaskedCS32SwapMask    = 8  // be32
	MaskedCS32CompareMask = 12 // be32

	MaskedFA32Size          = 16
	MaskedFA32Add           = 0 // be32
	MaskedFA32FieldBoundary = 4 // be32
)

// Data segment (struct mlx5_wqe_data_seg, 16 bytes): one scatter/gather entry.
const (
	DataSize      = 16
	DataByteCount = 0 // be32
	DataLKey      = 4 // be32
	DataAddr      = 8 // be64
	// InvalidLKey terminates a short receive scatter list (MLX5_INVALID_LKEY).
	InvalidLKey = 0x100
)

// Inline data segment (struct mlx5_wqe_inl_data_seg): a 4-byte header
// be32(len | InlineSeg) followed by the bytes, padded to 16.
const (
	InlineHeaderSize = 4
	InlineSeg        = 0x80000000 // MLX5_INLINE_SEG
)

// Address vector / datagram segment (struct mlx5_wqe_av, 48 bytes, three
// segments). UD puts the qkey in the first 4 bytes, DC the 8-byte DC access
// key in the first 8.
//
// rdma-core builds the AV in mlx5_create_ah: on InfiniBand stat_rate_sl is
// rate<<4 | SL (4 bits), fl_mlid the source path bits, rlid the destination
// LID and grh_gid_fl carries the GRH bit when the AH is global; on RoCE
// stat_rate_sl is rate<<4 | SL<<1 (3 bits), rlid the RoCE v2 UDP source
// port, rmac the next-hop MAC, and the GRH bit stays clear (every RoCE
// packet has a GRH). UD and DC then set ext|dqpn (MLX5_EXTENDED_UD_AV) and
// the key per WQE.
const (
	AVSize        = 48
	AVKey         = 0  // be64 dc_key, or be32 qkey + be32 reserved
	AVQKey        = 0  // be32 (UD)
	AVQKeyResvd   = 4  // be32 after the qkey, zero (UD)
	AVDCKey       = 0  // be64 (DC)
	AVDQPDCT      = 8  // be32: ext<<31 | remote QPN or DCT number
	AVStatRateSL  = 12 // u8
	AVFlMLID      = 13 // u8: force loopback and source LID path bits (IB)
	AVRLID        = 14 // be16: remote LID (IB) or UDP source port (RoCE v2)
	AVReserved0   = 16 // 4 bytes
	AVRMAC        = 20 // 6 bytes (RoCE)
	AVTClass      = 26 // u8
	AVHopLimit    = 27 // u8
	AVGRHGIDFL    = 28 // be32: GRH bit 30, sgid index 27..20, flow label 19..0
	AVRGID        = 32 // 16 bytes
	AVSegments    = AVSize / SegmentSize
	ExtendedUDAV  = 0x80000000 // MLX5_EXTENDED_UD_AV in dqp_dct
	AVGRHBit      = 1 << 30    // grh_gid_fl: a GRH is present
	AVSGIDShift   = 20
	AVSGIDMask    = 0xff
	AVFlowLblMask = 0xfffff
	AVDQPNMask    = 0xffffff // remote QPN or DCT number in dqp_dct
	AVRMACSize    = 6
	AVRGIDSize    = 16

	// AVStatRateShift places the static rate in stat_rate_sl.
	AVStatRateShift = 4
	// AVSLMask is the InfiniBand SL in bits 3..0 of stat_rate_sl.
	AVSLMask = 0xf
	// AVRoCESLShift and AVRoCESLMask place the 3-bit RoCE priority.
	AVRoCESLShift = 1
	AVRoCESLMask  = 0x7
	// AVForceLoopback is the fl bit of fl_mlid; AVMLIDMask the source path
	// bits.
	AVForceLoopback = 0x80
	AVMLIDMask      = 0x7f
)

// SRQ next segment (struct mlx5_wqe_srq_next_seg, 16 bytes), the first
// segment of every shared-receive-queue WQE.
const (
	SRQNextSize         = 16
	SRQNextWQEIndex     = 2  // be16
	SRQNextSignature    = 4  // u8
	GRHSize             = 40 // bytes a UD receive reserves for the GRH (see GRHNextHeaderIBA)
	DoorbellRecordSize  = 8  // two be32 slots
	DoorbellRecordRecv  = 0  // MLX5_RCV_DBR: RQ head, or CQ consumer index
	DoorbellRecordSend  = 1  // MLX5_SND_DBR: SQ producer index, or CQ arm word
	DoorbellRecordRecvB = DoorbellRecordRecv * 4
	DoorbellRecordSendB = DoorbellRecordSend * 4
)

// CQ doorbell (UAR) and arming.
const (
	// CQDoorbellOffset is the offset of the CQ arm doorbell in the CQ UAR page
	// (MLX5_CQ_DOORBELL).
	CQDoorbellOffset = 0x20
	// CQArmSolicited arms for solicited completions only
	// (MLX5_CQ_DB_REQ_NOT_SOL); CQArmAny (MLX5_CQ_DB_REQ_NOT) for any.
	CQArmSolicited = 1 << 24
	CQArmAny       = 0 << 24
	// CQArmSNShift places the 2-bit arm sequence number; CQArmSNMask keeps
	// its two bits (the count of events received, modulo 4).
	CQArmSNShift = 28
	CQArmSNMask  = 0x3
	// CQDoorbellRecordCI and CQDoorbellRecordArm are the CQ's doorbell-record
	// slots (rdma-core's MLX5_CQ_SET_CI and MLX5_CQ_ARM_DB): the consumer
	// index, and the arm word sn<<28 | cmd | ci that is also the upper half of
	// the 64-bit big-endian doorbell (arm word<<32 | cqn) written at
	// CQDoorbellOffset.
	CQDoorbellRecordCI  = 0
	CQDoorbellRecordArm = 1
	// CQConsumerIndexMask masks the consumer index written to dbrec[0].
	CQConsumerIndexMask = 0xffffff
)

// Store16 stores v big-endian at p.
func Store16(p unsafe.Pointer, v uint16) { *(*uint16)(p) = bits.ReverseBytes16(v) }

// Store32 stores v big-endian at p.
func Store32(p unsafe.Pointer, v uint32) { *(*uint32)(p) = bits.ReverseBytes32(v) }

// Store64 stores v big-endian at p.
func Store64(p unsafe.Pointer, v uint64) { *(*uint64)(p) = bits.ReverseBytes64(v) }

// Load16 loads a big-endian 16-bit value from p.
func Load16(p unsafe.Pointer) uint16 { return bits.ReverseBytes16(*(*uint16)(p)) }

// Load32 loads a big-endian 32-bit value from p.
func Load32(p unsafe.Pointer) uint32 { return bits.ReverseBytes32(*(*uint32)(p)) }

// Load64 loads a big-endian 64-bit value from p.
func Load64(p unsafe.Pointer) uint64 { return bits.ReverseBytes64(*(*uint64)(p)) }

// CtrlOpmodIdxOpcodeWord composes the first word of a control segment.
func CtrlOpmodIdxOpcodeWord(opmod uint8, wqeIndex uint16, op Opcode) uint32 {
	return uint32(opmod)<<CtrlOpmodShift | uint32(wqeIndex)<<CtrlWQEIndexShift | uint32(op)
}

// CtrlQPNDSWord composes the second word of a control segment.
func CtrlQPNDSWord(qpn uint32, ds uint8) uint32 {
	return qpn<<CtrlQPNShift | uint32(ds&CtrlDSMask)
}

// InlineDS is the number of 16-byte units an inline segment of n bytes takes
// (0 for n == 0: an empty inline payload writes no segment).
func InlineDS(n int) int {
	if n == 0 {
		return 0
	}
	return (InlineHeaderSize + n + SegmentSize - 1) / SegmentSize
}

// WQEBBs is the number of basic blocks a WQE of ds segments occupies.
func WQEBBs(ds int) int { return (ds + SegmentsPerWQEBB - 1) / SegmentsPerWQEBB }

// The network headers the GRHSize bytes in front of a UD receive hold: an
// InfiniBand (or RoCE v1) GRH, the IPv6 header of a RoCE v2 packet, or for
// RoCE v2 over IPv4 undefined bytes and then the IPv4 header in the last
// IPv4HeaderSize of them.
const (
	GRHNextHeaderIBA = 0x1b // next header of a GRH: IBA transport
	IPProtoUDP       = 17   // next header (IPv6) or protocol (IPv4) of RoCE v2
	UDPHeaderSize    = 8    // the UDP header a RoCE v2 payload length counts
	IPv4HeaderSize   = 20   // an IPv4 header without options
	IPv4VersionIHL   = 0x45 // its first byte: version 4, 5 words
)

// IPv4HeaderChecksum returns the ones' complement of the ones' complement
// sum of the 16-bit big-endian words of the IPv4 header h (an even number
// of bytes): the checksum field's value when that field is zero in h, and
// 0 when h carries a right checksum.
func IPv4HeaderChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
