package wqebuilder

import (
	"encoding/binary"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// Address is a path to a remote port, the input of an address vector (what
// an address handle resolves). Build it once per destination, encode it with
// AV, and hand the result to CtrlStage.DC or CtrlStage.UD for every WQE.
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
	DGID         [16]byte
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
