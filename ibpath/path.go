package ibpath

import (
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/fieldcheck"
)

// Path is everything needed to connect a queue pair to a remote one, or to
// address a datagram, seen from the local side: "S" fields are local, "D"
// fields remote. ModifyToInit, ModifyToRTR and ModifyToRTS take a QP through
// the connection states with it, and AddressAttr turns it into the address
// of an address handle.
//
// Field by field (verbs name in brackets):
//
//	Port            qp_attr.port_num, ah_attr.port_num
//	PKeyIndex       qp_attr.pkey_index
//	QKey            qp_attr.qkey (UD)
//	MTU             qp_attr.path_mtu
//	RetryCount      qp_attr.retry_cnt
//	RNRRetry        qp_attr.rnr_retry
//	MinRNRTimer     qp_attr.min_rnr_timer
//	Timeout         qp_attr.timeout (local ACK timeout)
//	SQPN, DQPN      the local QPN; qp_attr.dest_qp_num
//	SQPSN, DQPSN    qp_attr.sq_psn; qp_attr.rq_psn
//	MaxRdAtomic     qp_attr.max_rd_atomic
//	MaxDestRdAtomic qp_attr.max_dest_rd_atomic
//	SLID, DLID      the local LID; ah_attr.dlid
//	SrcPathBits     ah_attr.src_path_bits
//	SL              ah_attr.sl
//	StaticRate      ah_attr.static_rate
//	GlobalRoute     ah_attr.is_global
//	SGID, SGIDIndex the local GID; ah_attr.grh.sgid_index
//	DGID            ah_attr.grh.dgid
//	FlowLabel       ah_attr.grh.flow_label
//	TrafficClass    ah_attr.grh.traffic_class
//	HopLimit        ah_attr.grh.hop_limit
//
// Path is a plain value: copy it, change a field, keep the old one.
type Path struct {
	Port      uint8
	PKeyIndex uint16
	QKey      uint32
	MTU       ctx.MTU

	RetryCount  uint8
	RNRRetry    uint8
	MinRNRTimer uint8
	Timeout     uint8

	SQPN, DQPN   uint32
	SQPSN, DQPSN uint32

	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8

	SLID, DLID  uint16
	SrcPathBits uint8
	SL          uint8
	StaticRate  uint8

	GlobalRoute  bool
	SGID, DGID   ctx.GID
	SGIDIndex    uint8
	FlowLabel    uint32
	TrafficClass uint8
	HopLimit     uint8
}

// Limits of the fields.
const (
	maxQPN      = 1<<24 - 1
	maxPSN      = 1<<24 - 1
	maxRetry    = 7
	maxTimer    = 31
	maxSL       = 15
	maxFlow     = 1<<20 - 1
	defaultHops = 64
)

// Default returns a path with the values most RC connections use: port 1,
// MTU 1024, 7 transport and RNR retries (7 means retry for ever for RNR),
// RNR timer 12 (0.64 ms), ACK timeout 14 (about 67 ms), one outstanding RDMA
// read or atomic each way, hop limit 64. The addresses and QPNs are left for
// Local and Connect.
func Default() Path {
	return Path{
		Port:            1,
		MTU:             ctx.MTU1024,
		RetryCount:      7,
		RNRRetry:        7,
		MinRNRTimer:     12,
		Timeout:         14,
		MaxRdAtomic:     1,
		MaxDestRdAtomic: 1,
		HopLimit:        defaultHops,
	}
}

// Local fills the local half of p from a port of c: Port, SLID, the GID
// that gid selects (SGID, SGIDIndex: unset, one is chosen with
// ctx.Context.ChooseGID, on RoCE a RoCE v2 GID, IPv4-mapped first;
// ctx.GIDIndex(i) names entry i), the port's active MTU when it is lower
// than p.MTU (or p.MTU is unset), and GlobalRoute on an Ethernet (RoCE) port,
// where every packet carries a GRH. On InfiniBand without a GRH a missing
// GID is no error: the SGID stays zero.
func Local(c *ctx.Context, p Path, port uint8, gid ctx.GIDSelector) (Path, error) {
	op := fmt.Sprintf("ibpath: local port %d", port)
	if c == nil {
		return p, fmt.Errorf("%s: nil context: %w", op, ctx.ErrInvalidArgument)
	}
	if port == 0 {
		port = 1
	}
	pa, err := c.QueryPort(port)
	if err != nil {
		return p, fmt.Errorf("%s: %w", op, err)
	}
	e, err := c.ChooseGID(port, gid)
	if err != nil {
		if !errors.Is(err, ctx.ErrNotFound) || pa.LinkLayer == ctx.LinkLayerEthernet || p.GlobalRoute {
			return p, fmt.Errorf("%s: GID %v: %w", op, gid, err)
		}
		i, _ := gid.Index()
		e = ctx.GIDEntry{Index: int(i)}
	}
	p.Port = port
	p.SLID = pa.LID
	p.SGID, p.SGIDIndex = e.GID, uint8(e.Index)
	if pa.ActiveMTU.Bytes() != 0 && (p.MTU.Bytes() == 0 || pa.ActiveMTU < p.MTU) {
		p.MTU = pa.ActiveMTU
	}
	if pa.LinkLayer == ctx.LinkLayerEthernet {
		p.GlobalRoute = true
	}
	return p, nil
}

// Reverse returns the path seen from the other end: the local and remote
// QPNs, PSNs, LIDs and GIDs swap.
func (p Path) Reverse() Path {
	p.SQPN, p.DQPN = p.DQPN, p.SQPN
	p.SQPSN, p.DQPSN = p.DQPSN, p.SQPSN
	p.SLID, p.DLID = p.DLID, p.SLID
	p.SGID, p.DGID = p.DGID, p.SGID
	p.MaxRdAtomic, p.MaxDestRdAtomic = p.MaxDestRdAtomic, p.MaxRdAtomic
	return p
}

// Endpoint returns what the peer needs to connect to the local queue this
// path describes (its SQPN, SQPSN, SLID, SGID, MTU), as an endpoint of the
// given transport. Regions, qkey and DC fields are the caller's to add.
func (p Path) Endpoint(t endpoint.Transport) endpoint.Endpoint {
	return endpoint.Endpoint{
		Transport: t,
		QPN:       p.SQPN,
		LID:       p.SLID,
		GID:       p.SGID,
		GIDIndex:  p.SGIDIndex,
		PSN:       p.SQPSN,
		MTU:       p.MTU,
	}
}

// Connect fills the remote half of p from the endpoint a peer sent: DQPN
// (a DC peer's DCT number), DQPSN, DLID and DGID, and lowers MTU to the peer's. A peer with no LID (a
// RoCE peer) needs a GRH: GlobalRoute is set, and the peer must have
// sent a GID. On InfiniBand (a path whose SLID is set, as Local sets it
// from an InfiniBand port; a RoCE port has no LID) a peer with no LID is
// refused: the subnet forwards every packet by its DLID, GRH or not, and
// DLID 0 reaches no port. The endpoint is untrusted input: it is validated
// first, and on error p is returned unchanged.
func (p Path) Connect(remote endpoint.Endpoint) (Path, error) {
	const op = "ibpath: connect"
	if err := remote.Validate(); err != nil {
		return p, fmt.Errorf("%s: remote endpoint: %w", op, err)
	}
	q := p
	q.DQPN = remote.QPN
	if remote.Transport == endpoint.TransportDC {
		q.DQPN = remote.DCTNumber
	}
	q.DQPSN = remote.PSN
	q.DLID = remote.LID
	q.DGID = remote.GID
	if rm := remote.MTU; q.MTU.Bytes() == 0 || rm < q.MTU {
		q.MTU = rm
	}
	if remote.LID == 0 {
		if p.SLID != 0 {
			return p, fmt.Errorf("%s: peer %v has no LID, which addresses a port on InfiniBand (local LID %d): %w", op, remote, p.SLID, ctx.ErrInvalidArgument)
		}
		q.GlobalRoute = true
	}
	if q.GlobalRoute && q.DGID.IsZero() {
		return p, fmt.Errorf("%s: peer %v needs a GRH but sent no GID: %w", op, remote, ctx.ErrInvalidArgument)
	}
	if !q.GlobalRoute && q.DLID == 0 {
		return p, fmt.Errorf("%s: peer %v has neither LID nor GID: %w", op, remote, ctx.ErrInvalidArgument)
	}
	return q, nil
}

// Validate checks every field against its range: 24-bit QPNs and PSNs,
// retry counts up to 7, timer codes up to 31, SL up to 15, 7 source path
// bits, an ibv_rate code up to 24, a 20-bit flow label, and a valid MTU
// when one is set. The error wraps ctx.ErrInvalidArgument.
func (p Path) Validate() error {
	check := func(name string, v, max uint64) error {
		if v > max {
			return fmt.Errorf("ibpath: %s %d out of range (0..%d): %w", name, v, max, ctx.ErrInvalidArgument)
		}
		return nil
	}
	for _, c := range []struct {
		name string
		v    uint64
		max  uint64
	}{
		{"SQPN", uint64(p.SQPN), maxQPN},
		{"DQPN", uint64(p.DQPN), maxQPN},
		{"SQPSN", uint64(p.SQPSN), maxPSN},
		{"DQPSN", uint64(p.DQPSN), maxPSN},
		{"retry count", uint64(p.RetryCount), maxRetry},
		{"RNR retry", uint64(p.RNRRetry), maxRetry},
		{"min RNR timer", uint64(p.MinRNRTimer), maxTimer},
		{"timeout", uint64(p.Timeout), maxTimer},
		{"SL", uint64(p.SL), maxSL},
		{"source path bits", uint64(p.SrcPathBits), fieldcheck.MaxSrcPathBits},
		{"rate", uint64(p.StaticRate), fieldcheck.MaxStaticRate},
		{"flow label", uint64(p.FlowLabel), maxFlow},
	} {
		if err := check(c.name, c.v, c.max); err != nil {
			return err
		}
	}
	if p.MTU != 0 && p.MTU.Bytes() == 0 {
		return fmt.Errorf("ibpath: MTU %v: %w", p.MTU, ctx.ErrInvalidArgument)
	}
	return nil
}

// addressAttr returns the address half of the path, what an address handle
// or the RTR transition needs to reach the remote port.
func (p Path) addressAttr() ctx.AddressAttr {
	a := ctx.AddressAttr{
		Port:        p.port(),
		DLID:        p.DLID,
		SL:          p.SL,
		SrcPathBits: p.SrcPathBits,
		StaticRate:  p.StaticRate,
		GlobalRoute: p.GlobalRoute,
	}
	if p.GlobalRoute {
		a.DGID = p.DGID
		a.SGIDIndex = p.SGIDIndex
		a.FlowLabel = p.FlowLabel
		a.TrafficClass = p.TrafficClass
		a.HopLimit = p.HopLimit
	}
	return a
}

func (p Path) port() uint8 {
	if p.Port == 0 {
		return 1
	}
	return p.Port
}

// initAttr returns the RESET→INIT attributes: port, pkey index, the access
// remote peers get (RC, DCT) and the qkey (UD).
func (p Path) initAttr(access ctx.Access) ctx.QPAttr {
	return ctx.QPAttr{State: ctx.QPStateInit, Port: p.port(), PKeyIndex: p.PKeyIndex, Access: access, QKey: p.QKey}
}

// rtrAttr returns the INIT→RTR attributes: the remote QPN and its first
// PSN, the address, the MTU, the responder resources and the RNR timer.
func (p Path) rtrAttr() ctx.QPAttr {
	return ctx.QPAttr{
		State:           ctx.QPStateRTR,
		Port:            p.port(),
		RemoteQPN:       p.DQPN,
		Path:            p.addressAttr(),
		PathMTU:         p.MTU,
		RQPSN:           p.DQPSN,
		MaxDestRdAtomic: p.MaxDestRdAtomic,
		MinRNRTimer:     p.MinRNRTimer,
	}
}

// rtsAttr returns the RTR→RTS attributes: the first send PSN, the ACK
// timeout, the retry counts and the outstanding reads and atomics.
func (p Path) rtsAttr() ctx.QPAttr {
	return ctx.QPAttr{
		State:       ctx.QPStateRTS,
		Port:        p.port(),
		SQPSN:       p.SQPSN,
		Timeout:     p.Timeout,
		RetryCount:  p.RetryCount,
		RNRRetry:    p.RNRRetry,
		MaxRdAtomic: p.MaxRdAtomic,
	}
}

// ModifyToInit moves qp from RESET to INIT with p's port, pkey index and
// qkey, granting access to remote peers. The path is validated first; on
// error the QP is unchanged.
func ModifyToInit(qp *ctx.QueuePair, p Path, access ctx.Access) error {
	if qp == nil {
		return fmt.Errorf("ibpath: modify QP to INIT: nil queue pair: %w", ctx.ErrInvalidArgument)
	}
	if err := p.Validate(); err != nil {
		return err
	}
	return qp.Modify(p.initAttr(access))
}

// ModifyToRTR moves qp from INIT to RTR towards p's remote end. The path
// is validated first (an RC QP also needs DQPN and an MTU); on error the QP
// is unchanged.
func ModifyToRTR(qp *ctx.QueuePair, p Path) error {
	if qp == nil {
		return fmt.Errorf("ibpath: modify QP to RTR: nil queue pair: %w", ctx.ErrInvalidArgument)
	}
	if err := p.Validate(); err != nil {
		return err
	}
	if qp.Type() != ctx.QPTypeUD && p.MTU == 0 {
		return fmt.Errorf("ibpath: modify %v QP 0x%x to RTR: no MTU: %w", qp.Type(), qp.QPN(), ctx.ErrInvalidArgument)
	}
	if qp.Type() == ctx.QPTypeRC && p.DQPN == 0 {
		return fmt.Errorf("ibpath: modify RC QP 0x%x to RTR: no remote QPN: %w", qp.QPN(), ctx.ErrInvalidArgument)
	}
	return qp.Modify(p.rtrAttr())
}

// ModifyToRTS moves qp from RTR to RTS with p's send PSN, timeout and
// retry counts. The path is validated first; on error the QP is unchanged.
func ModifyToRTS(qp *ctx.QueuePair, p Path) error {
	if qp == nil {
		return fmt.Errorf("ibpath: modify QP to RTS: nil queue pair: %w", ctx.ErrInvalidArgument)
	}
	if err := p.Validate(); err != nil {
		return err
	}
	return qp.Modify(p.rtsAttr())
}

// ModifyToConnected runs ModifyToInit, ModifyToRTR and ModifyToRTS in turn
// from RESET (a DCT stops at RTR, its final state).
func ModifyToConnected(qp *ctx.QueuePair, p Path, access ctx.Access) error {
	if err := ModifyToInit(qp, p, access); err != nil {
		return err
	}
	if err := ModifyToRTR(qp, p); err != nil {
		return err
	}
	if qp.Type() == ctx.QPTypeDCT {
		return nil
	}
	return ModifyToRTS(qp, p)
}
