package verbs

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/devattr"
)

// DeviceListing is one RDMA device as ibv_get_device_list sees it, mlx5 or
// not.
type DeviceListing struct {
	// Name is the kernel device name, e.g. "mlx5_0".
	Name string
	// NodeGUID is the node GUID in host byte order.
	NodeGUID uint64
	// NodeType is ibv_node_type_str of the device ("InfiniBand channel
	// adapter", "iWARP RNIC", …).
	NodeType string
	// MLX5 reports that the mlx5 provider drives the device
	// (mlx5dv_is_supported); only such devices can be opened.
	MLX5 bool
}

// The types of internal/devattr, under the names this package has always
// used for them.
type (
	DVAttr        = devattr.DVAttr
	ExtendedAttr  = devattr.ExtendedAttr
	GIDTableEntry = devattr.GIDTableEntry
)

// Known bits of the query's words.
const (
	dvFlagKnown                = devattr.DVFlagCQEVersion1 | devattr.DVFlagMPWAllowed | devattr.DVFlagEnhancedMPW | devattr.DVFlagCQE128Compression | devattr.DVFlagCQE128Padding | devattr.DVFlagPacketBasedCredit | devattr.DVFlagRealTimeTimestamp
	cqeCompressionFormatsKnown = devattr.CQECompressionFormatHash | devattr.CQECompressionFormatChecksum | devattr.CQECompressionFormatChecksumStrideIndex
	dvMaskAll                  = 1<<15 - 1
)

// CQConfig configures a completion queue: ctx.CompletionQueueConfig, whose
// Compression (hash or checksum mini-CQE format), CQEPadding and CompVector
// this provider passes to mlx5dv_create_cq. It is a struct of its own so
// that options only this provider has can be added without changing ctx.
type CQConfig struct {
	ctx.CompletionQueueConfig
}

// QPConfig configures a queue pair.
type QPConfig struct {
	Type ctx.QPType
	// SendCQ and RecvCQ receive the QP's completions; either may be nil
	// and then defaults to the other.
	SendCQ, RecvCQ *CompletionQueue
	// SRQ replaces the receive queue; a DCT requires one.
	SRQ  *SharedReceiveQueue
	Caps ctx.QueuePairCaps
	// DCKey is the DC access key of a DCT.
	DCKey uint64
	// ScatterToCQE keeps rdma-core's default of letting the device place
	// small receive payloads in the CQE. Off (the default), the QP is
	// created with MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE so every
	// payload lands in the receive buffer.
	ScatterToCQE bool
}
