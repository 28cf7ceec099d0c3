// Package addrvec encodes an address vector (struct mlx5_wqe_av) from the
// fields of a path, as rdma-core's mlx5_create_ah does, without a device:
// tests and the model build the vectors a UD or DC WQE carries with it.
// Programs take theirs from an address handle (ctx.AddressHandle.AV).
package addrvec

import (
	"encoding/binary"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// Validate refuses an address whose fields do not fit the address vector
// AV writes: SL above 15 (above 7 on RoCE, where it is the 3-bit priority),
// StaticRate above 15 (the 4-bit mlx5 rate code), SrcPathBits above 127,
// FlowLabel above 2^20-1. The error names the field, its value and the
// range, and wraps ctx.ErrInvalidArgument.
func (a Address) Validate() error {
	maxSL := uint32(prm.AVSLMask)
	if a.RoCE {
		maxSL = prm.AVRoCESLMask
	}
	for _, f := range [...]struct {
		name   string
		v, max uint32
	}{
		{"SL", uint32(a.SL), maxSL},
		{"StaticRate", uint32(a.StaticRate), 0xff >> prm.AVStatRateShift},
		{"SrcPathBits", uint32(a.SrcPathBits), prm.AVMLIDMask},
		{"FlowLabel", a.FlowLabel, prm.AVFlowLblMask},
	} {
		if f.v > f.max {
			return fmt.Errorf("addrvec: address %s %d out of range 0..%d: %w", f.name, f.v, f.max, ctx.ErrInvalidArgument)
		}
	}
	return nil
}

// Address is a path to a remote port, the input of an address vector (what
// an address handle resolves). Build it once per destination, encode it with
// AV, and hand the result to wqebuilder.CtrlStage.DC or CtrlStage.UD for
// every WQE.
type Address struct {
	// SL is the service level (InfiniBand, 4 bits) or priority (RoCE, 3
	// bits).
	SL uint8
	// StaticRate is the mlx5 static rate code (0: the port's rate).
	StaticRate uint8

	// DLID and SrcPathBits route on InfiniBand; unused on RoCE.
	DLID        uint16
	SrcPathBits uint8

	// Global adds a GRH (always on RoCE): DGID, SGIDIndex, FlowLabel (20
	// bits), TrafficClass and HopLimit fill it.
	Global       bool
	DGID         ctx.GID
	SGIDIndex    uint8
	FlowLabel    uint32
	TrafficClass uint8
	HopLimit     uint8

	// RoCE marks an Ethernet port: RMAC is the next hop's MAC address and
	// UDPSourcePort the RoCE v2 UDP source port (rdma-core derives it from
	// the flow label, or picks one at random).
	RoCE          bool
	RMAC          [6]byte
	UDPSourcePort uint16
}

// AV encodes the address vector (struct mlx5_wqe_av) as rdma-core's
// mlx5_create_ah does: on InfiniBand stat_rate_sl is rate<<4 | SL, fl_mlid
// the source path bits, rlid the destination LID, and grh_gid_fl carries the
// GRH bit when Global; on RoCE stat_rate_sl is rate<<4 | SL<<1, rlid the UDP
// source port, rmac the next hop, and the GRH bit stays clear. The key and
// destination words (bytes 0..12) stay zero: DC and UD fill them per WQE.
// AV keeps only the bits of each field that its place holds: check an
// address built from outside input with Validate first.
func (a Address) AV() [prm.AVSize]byte {
	var av [prm.AVSize]byte
	if a.RoCE {
		av[prm.AVStatRateSL] = a.StaticRate<<prm.AVStatRateShift | (a.SL&prm.AVRoCESLMask)<<prm.AVRoCESLShift
		binary.BigEndian.PutUint16(av[prm.AVRLID:], a.UDPSourcePort)
		copy(av[prm.AVRMAC:prm.AVRMAC+prm.AVRMACSize], a.RMAC[:])
	} else {
		av[prm.AVStatRateSL] = a.StaticRate<<prm.AVStatRateShift | a.SL&prm.AVSLMask
		av[prm.AVFlMLID] = a.SrcPathBits & prm.AVMLIDMask
		binary.BigEndian.PutUint16(av[prm.AVRLID:], a.DLID)
	}
	if a.Global {
		var grh uint32
		if !a.RoCE {
			grh = prm.AVGRHBit
		}
		av[prm.AVTClass] = a.TrafficClass
		av[prm.AVHopLimit] = a.HopLimit
		binary.BigEndian.PutUint32(av[prm.AVGRHGIDFL:],
			grh|uint32(a.SGIDIndex)<<prm.AVSGIDShift|a.FlowLabel&prm.AVFlowLblMask)
		copy(av[prm.AVRGID:], a.DGID[:])
	}
	return av
}
