package ctx

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/internal/fieldcheck"
)

// Widths of the verbs and PRM fields that attributes go into. A value
// outside them is refused with ErrInvalidArgument where it enters (Modify, CreateAddressHandle, CreateCompletionQueue), never masked.
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
	// MaxPSN is the largest packet sequence number: 24 bits.
	MaxPSN = 1<<24 - 1
	// MaxTimerCode is the largest RNR timer and local ACK timeout code: 5
	// bits (min_rnr_timer, timeout).
	MaxTimerCode = 31
	// MaxRetry is the largest transport and RNR retry count: 3 bits
	// (retry_cnt, rnr_retry; an RNR retry of 7 retries for ever).
	MaxRetry = 7
	// MaxCQDepth is the largest CompletionQueueConfig.Depth: the ring of
	// Depth+1 entries rounded up to a power of two holds at most 2^24 CQEs
	// (the consumer index of the CQ doorbell record has 24 bits; rdma-core's
	// mlx5 provider refuses more).
	MaxCQDepth = 1<<24 - 1
)

// field is a value and the range of the field it goes into.
type field = fieldcheck.Field

func mkField(name string, v, min, max uint64) field {
	return field{Name: name, Value: v, Min: min, Max: max}
}

// checkFields returns an error naming the first field outside its range,
// the value and the range; it wraps ErrInvalidArgument.
func checkFields(fields ...field) error { return fieldcheck.Check(ErrInvalidArgument, fields...) }

// validate refuses an address whose fields do not fit the fields of
// ibv_ah_attr and the address vector they go into: SL above MaxSL,
// SrcPathBits above MaxSrcPathBits, StaticRate above MaxStaticRate,
// FlowLabel above MaxFlowLabel, each named after prefix. (DLID,
// TrafficClass and HopLimit use their whole width; the port and the GID
// index are checked against the device by the provider.) The error wraps
// ErrInvalidArgument. CreateAddressHandle and QueuePair.Modify run it.
func (a AddressAttr) validate(prefix string) error {
	return checkFields(
		mkField(prefix+"SL", uint64(a.SL), 0, MaxSL),
		mkField(prefix+"SrcPathBits", uint64(a.SrcPathBits), 0, MaxSrcPathBits),
		mkField(prefix+"StaticRate", uint64(a.StaticRate), 0, MaxStaticRate),
		mkField(prefix+"FlowLabel", uint64(a.FlowLabel), 0, MaxFlowLabel),
	)
}

// validate refuses attributes whose fields do not fit the verbs and PRM
// fields they go into, whatever the transition uses: a State beyond
// QPStateError, unknown Access bits, RemoteQPN, RQPSN or SQPSN wider than
// 24 bits, MinRNRTimer or Timeout above MaxTimerCode, RetryCount or RNRRetry
// above MaxRetry, and a Path that AddressAttr.validate refuses. (PKeyIndex,
// QKey, MaxRdAtomic and MaxDestRdAtomic use their whole width; the provider
// checks them against the device. PathMTU is checked per QP type with the
// transition, as mlx5_ib checks it, with EINVAL.) The error wraps
// ErrInvalidArgument. QueuePair.Modify runs it.
func (a QPAttr) validate() error {
	if a.Access&^accessAll != 0 {
		return fmt.Errorf("access %v has unknown bits: %w", a.Access, ErrInvalidArgument)
	}
	if err := checkFields(
		mkField("State", uint64(a.State), 0, uint64(QPStateError)),
		mkField("RemoteQPN", uint64(a.RemoteQPN), 0, MaxQPN),
		mkField("RQPSN", uint64(a.RQPSN), 0, MaxPSN),
		mkField("SQPSN", uint64(a.SQPSN), 0, MaxPSN),
		mkField("MinRNRTimer", uint64(a.MinRNRTimer), 0, MaxTimerCode),
		mkField("Timeout", uint64(a.Timeout), 0, MaxTimerCode),
		mkField("RetryCount", uint64(a.RetryCount), 0, MaxRetry),
		mkField("RNRRetry", uint64(a.RNRRetry), 0, MaxRetry),
	); err != nil {
		return err
	}
	return a.Path.validate("Path.")
}

// checkRoCESL refuses an SL above MaxRoCESL on an Ethernet port, where the
// SL is the 3-bit VLAN priority and the provider would keep sl & 7. The
// port is queried only for such an SL; a port that cannot be queried is
// left to the provider to refuse. query is the provider's QueryPort, so
// that a caller holding the tree lock can check.
func checkRoCESL(query func(uint8) (PortAttr, error), port, sl uint8, name string) error {
	if sl <= MaxRoCESL {
		return nil
	}
	pa, err := query(port)
	if err != nil || pa.LinkLayer != LinkLayerEthernet {
		return nil
	}
	return fmt.Errorf("%s %d out of range 0..%d on RoCE port %d (the VLAN priority): %w", name, sl, MaxRoCESL, port, ErrInvalidArgument)
}
