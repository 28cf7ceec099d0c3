package fieldcheck

// Widths of the verbs and PRM fields that attributes go into. A value
// outside them is refused with ctx.ErrInvalidArgument where it enters
// (Modify, CreateAddressHandle, CreateCompletionQueue), never masked.
const (
	// MaxSL is the largest service level: 4 bits (ibv_ah_attr.sl, the
	// stat_rate_sl byte of the address vector, dci_cfi_prio_sl of the QP
	// path).
	MaxSL = 15
	// MaxRoCESL is the largest service level on an Ethernet (RoCE) port,
	// where it is the 3-bit priority of the VLAN tag: rdma-core's
	// mlx5_create_ah and the kernel's mlx5_set_path keep sl & 7 there.
	// CreateAddressHandle and Modify check it (querying the port only for
	// an SL above it); transports check it at create.
	MaxRoCESL = 7
	// MaxSrcPathBits is the largest source path bits value: 7 bits
	// (fl_mlid of the address vector, grh_mlid of the QP path).
	MaxSrcPathBits = 127
	// MaxStaticRate is the largest ibv_rate code (IBV_RATE_1200_GBPS).
	MaxStaticRate = 24
	// MaxFlowLabel is the largest GRH flow label: 20 bits.
	MaxFlowLabel = 1<<20 - 1
	// MaxQPN is the largest QP or DCT number: 24 bits.
	MaxQPN = 1<<24 - 1
	// MaxTimerCode is the largest RNR timer and local ACK timeout code: 5
	// bits (min_rnr_timer, timeout).
	MaxTimerCode = 31
	// MaxRetry is the largest transport and RNR retry count: 3 bits
	// (retry_cnt, rnr_retry; an RNR retry of 7 retries for ever).
	MaxRetry = 7
	// MaxCQDepth is the largest ctx.CompletionQueueConfig.Depth: the ring of
	// Depth+1 entries rounded up to a power of two holds at most 2^24 CQEs
	// (the consumer index of the CQ doorbell record has 24 bits; rdma-core's
	// mlx5 provider refuses more).
	MaxCQDepth = 1<<24 - 1
)
