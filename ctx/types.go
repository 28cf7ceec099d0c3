package ctx

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/mlx5kit/mlx5kit/internal/names"
)

// Kind says what kind of device a Context drives.
type Kind uint8

// Device kinds.
const (
	// KindHardware is a real mlx5 device driven through rdma-core.
	KindHardware Kind = iota + 1
	// KindSoftware is the software HCA (package sim).
	KindSoftware
)

var kindNames = [...]string{KindHardware: "hardware", KindSoftware: "software"}

// String returns "hardware" or "software".
func (k Kind) String() string { return names.Of(k, kindNames[:], "Kind") }

// Access is a set of memory-region access flags: those a region is
// registered with, and those an endpoint tells a peer it may use (package
// endpoint). The values are those of enum ibv_access_flags so a provider
// can pass them through. Registration also accepts the flags of the
// kernel's optional range, 1<<20 (IBV_ACCESS_RELAXED_ORDERING) to 1<<29,
// and passes them on: a device that cannot honour one ignores it, as
// mlx5_ib does (the software HCA ignores them all).
type Access uint32

// Access flags. Local read is always allowed.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
	// AccessZeroBased (IBV_ACCESS_ZERO_BASED) says a region's addresses
	// start at 0 rather than at the virtual address it was registered
	// from. An endpoint may carry it for a peer's region; no provider of
	// this kit registers a zero-based region (registration refuses it as
	// an unknown flag, EINVAL).
	AccessZeroBased Access = 1 << 5
	// AccessOnDemand asks for on-demand paging (IBV_ACCESS_ON_DEMAND). No
	// provider of this kit supports it: registration refuses it with
	// ErrNotSupported (EOPNOTSUPP), as the kernel does for a device
	// without ODP.
	AccessOnDemand Access = 1 << 6
	accessAll             = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
)

// String lists the flags, e.g. "LocalWrite|RemoteRead".
func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	s := ""
	add := func(f Access, n string) {
		if a&f != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	add(AccessLocalWrite, "LocalWrite")
	add(AccessRemoteWrite, "RemoteWrite")
	add(AccessRemoteRead, "RemoteRead")
	add(AccessRemoteAtomic, "RemoteAtomic")
	add(AccessZeroBased, "ZeroBased")
	add(AccessOnDemand, "OnDemand")
	if rest := a &^ (accessAll | AccessZeroBased | AccessOnDemand); rest != 0 {
		if s != "" {
			s += "|"
		}
		s += "0x" + strconv.FormatUint(uint64(rest), 16)
	}
	return s
}

// QPType is the transport of a queue pair.
type QPType uint8

// Queue pair types.
const (
	// QPTypeRC is a reliable connected QP.
	QPTypeRC QPType = iota + 1
	// QPTypeUD is an unreliable datagram QP.
	QPTypeUD
	// QPTypeDCI is a dynamically connected initiator (send side only).
	QPTypeDCI
	// QPTypeDCT is a dynamically connected target (receive side only,
	// through an SRQ).
	QPTypeDCT
)

var qpTypeNames = [...]string{QPTypeRC: "RC", QPTypeUD: "UD", QPTypeDCI: "DCI", QPTypeDCT: "DCT"}

// String returns "RC", "UD", "DCI" or "DCT".
func (t QPType) String() string { return names.Of(t, qpTypeNames[:], "QPType") }

// QPState is the state of a queue pair (enum ibv_qp_state order).
type QPState uint8

// Queue pair states.
const (
	QPStateReset QPState = iota
	QPStateInit
	QPStateRTR
	QPStateRTS
	QPStateSQD
	QPStateSQE
	QPStateError
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// String returns the verbs name of the state.
func (s QPState) String() string { return names.Of(s, qpStateNames[:], "QPState") }

// MTU is a path MTU with the values of enum ibv_mtu (IBV_MTU_256 = 1 …
// IBV_MTU_4096 = 5), so it converts to and from the verbs value unchanged.
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Valid reports whether m is one of MTU256 … MTU4096.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// Bytes returns the MTU in bytes (256 … 4096), or 0 when m is not valid.
func (m MTU) Bytes() int {
	if !m.Valid() {
		return 0
	}
	return 128 << m
}

// MTUFromBytes returns the MTU of n bytes; n must be 256, 512, 1024, 2048
// or 4096, else the error wraps ErrInvalidArgument.
func MTUFromBytes(n int) (MTU, error) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, nil
		}
	}
	return 0, errorf("MTU from bytes", "%d bytes: %w (want 256, 512, 1024, 2048 or 4096)", n, ErrInvalidArgument)
}

// String returns the size, e.g. "4096".
func (m MTU) String() string {
	if b := m.Bytes(); b != 0 {
		return strconv.Itoa(b)
	}
	return "MTU(" + strconv.Itoa(int(m)) + ")"
}

// LinkLayer is the link layer of a port.
type LinkLayer uint8

// Link layers.
const (
	LinkLayerInfiniBand LinkLayer = iota + 1
	LinkLayerEthernet
)

var linkLayerNames = [...]string{LinkLayerInfiniBand: "InfiniBand", LinkLayerEthernet: "Ethernet"}

// String returns "InfiniBand" or "Ethernet".
func (l LinkLayer) String() string { return names.Of(l, linkLayerNames[:], "LinkLayer") }

// ParseLinkLayer returns the link layer a name stands for as the tools and
// environment variables take it, in any case: "infiniband" or "ib", and
// "ethernet", "eth" or "roce". Any other text is an error wrapping
// ErrInvalidArgument (the caller names the text and where it came from).
// It is a function, not an UnmarshalText method, so that LinkLayer keeps
// its JSON encoding as a number.
func ParseLinkLayer(name string) (LinkLayer, error) {
	switch strings.ToLower(name) {
	case "infiniband", "ib":
		return LinkLayerInfiniBand, nil
	case "ethernet", "eth", "roce":
		return LinkLayerEthernet, nil
	}
	return 0, fmt.Errorf("want infiniband or ethernet: %w", ErrInvalidArgument)
}

// PortState is the logical state of a port (enum ibv_port_state).
type PortState uint8

// Port states.
const (
	PortStateNop         PortState = 0
	PortStateDown        PortState = 1
	PortStateInit        PortState = 2
	PortStateArmed       PortState = 3
	PortStateActive      PortState = 4
	PortStateActiveDefer PortState = 5
)

var portStateNames = [...]string{PortStateNop: "NOP", PortStateDown: "DOWN", PortStateInit: "INIT", PortStateArmed: "ARMED",
	PortStateActive: "ACTIVE", PortStateActiveDefer: "ACTIVE_DEFER"}

// String returns the verbs name of the state.
func (s PortState) String() string { return names.Of(s, portStateNames[:], "PortState") }

// GID is a 128-bit global identifier (an IPv6 address on RoCE).
type GID [16]byte

// String formats the GID as an IPv6 address.
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// IsZero reports whether every byte is 0.
func (g GID) IsZero() bool { return g == GID{} }

// GIDType is the type of a GID table entry.
type GIDType uint8

// GID types.
const (
	GIDTypeIB GIDType = iota + 1
	GIDTypeRoCEv1
	GIDTypeRoCEv2
)

var gidTypeNames = [...]string{GIDTypeIB: "IB", GIDTypeRoCEv1: "RoCEv1", GIDTypeRoCEv2: "RoCEv2"}

// String returns "IB", "RoCEv1" or "RoCEv2".
func (t GIDType) String() string { return names.Of(t, gidTypeNames[:], "GIDType") }

// GIDEntry is one entry of a port's GID table (struct ibv_gid_entry).
type GIDEntry struct {
	// Index is the entry's index in the port's table (the SGIDIndex that
	// sends from it).
	Index int
	GID   GID
	Type  GIDType
	// Port is the port the table belongs to (1-based).
	Port uint8
	// NetdevIfindex is the interface index of the network device a RoCE
	// GID belongs to (its IP address, VLAN); 0 on InfiniBand and on the
	// software HCA.
	NetdevIfindex uint32
}

// Support says whether a device has a capability, with a third answer for
// capabilities a provider cannot query.
type Support uint8

// Support values. The zero value is SupportUnknown, so a provider that
// does not fill a field never claims a capability either way.
const (
	// SupportUnknown: the provider has no query that answers (the
	// capability may well be there; try it, or consult the device's
	// documentation).
	SupportUnknown Support = iota
	// SupportNo: the device reports the capability absent.
	SupportNo
	// SupportYes: the device reports the capability present.
	SupportYes
)

var supportNames = [...]string{SupportUnknown: "unknown", SupportNo: "no", SupportYes: "yes"}

// String returns "unknown", "no" or "yes".
func (s Support) String() string { return names.Of(s, supportNames[:], "Support") }

// MarshalText encodes the value as String does (for JSON output).
func (s Support) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes "unknown", "no" or "yes".
func (s *Support) UnmarshalText(b []byte) error {
	for _, v := range [...]Support{SupportUnknown, SupportNo, SupportYes} {
		if string(b) == v.String() {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("ctx: support %q: %w", b, ErrInvalidArgument)
}

// Known reports whether the answer is yes or no.
func (s Support) Known() bool { return s == SupportNo || s == SupportYes }

// DeviceAttr holds the attributes of a device (ibv_query_device_ex plus
// mlx5dv_query_device).
type DeviceAttr struct {
	Name            string
	FirmwareVersion string
	NodeGUID        uint64
	VendorID        uint32
	VendorPartID    uint32
	PhysPortCount   uint8

	MaxQP             uint32 // queue pairs
	MaxQPWR           uint32 // work requests per queue
	MaxSGE            uint32 // scatter/gather entries per send or receive WQE
	MaxCQ             uint32
	MaxCQE            uint32 // entries per CQ
	MaxMR             uint32
	MaxMRSize         uint64
	MaxPD             uint32
	MaxQPRdAtomic     uint32 // outstanding RDMA reads/atomics as responder
	MaxQPInitRdAtomic uint32 // outstanding RDMA reads/atomics as requester
	MaxSRQ            uint32
	MaxSRQWR          uint32
	MaxSRQSGE         uint32
	MaxAH             uint32
	// MaxInline is the largest inline payload a send WQE of the device's
	// largest size can carry on an RC QP (SendLimits has every type's:
	// UD and DCI WQEs carry an address vector and leave less room).
	MaxInline uint32
	// AtomicHCA reports 64-bit atomics executed by the device: atomic_cap
	// IBV_ATOMIC_HCA, or IBV_ATOMIC_GLOB, to which libmlx5 raises it on a
	// device whose PCIe atomics take 8 bytes (pci_atomic_caps). Either way
	// the device's atomics are atomic with respect to one another; only
	// IBV_ATOMIC_GLOB also promises it against the processors' and other
	// devices' atomic operations on the same memory. The software HCA
	// reports IBV_ATOMIC_HCA.
	AtomicHCA bool
	// MaskedAtomics says whether masked compare-and-swap / fetch-and-add
	// (the extended atomics) are supported. The hardware provider reports
	// SupportUnknown: it is a PRM capability (the atomic caps of
	// QUERY_HCA_CAP) that neither ibv_query_device_ex nor
	// mlx5dv_query_device returns. The software HCA reports SupportYes.
	MaskedAtomics Support

	// DC reports dynamically connected transport support (DCI and DCT).
	DC bool
	// CQE128 reports that 128-byte CQEs may be requested.
	CQE128 bool
	// CQECompression reports CQE compression with the hash mini-CQE format
	// (CQECompressionHash), CQECompressionChecksum with the checksum format;
	// MaxCQECompression is the largest compressed session. The software HCA
	// writes every CQE in full and reports neither.
	CQECompression         bool
	CQECompressionChecksum bool
	MaxCQECompression      uint32
	// CQEPadding reports that 128-byte CQEs may be padded
	// (CompletionQueueConfig.CQEPadding).
	CQEPadding bool
	// CompVectors is the number of completion vectors
	// (CompletionQueueConfig.CompVector is below it).
	CompVectors uint32
	// BlueFlameSize is the size of one BlueFlame buffer (0: no BlueFlame).
	BlueFlameSize uint32

	// MaxSendWQESize is the largest send WQE in bytes a queue pair is
	// created with (rdma-core's max_sq_desc_sz in whole 64-byte blocks, at
	// most 1024; the hardware provider finds it by creating QPs). 0 means
	// the provider could not tell.
	MaxSendWQESize uint32
	// MaxRecvSGE is the most scatter entries one receive WQE of a queue
	// pair may carry (rdma-core's max_rq_desc_sz / 16, the kernel's
	// max_recv_sge; the hardware provider finds it by creating QPs). It
	// can be above MaxSGE, the smaller of the send and receive limits: a
	// ConnectX reports a MaxSGE of 30 and takes 32 scatter entries. 0
	// means the provider could not tell, and MaxSGE applies.
	MaxRecvSGE uint32
	// SendLimitsRC, SendLimitsUD and SendLimitsDCI are the limits of a
	// send queue of each type (SendLimits): a WQE's fixed part differs by
	// type, so the SGEs and inline bytes that fit do too. Zero when
	// MaxSendWQESize is.
	SendLimitsRC, SendLimitsUD, SendLimitsDCI SendQueueLimits
	// MaxDCRdAtomic and MaxDCInitRdAtomic are the RDMA reads and atomics
	// outstanding per DC QP as responder (a DCT) and as requester (a
	// DCI), which DC has apart from RC's MaxQPRdAtomic and
	// MaxQPInitRdAtomic. 0 means the provider could not tell (rdma-core
	// before 47 or a device without the capability); RC's values are the
	// best guess then.
	MaxDCRdAtomic     uint32
	MaxDCInitRdAtomic uint32
}

// SendQueueLimits are the limits of the send queue of one QP type: what a
// configuration (QueuePairCaps) may ask for. The kit sizes every slot of
// the ring for its largest WQE, so the deepest queue is reached with one
// SGE and no inline data; more of either makes the slots larger and the
// depth limit lower (package rc, dc and ud refuse such a configuration
// with the limit that applies).
type SendQueueLimits struct {
	// MaxDepth is the most send work requests (max_send_wr) of a queue
	// whose WQEs carry one SGE and no inline data.
	MaxDepth uint32
	// MaxSGE is the most data segments one send WQE may carry.
	MaxSGE uint32
	// MaxInline is the most inline bytes one send WQE may carry.
	MaxInline uint32
}

// SendLimits returns the send-queue limits of QP type t (zero for a DCT,
// which has no send queue, and for an unknown type).
func (a DeviceAttr) SendLimits(t QPType) SendQueueLimits {
	switch t {
	case QPTypeRC:
		return a.SendLimitsRC
	case QPTypeUD:
		return a.SendLimitsUD
	case QPTypeDCI:
		return a.SendLimitsDCI
	}
	return SendQueueLimits{}
}

// PortAttr holds the attributes of a port (ibv_query_port).
type PortAttr struct {
	Port         uint8
	State        PortState
	MaxMTU       MTU
	ActiveMTU    MTU
	LID          uint16
	SMLID        uint16
	LMC          uint8
	GIDTableLen  int
	PKeyTableLen int
	LinkLayer    LinkLayer
	ActiveSpeed  uint32 // ibv speed code (IB_SPEED_*: EDR 32, HDR 64, NDR 128, XDR 256)
	ActiveWidth  uint8  // ibv width code
}

// AddressAttr is a path to a remote port: the address half of ibv_ah_attr
// and of the RTR attributes. On InfiniBand DLID is enough within a subnet;
// on RoCE (Ethernet link layer) GlobalRoute must be set with the remote GID.
type AddressAttr struct {
	// Port is the local port number (1-based; 0 means 1).
	Port uint8
	// DLID is the destination LID (InfiniBand).
	DLID uint16
	// SL is the service level.
	SL uint8
	// SrcPathBits are the source path bits (LMC).
	SrcPathBits uint8
	// StaticRate is the ibv_rate code (0: port rate).
	StaticRate uint8
	// GlobalRoute adds a GRH; required on RoCE.
	GlobalRoute bool
	// DGID is the destination GID.
	DGID GID
	// SGIDIndex is the index of the local GID to send from.
	SGIDIndex uint8
	// FlowLabel, TrafficClass and HopLimit fill the GRH.
	FlowLabel    uint32
	TrafficClass uint8
	HopLimit     uint8
}

// QPAttr is the set of attributes for one Modify. State is the target
// state; the provider applies the attributes the transition from the
// current state needs for the QP's type (the verbs attribute mask is derived,
// not given) and ignores the rest:
//
//	RESET→INIT: Port, PKeyIndex, Access (RC, DCT), QKey (UD)
//	INIT→INIT:  the same, again (RC, UD, DCI)
//	INIT→RTR:   RC: RemoteQPN, Path, PathMTU, RQPSN, MaxDestRdAtomic, MinRNRTimer
//	            DCI: PathMTU (not Path); DCT: PathMTU, MinRNRTimer, Path (GRH fields)
//	RTR→RTS:    RC, DCI: SQPSN, Timeout, RetryCount, RNRRetry, MaxRdAtomic; UD: SQPSN
//	RTS→RTS, →ERR, →RESET: nothing
//
// Providers accept only the transitions the Linux kernel accepts for an
// mlx5 device (internal/qpstate) and refuse the rest with an error that
// wraps ErrInvalidState and EINVAL: a DCT goes RESET→INIT→RTR and no
// further (it is destroyed, never moved to ERR or RESET), a DCI never moves
// to RESET, no QP moves to SQD or from RESET to ERR.
type QPAttr struct {
	State QPState

	// Port is the local port (1-based). 0 means the port the QP was
	// brought to INIT on, port 1 before that.
	Port      uint8
	PKeyIndex uint16
	Access    Access
	QKey      uint32

	RemoteQPN       uint32
	Path            AddressAttr
	PathMTU         MTU
	RQPSN           uint32
	MaxDestRdAtomic uint8
	// MinRNRTimer is the 5-bit IB RNR timer code the responder asks a
	// sender to wait after an RNR NAK (0 = 655.36 ms, 1 = 0.01 ms, … 31 =
	// 491.52 ms). See RNRTimerDuration.
	MinRNRTimer uint8

	SQPSN uint32
	// Timeout is the 5-bit local ACK timeout code: 4.096 µs × 2^Timeout
	// (0 = infinite).
	Timeout uint8
	// RetryCount is the transport retry count (0..7).
	RetryCount uint8
	// RNRRetry is the RNR retry count (0..6; 7 = retry forever).
	RNRRetry    uint8
	MaxRdAtomic uint8
}

// QueuePairCaps are the sizes a queue pair is created with. Providers may
// round them up; the descriptor reports what was granted.
type QueuePairCaps struct {
	// SendDepth and RecvDepth are the number of work requests
	// (max_send_wr, max_recv_wr). RecvDepth is ignored with an SRQ.
	SendDepth, RecvDepth uint32
	// MaxSendSGE and MaxRecvSGE are scatter/gather entries per WQE.
	MaxSendSGE, MaxRecvSGE uint32
	// MaxInline is the largest inline payload asked for.
	MaxInline uint32
}

// CompletionQueueConfig configures a completion queue.
type CompletionQueueConfig struct {
	// Depth is the minimum number of CQEs; providers round up to a power
	// of two.
	Depth uint32
	// CQESize is 64 (default when 0) or 128.
	CQESize uint32
	// EventChannel creates a completion channel so the CQ can be armed and
	// waited for through EventFD.
	EventChannel bool
	// Compression asks the device to compress bursts of CQEs into mini-CQE
	// sessions (mlx5dv_create_cq with MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE)
	// with the given mini-CQE format; the poller (package monocq) expands
	// them. The device must report the format (DeviceAttr.CQECompression,
	// CQECompressionChecksum) or creation fails with ErrNotSupported. A
	// device compresses only when it finds a burst, so a compressed CQ may
	// still hold only full CQEs.
	Compression CQECompression
	// CQEPadding pads every 128-byte CQE to a whole cache line
	// (MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD); it needs CQESize 128 and
	// DeviceAttr.CQEPadding.
	CQEPadding bool
	// CompVector is the completion vector (interrupt) the CQ's events are
	// signalled on; it must be below DeviceAttr.CompVectors.
	CompVector uint32
	// Timestamps asks the device to write its clock, in raw cycles, in
	// every CQE (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP); Context.Clock
	// converts them. Without it the CQE's timestamp field holds nothing
	// meaningful. A provider that cannot stamp completions refuses the CQ
	// with ErrNotSupported.
	Timestamps bool
}

// CQECompression selects the mini-CQE format of a compressed completion
// queue (enum mlx5dv_cqe_comp_res_format).
type CQECompression uint8

// Mini-CQE formats.
const (
	// CQECompressionNone: every CQE is written in full.
	CQECompressionNone CQECompression = iota
	// CQECompressionHash: responder mini-CQEs carry the RSS hash result and
	// the byte count (MLX5DV_CQE_RES_FORMAT_HASH).
	CQECompressionHash
	// CQECompressionChecksum: responder mini-CQEs carry the packet checksum
	// in place of the hash result, and the byte count
	// (MLX5DV_CQE_RES_FORMAT_CSUM). The poller hands the checksum over where
	// the hash result would be.
	CQECompressionChecksum
)

var cqeCompressionNames = [...]string{CQECompressionNone: "none", CQECompressionHash: "hash", CQECompressionChecksum: "checksum"}

// String returns "none", "hash" or "checksum".
func (c CQECompression) String() string { return names.Of(c, cqeCompressionNames[:], "CQECompression") }

// SRQConfig configures a shared receive queue.
type SRQConfig struct {
	// Depth is the minimum number of receive WQEs.
	Depth uint32
	// MaxSGE is the number of data segments per WQE.
	MaxSGE uint32
}

// AsyncEventType is the type of an asynchronous device event.
type AsyncEventType uint8

// Asynchronous event types: every value of enum ibv_event_type. The values
// are ctx's own (the first nine keep the numbers they always had); the
// hardware provider maps the verbs values onto them.
const (
	EventCQError AsyncEventType = iota + 1
	EventQPFatal
	EventQPRequestError
	EventQPAccessError
	EventQPLastWQEReached
	EventSRQLimitReached
	EventPortActive
	EventPortError
	EventDeviceFatal
	// EventCommEstablished: an RC or UC QP in RTR received its first
	// packet (it may move to RTS).
	EventCommEstablished
	// EventSQDrained: a QP moved to SQD has no send WQE in flight.
	EventSQDrained
	// EventPathMigrated: a QP switched to its alternate path.
	EventPathMigrated
	// EventPathMigrationError: migrating a QP to its alternate path failed.
	EventPathMigrationError
	// EventSRQError: an SRQ hit an error it cannot recover from.
	EventSRQError
	// EventLIDChange: the port's LID changed.
	EventLIDChange
	// EventPKeyChange: the port's P_Key table changed.
	EventPKeyChange
	// EventSMChange: the subnet manager of the port changed.
	EventSMChange
	// EventClientReregister: the subnet manager asks for every
	// registration (multicast, services) to be made again.
	EventClientReregister
	// EventGIDChange: the port's GID table changed.
	EventGIDChange
	// EventWQFatal: a work queue (ibv_wq) went to error.
	EventWQFatal
)

var asyncEventNames = [...]string{"", "CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR",
	"QP_LAST_WQE_REACHED", "SRQ_LIMIT_REACHED", "PORT_ACTIVE", "PORT_ERR", "DEVICE_FATAL",
	"COMM_EST", "SQ_DRAINED", "PATH_MIG", "PATH_MIG_ERR", "SRQ_ERR", "LID_CHANGE",
	"PKEY_CHANGE", "SM_CHANGE", "CLIENT_REREGISTER", "GID_CHANGE", "WQ_FATAL"}

// String returns the verbs name of the event.
func (t AsyncEventType) String() string { return names.Of(t, asyncEventNames[:], "AsyncEventType") }

// AsyncEvent is one asynchronous event from a device.
type AsyncEvent struct {
	Type AsyncEventType
	// QPN, CQN, SRQN or Port identify the object, depending on Type: the
	// QPN for the QP events (QP_*, COMM_EST, SQ_DRAINED, PATH_MIG*), the CQN
	// for CQ_ERR, the SRQN for SRQ_ERR and SRQ_LIMIT_REACHED, the port for
	// the port events (PORT_*, LID_CHANGE, PKEY_CHANGE, SM_CHANGE,
	// CLIENT_REREGISTER, GID_CHANGE). DEVICE_FATAL and WQ_FATAL name none
	// (mlx5kit creates no ibv_wq).
	QPN  uint32
	CQN  uint32
	SRQN uint32
	Port uint8
	// Detail is a human-readable cause when the provider has one.
	Detail string
}

// String formats the event for logs.
func (e AsyncEvent) String() string {
	s := e.Type.String()
	switch e.Type {
	case EventCQError:
		s += fmt.Sprintf(" cqn=%#x", e.CQN)
	case EventSRQLimitReached, EventSRQError:
		s += fmt.Sprintf(" srqn=%#x", e.SRQN)
	case EventPortActive, EventPortError, EventLIDChange, EventPKeyChange, EventSMChange,
		EventClientReregister, EventGIDChange:
		s += fmt.Sprintf(" port=%d", e.Port)
	case EventDeviceFatal, EventWQFatal:
	default:
		s += fmt.Sprintf(" qpn=%#x", e.QPN)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}
