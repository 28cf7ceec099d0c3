package ctx

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/internal/fieldcheck"
)

// MaxPSN is the largest packet sequence number: 24 bits. A PSN outside it
// is refused with ErrInvalidArgument where it enters (Modify, the
// transports, endpoint.Endpoint.Validate).
const MaxPSN = 1<<24 - 1

// field is a value and the range of the field it goes into.
type field = fieldcheck.Field

func mkField(name string, v, min, max uint64) field {
	return field{Name: name, Value: v, Min: min, Max: max}
}

// checkFields returns an error naming the first field outside its range,
// the value and the range; it wraps ErrInvalidArgument.
func checkFields(fields ...field) error { return fieldcheck.Check(ErrInvalidArgument, fields...) }

// validate refuses an address whose fields do not fit the fields of
// ibv_ah_attr and the address vector they go into: SL above 15,
// SrcPathBits above 127, StaticRate above 24,
// FlowLabel above 2^20-1, each named after prefix. (DLID,
// TrafficClass and HopLimit use their whole width; the port and the GID
// index are checked against the device by the provider.) The error wraps
// ErrInvalidArgument. CreateAddressHandle and QueuePair.Modify run it.
func (a AddressAttr) validate(prefix string) error {
	return checkFields(
		mkField(prefix+"SL", uint64(a.SL), 0, fieldcheck.MaxSL),
		mkField(prefix+"SrcPathBits", uint64(a.SrcPathBits), 0, fieldcheck.MaxSrcPathBits),
		mkField(prefix+"StaticRate", uint64(a.StaticRate), 0, fieldcheck.MaxStaticRate),
		mkField(prefix+"FlowLabel", uint64(a.FlowLabel), 0, fieldcheck.MaxFlowLabel),
	)
}

// validate refuses attributes whose fields do not fit the verbs and PRM
// fields they go into, whatever the transition uses: a State beyond
// QPStateError, unknown Access bits, RemoteQPN, RQPSN or SQPSN wider than
// 24 bits, MinRNRTimer or Timeout above 31, RetryCount or RNRRetry
// above 7, and a Path that AddressAttr.validate refuses. (PKeyIndex,
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
		mkField("RemoteQPN", uint64(a.RemoteQPN), 0, fieldcheck.MaxQPN),
		mkField("RQPSN", uint64(a.RQPSN), 0, MaxPSN),
		mkField("SQPSN", uint64(a.SQPSN), 0, MaxPSN),
		mkField("MinRNRTimer", uint64(a.MinRNRTimer), 0, fieldcheck.MaxTimerCode),
		mkField("Timeout", uint64(a.Timeout), 0, fieldcheck.MaxTimerCode),
		mkField("RetryCount", uint64(a.RetryCount), 0, fieldcheck.MaxRetry),
		mkField("RNRRetry", uint64(a.RNRRetry), 0, fieldcheck.MaxRetry),
	); err != nil {
		return err
	}
	return a.Path.validate("Path.")
}

// checkRoCESL refuses an SL above 7 on an Ethernet port, where the
// SL is the 3-bit VLAN priority and the provider would keep sl & 7. The
// port is queried only for such an SL; a port that cannot be queried is
// left to the provider to refuse. query is the provider's QueryPort, so
// that a caller holding the tree lock can check.
func checkRoCESL(query func(uint8) (PortAttr, error), port, sl uint8, name string) error {
	if sl <= fieldcheck.MaxRoCESL {
		return nil
	}
	pa, err := query(port)
	if err != nil || pa.LinkLayer != LinkLayerEthernet {
		return nil
	}
	return fmt.Errorf("%s %d out of range 0..%d on RoCE port %d (the VLAN priority): %w", name, sl, fieldcheck.MaxRoCESL, port, ErrInvalidArgument)
}
