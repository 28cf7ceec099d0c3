// Package devattr holds what the hardware provider reports about an mlx5
// device beyond ctx.DeviceAttr, for mlx5kit-devinfo and the provider itself:
// mlx5dv_query_device's attributes (DVAttr), ibv_query_device_ex's
// (ExtendedAttr) and the GID table (GIDTableEntry). No public package
// exports them: a program reads a device through ctx.
package devattr

import "github.com/mlx5kit/mlx5kit/ctx"

// DVAttr holds what mlx5dv_query_device reports: the device-specific
// capabilities that the data plane needs and ibv_query_device does not
// give. Fields guarded by a bit of CompMask are zero when the device or
// rdma-core did not fill them.
type DVAttr struct {
	// Version is the mlx5dv_context version.
	Version uint8
	// Flags is the raw mlx5dv_context flags word (DVFlag*).
	Flags uint64
	// CompMask says which optional fields below were filled (DVMask*).
	CompMask uint64

	// CQECompressionMaxNum is the largest compressed session (0: no CQE
	// compression); CQECompressionFormats the mini-CQE formats
	// (CQECompressionFormat*).
	CQECompressionMaxNum  uint32
	CQECompressionFormats uint32

	// SoftwareParsingOffloads and SoftwareParsingQPTypes describe
	// software-parsing offloads (raw packet QPs).
	SoftwareParsingOffloads uint32
	SoftwareParsingQPTypes  uint32

	// StridingRQ limits (log2 values) for multi-packet receive queues.
	StridingRQMinStrideLogBytes  uint32
	StridingRQMaxStrideLogBytes  uint32
	StridingRQMinWQELogStrides   uint32
	StridingRQMaxWQELogStrides   uint32
	StridingRQSupportedQPTypes   uint32
	TunnelOffloads               uint32
	MaxDynamicBlueFlameRegisters uint32
	MaxClockInfoUpdateNanos      uint64
	FlowActionFlags              uint32
	// DCODPCaps are the on-demand-paging capabilities of DC
	// (ibv_odp_transport_cap_bits).
	DCODPCaps   uint32
	NumLAGPorts uint8

	// DCIStreamsMaxLogConcurrent and DCIStreamsMaxLogErrored bound DCI
	// streams (0 when the device has none).
	DCIStreamsMaxLogConcurrent uint8
	DCIStreamsMaxLogErrored    uint8

	// MaxWRMemcpyLength is the largest DMA memcpy work request.
	MaxWRMemcpyLength uint64

	// Signature offload capabilities.
	SignatureBlockSizes uint64
	SignatureBlockProt  uint32
	SignatureT10DIFBG   uint16
	SignatureCRCTypes   uint16

	// Crypto offload capabilities.
	CryptoFailedSelftests     uint16
	CryptoEngines             uint8
	CryptoWrappedImportMethod uint8
	CryptoLogMaxNumDEKs       uint8
	CryptoFlags               uint32

	// MaxDCRequesterRdAtomic and MaxDCResponderRdAtomic are rdma-core's
	// max_dc_rd_atom (1 << log_max_ra_req_dc) and max_dc_init_rd_atom
	// (1 << log_max_ra_res_dc) (DVMaskMaxDCRdAtomic, rdma-core 47 and
	// later), named as rdma-core's man page describes them: the depths as
	// requester and as responder. The kernel bounds a DCI's max_rd_atomic
	// by max_dc_init_rd_atom (mlx5_ib's validate_rd_atomic), which is
	// therefore ctx.DeviceAttr.MaxDCInitRdAtomic.
	MaxDCRequesterRdAtomic uint64
	MaxDCResponderRdAtomic uint64
}

// Bits of DVAttr.Flags (enum mlx5dv_context_flags).
const (
	// DVFlagCQEVersion1: CQEs carry the user index instead of the SRQ
	// number in srqn_uidx.
	DVFlagCQEVersion1       = 1 << 0
	DVFlagMPWAllowed        = 1 << 2
	DVFlagEnhancedMPW       = 1 << 3
	DVFlagCQE128Compression = 1 << 4
	DVFlagCQE128Padding     = 1 << 5
	DVFlagPacketBasedCredit = 1 << 6
	DVFlagRealTimeTimestamp = 1 << 7
)

// Bits of DVAttr.CompMask (enum mlx5dv_context_comp_mask).
const (
	DVMaskCQECompression  = 1 << 0
	DVMaskSoftwareParsing = 1 << 1
	DVMaskStridingRQ      = 1 << 2
	DVMaskTunnelOffloads  = 1 << 3
	DVMaskDynamicBFRegs   = 1 << 4
	DVMaskClockInfoUpdate = 1 << 5
	DVMaskFlowActionFlags = 1 << 6
	DVMaskDCODPCaps       = 1 << 7
	DVMaskHCACoreClock    = 1 << 8
	DVMaskNumLAGPorts     = 1 << 9
	DVMaskSignature       = 1 << 10
	DVMaskDCIStreams      = 1 << 11
	DVMaskWRMemcpyLength  = 1 << 12
	DVMaskCryptoOffload   = 1 << 13
	// DVMaskMaxDCRdAtomic (MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM) is not in
	// the headers of rdma-core before 47; the query asks for it all the
	// same (see mk_query_dv).
	DVMaskMaxDCRdAtomic = 1 << 14
)

// Mini-CQE formats of DVAttr.CQECompressionFormats (enum
// mlx5dv_cqe_comp_res_format). The kit's poller reads the hash format (byte
// count in every responder mini-CQE).
const (
	CQECompressionFormatHash                = 1 << 0
	CQECompressionFormatChecksum            = 1 << 1
	CQECompressionFormatChecksumStrideIndex = 1 << 2
)

// Has reports whether the device filled the fields of mask.
func (a DVAttr) Has(mask uint64) bool { return a.CompMask&mask == mask }

// CQEVersion1 reports that CQEs carry the user index in srqn_uidx.
func (a DVAttr) CQEVersion1() bool { return a.Flags&DVFlagCQEVersion1 != 0 }

// CQECompression reports that CQE compression with the hash mini-CQE
// format (the one the kit's poller expands) is available.
func (a DVAttr) CQECompression() bool {
	return a.CQECompressionMaxNum > 0 && a.CQECompressionFormats&CQECompressionFormatHash != 0
}

// ExtendedAttr holds the ibv_query_device_ex attributes that ctx.DeviceAttr
// does not carry, for tools like mlx5kit-devinfo.
type ExtendedAttr struct {
	HardwareVersion  uint32
	SysImageGUID     uint64
	PageSizeCap      uint64
	DeviceCapFlags   uint32
	DeviceCapFlagsEx uint64
	MaxSGERead       uint32
	MaxResRdAtomic   uint32
	MaxMemoryWindows uint32
	MaxMcastGroups   uint32
	MaxPKeys         uint16
	LocalCAAckDelay  uint8
	// AtomicCap is enum ibv_atomic_cap: 0 none, 1 HCA, 2 global.
	AtomicCap uint32
	// CompletionTimestampMask and HCACoreClockKHz describe CQE timestamps.
	CompletionTimestampMask uint64
	HCACoreClockKHz         uint64
	// ODP capabilities (ibv_odp_caps).
	ODPGeneralCaps uint64
	ODPRCCaps      uint32
	ODPUCCaps      uint32
	ODPUDCaps      uint32
	ODPXRCCaps     uint32
	// PCIAtomic* are bitmasks of supported PCIe atomic operand sizes.
	PCIAtomicFetchAdd    uint16
	PCIAtomicSwap        uint16
	PCIAtomicCompareSwap uint16
	MaxDeviceMemory      uint64
	PhysPortCountEx      uint32
	MaxCQModerationCount uint16
	MaxCQModerationUsec  uint16
}

// GIDTableEntry is one valid GID table entry as ibv_query_gid_table reports
// it. The port and the network device it belongs to are the embedded
// ctx.GIDEntry's Port and NetdevIfindex, which QueryGIDs reports too.
type GIDTableEntry struct {
	ctx.GIDEntry
}
