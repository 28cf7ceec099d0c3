package qpstate

import (
	"fmt"
	"syscall"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// Limits are the values of a device and of a QP's port that the kernel
// checks the attributes of a modify against (CheckAttr). A zero limit is
// one the provider could not tell; CheckAttr does not check against it.
type Limits struct {
	// Ports is the number of physical ports: a port number is valid from 1
	// to Ports (rdma_is_port_valid).
	Ports uint8
	// PKeys is the length of the P_Key table mlx5_ib checks a P_Key index
	// against (its pkey_table_len, which ibv_query_device reports as
	// max_pkeys; on a RoCE port it exceeds the port's pkey_tbl_len of 1).
	PKeys int
	// GIDs is the length of the GID table of the port the address vector
	// leaves from (gid_tbl_len).
	GIDs int
	// LinkLayer is that port's: an Ethernet (RoCE) port needs a GRH in
	// every address vector.
	LinkLayer ctx.LinkLayer
	// MaxQPInitRdAtomic bounds an RC QP's MaxRdAtomic: 1 <<
	// log_max_ra_res_qp, which mlx5_ib reports as max_qp_init_rd_atom
	// (ctx.DeviceAttr.MaxQPInitRdAtomic).
	MaxQPInitRdAtomic uint32
	// MaxQPRdAtomic bounds an RC QP's MaxDestRdAtomic: 1 <<
	// log_max_ra_req_qp, reported as max_qp_rd_atom
	// (ctx.DeviceAttr.MaxQPRdAtomic).
	MaxQPRdAtomic uint32
	// MaxDCInitRdAtomic bounds a DCI's MaxRdAtomic on kernels with the DC
	// fix of validate_rd_atomic (December 2022): 1 << log_max_ra_res_dc,
	// which rdma-core reports as max_dc_init_rd_atom
	// (ctx.DeviceAttr.MaxDCInitRdAtomic). Earlier kernels bound it by
	// MaxQPInitRdAtomic; CheckAttr applies the lower of the two.
	MaxDCInitRdAtomic uint32
}

// LimitsOf returns the limits a provider reports in its device and port
// attributes. PKeys is the port's P_Key table length: the hardware provider
// replaces it by the device's max_pkeys, which is what mlx5_ib checks.
func LimitsOf(dev ctx.DeviceAttr, port ctx.PortAttr) Limits {
	return Limits{
		Ports:             dev.PhysPortCount,
		PKeys:             port.PKeyTableLen,
		GIDs:              port.GIDTableLen,
		LinkLayer:         port.LinkLayer,
		MaxQPInitRdAtomic: dev.MaxQPInitRdAtomic,
		MaxQPRdAtomic:     dev.MaxQPRdAtomic,
		MaxDCInitRdAtomic: dev.MaxDCInitRdAtomic,
	}
}

// Kernel sources of the attribute checks.
const (
	srcUverbs   = "drivers/infiniband/core/uverbs_cmd.c modify_qp"
	srcPort     = srcUverbs + " (rdma_is_port_valid); hw/mlx5/qp.c mlx5_ib_modify_qp, mlx5_ib_modify_dct"
	srcAVPort   = srcUverbs + " (the AV's port at RTR is the QP's)"
	srcAH       = "drivers/infiniband/core/verbs.c rdma_check_ah_attr; hw/mlx5/qp.c mlx5_set_path"
	srcSGID     = "drivers/infiniband/core/cache.c rdma_get_gid_attr (from verbs.c _ib_modify_qp); hw/mlx5/qp.c mlx5_set_path"
	srcPKey     = "drivers/infiniband/hw/mlx5/qp.c mlx5_ib_modify_qp"
	srcRdAtomic = "drivers/infiniband/hw/mlx5/qp.c validate_rd_atomic"
	srcMTU      = "drivers/infiniband/hw/mlx5/qp.c __mlx5_ib_modify_qp"
	srcRate     = "drivers/infiniband/hw/mlx5/qp.c mlx5r_ib_rate (from mlx5_set_path)"
)

// Static rate codes (enum ib_rate, the same numbers as libibverbs' enum
// ibv_rate) that mlx5_ib's mlx5r_ib_rate takes: 0, IB_RATE_PORT_CURRENT,
// and IB_RATE_2_5_GBPS (2) to IB_RATE_1600_GBPS (25), the highest since
// "RDMA/mlx5: Add support for 1600_8x lane speed" (Linux 6.19). It
// refuses 1 and anything above with EINVAL. Earlier kernels stop at
// IB_RATE_800_GBPS (23) or, before that rate was added in 2023, at
// IB_RATE_600_GBPS (22). libibverbs' enum ibv_rate stops at 24
// (fieldcheck.MaxStaticRate, above which ctx refuses a rate itself): 25
// reaches the kernel only through a raw command.
const (
	MinKernelStaticRate = 2
	MaxKernelStaticRate = 25
)

// StaticRateValid reports whether mlx5r_ib_rate takes the static rate r
// (0, or MinKernelStaticRate to MaxKernelStaticRate). The kernel checks it when it
// writes a QP's path (mlx5_set_path) and, since "RDMA/mlx5: Handle errors
// returned from mlx5r_ib_rate()" (Linux 6.14 and the stable kernels of
// March 2025), when it creates an address handle (create_ib_ah). libmlx5
// asks the kernel for an address handle on RoCE ports only; it builds an
// InfiniBand one itself, mapping a rate it has no code for to the port's.
func StaticRateValid(r uint8) bool {
	return r == 0 || r >= MinKernelStaticRate && r <= MaxKernelStaticRate
}

// StaticRateKept is the static rate QUERY_QP reads back for a rate r that
// StaticRateValid takes: mlx5r_ib_rate writes 0 (the port's rate) into the
// QP context for IB_RATE_800_GBPS (23, since Linux 6.14) and
// IB_RATE_1600_GBPS (25), which have no mlx5 rate code, and the code of r
// otherwise, which mlx5_to_ib_rate_map turns back into r on a device whose
// stat_rate_support has it (a device without it gets the next lower rate
// it has; the model has every rate).
func StaticRateKept(r uint8) uint8 {
	if r == 23 || r == 25 {
		return 0
	}
	return r
}

// AttrError is an attribute value the kernel refuses at modify: which
// attribute, its value, the range the kernel accepts and where the limit
// comes from, and the error number. errors.Is matches the errno and
// ctx.ErrInvalidArgument.
type AttrError struct {
	Type     ctx.QPType
	From, To ctx.QPState
	// Attr names the ctx.QPAttr field, e.g. "MaxRdAtomic" or
	// "Path.SGIDIndex".
	Attr string
	// Value is the value given (a flag as 0 or 1).
	Value uint64
	// Min and Max are the values the kernel accepts, both included.
	Min, Max uint64
	// Limit says what bounds the value, e.g. "max_qp_init_rd_atom (1 <<
	// log_max_ra_res_qp)".
	Limit string
	// Errno is what ibv_modify_qp returns for it.
	Errno syscall.Errno
	// Source names the kernel check that refuses it.
	Source string
}

var _ error = (*AttrError)(nil)

// Reason describes the refusal without the QP and the errno: "MaxRdAtomic
// 17 above 16, max_qp_init_rd_atom (1 << log_max_ra_res_qp) (<source>)".
func (e *AttrError) Reason() string {
	var what string
	switch {
	case e.Min == e.Max:
		what = fmt.Sprintf("%s %d, must be %d", e.Attr, e.Value, e.Min)
	case e.Value > e.Max && e.Min == 0:
		what = fmt.Sprintf("%s %d above %d", e.Attr, e.Value, e.Max)
	default:
		what = fmt.Sprintf("%s %d outside %d..%d", e.Attr, e.Value, e.Min, e.Max)
	}
	return fmt.Sprintf("%s, %s (%s)", what, e.Limit, e.Source)
}

// Error formats as "DCI RTR→RTS: <reason>: EINVAL".
func (e *AttrError) Error() string {
	return fmt.Sprintf("%v %v→%v: %s: %s", e.Type, e.From, e.To, e.Reason(), errnoName(e.Errno))
}

// Unwrap returns the errno and ctx.ErrInvalidArgument.
func (e *AttrError) Unwrap() []error { return []error{e.Errno, ctx.ErrInvalidArgument} }

// CheckPorts returns the *AttrError for the first of the checks CheckAttr
// makes that the uverbs core's modify_qp makes itself, before it refuses a
// controlled Q_Key (bit 31 of QKey) with EPERM without CAP_NET_RAW and
// before the core and mlx5_ib check the rest: Port, Path.Port and, at RTR,
// Path.Port against qpPort. A caller that checks the Q_Key runs CheckPorts,
// then the Q_Key, then CheckAttr, to refuse in the kernel's order.
func CheckPorts(t ctx.QPType, from, to ctx.QPState, m Mask, a *ctx.QPAttr, qpPort uint8, l Limits) error {
	fail := func(attr string, v, lo, hi uint64, limit, src string) error {
		return &AttrError{Type: t, From: from, To: to, Attr: attr, Value: v, Min: lo, Max: hi,
			Limit: limit, Errno: syscall.EINVAL, Source: src}
	}
	ports := fmt.Sprintf("the device's %d port(s)", l.Ports)
	if m&Port != 0 && l.Ports != 0 && (a.Port == 0 || a.Port > l.Ports) {
		return fail("Port", uint64(a.Port), 1, uint64(l.Ports), ports, srcPort)
	}
	if m&AV != 0 {
		p := a.Path
		if l.Ports != 0 && (p.Port == 0 || p.Port > l.Ports) {
			return fail("Path.Port", uint64(p.Port), 1, uint64(l.Ports), ports, srcUverbs)
		}
		if to == ctx.QPStateRTR && qpPort != 0 && p.Port != qpPort {
			return fail("Path.Port", uint64(p.Port), uint64(qpPort), uint64(qpPort),
				"the port the QP was brought to INIT on", srcAVPort)
		}
	}
	return nil
}

// CheckAttr returns nil when the kernel accepts the attribute values of a
// modify of a QP of type t from one state to another with mask m (the mask
// Derive returns), or the *AttrError for the first value it refuses, in
// the order the kernel checks them. qpPort is the port the QP was brought
// to INIT on (0 before). Every refusal is EINVAL:
//
//   - Port (mask PORT, every type): 1 to Ports (uverbs modify_qp, then
//     mlx5_ib_modify_qp or mlx5_ib_modify_dct).
//   - Path (mask AV: RC and DCT at RTR): Path.Port 1 to Ports and, at RTR,
//     the QP's port (uverbs modify_qp); on an Ethernet port a GRH
//     (rdma_check_ah_attr); with a GRH, Path.SGIDIndex below GIDs
//     (rdma_get_gid_attr, and mlx5_set_path again). An index inside the
//     table whose entry is empty gets ENODATA from the kernel, which this
//     table-length check cannot see.
//   - PKeyIndex (mask PKEY_INDEX: RC, UD, DCI): below PKeys
//     (mlx5_ib_modify_qp; mlx5_ib_modify_dct does not check a DCT's).
//   - MaxRdAtomic (mask MAX_QP_RD_ATOMIC: RC and DCI at RTS) up to
//     MaxQPInitRdAtomic, for a DCI up to the lower of MaxDCInitRdAtomic and
//     MaxQPInitRdAtomic; MaxDestRdAtomic (mask MAX_DEST_RD_ATOMIC: RC at
//     RTR) up to MaxQPRdAtomic (validate_rd_atomic).
//   - PathMTU (mask PATH_MTU: RC and DCI at RTR): MTU256 to MTU4096
//     (__mlx5_ib_modify_qp). It is not checked against the port's active
//     MTU, and a DCT's is not checked at all.
//   - Path.StaticRate (mask AV, but a DCT's): 0, or MinKernelStaticRate to
//     MaxKernelStaticRate (StaticRateValid: mlx5r_ib_rate, from mlx5_set_path,
//     which __mlx5_ib_modify_qp runs after the path MTU check);
//     mlx5_ib_modify_dct does not look at a DCT's.
//
// What the kernel does not check, this does not either: MinRNRTimer,
// Timeout, RetryCount and RNRRetry are written into fields of 5 and 3 bits
// and lose their high bits; the PSNs are masked to 24 bits.
func CheckAttr(t ctx.QPType, from, to ctx.QPState, m Mask, a *ctx.QPAttr, qpPort uint8, l Limits) error {
	fail := func(attr string, v, lo, hi uint64, limit, src string) error {
		return &AttrError{Type: t, From: from, To: to, Attr: attr, Value: v, Min: lo, Max: hi,
			Limit: limit, Errno: syscall.EINVAL, Source: src}
	}
	if err := CheckPorts(t, from, to, m, a, qpPort, l); err != nil {
		return err
	}
	if m&AV != 0 {
		p := a.Path
		if l.LinkLayer == ctx.LinkLayerEthernet && !p.GlobalRoute {
			return fail("Path.GlobalRoute", 0, 1, 1, "a RoCE port's address vector needs a GRH", srcAH)
		}
		if p.GlobalRoute && l.GIDs != 0 && int(p.SGIDIndex) >= l.GIDs {
			return fail("Path.SGIDIndex", uint64(p.SGIDIndex), 0, uint64(l.GIDs-1),
				fmt.Sprintf("the port's GID table of %d entries", l.GIDs), srcSGID)
		}
	}
	if t == ctx.QPTypeDCT {
		// mlx5_ib_modify_dct checks the port and nothing else of the
		// attributes.
		return nil
	}
	if m&PKeyIndex != 0 && l.PKeys != 0 && int(a.PKeyIndex) >= l.PKeys {
		return fail("PKeyIndex", uint64(a.PKeyIndex), 0, uint64(l.PKeys-1),
			fmt.Sprintf("the P_Key table of %d entries", l.PKeys), srcPKey)
	}
	if m&MaxQPRdAtomic != 0 {
		limit, what := l.MaxQPInitRdAtomic, "max_qp_init_rd_atom (1 << log_max_ra_res_qp)"
		if t == ctx.QPTypeDCI && l.MaxDCInitRdAtomic != 0 && (limit == 0 || l.MaxDCInitRdAtomic <= limit) {
			limit, what = l.MaxDCInitRdAtomic, "max_dc_init_rd_atom (1 << log_max_ra_res_dc)"
		} else if t == ctx.QPTypeDCI {
			what += ", which kernels before the DC fix of validate_rd_atomic apply to a DCI"
		}
		if limit != 0 && uint32(a.MaxRdAtomic) > limit {
			return fail("MaxRdAtomic", uint64(a.MaxRdAtomic), 0, uint64(limit), what, srcRdAtomic)
		}
	}
	if m&MaxDestRdAtomic != 0 && l.MaxQPRdAtomic != 0 && uint32(a.MaxDestRdAtomic) > l.MaxQPRdAtomic {
		return fail("MaxDestRdAtomic", uint64(a.MaxDestRdAtomic), 0, uint64(l.MaxQPRdAtomic),
			"max_qp_rd_atom (1 << log_max_ra_req_qp)", srcRdAtomic)
	}
	if m&PathMTU != 0 && (a.PathMTU < ctx.MTU256 || a.PathMTU > ctx.MTU4096) {
		return fail("PathMTU", uint64(a.PathMTU), uint64(ctx.MTU256), uint64(ctx.MTU4096),
			"IB_MTU_256 to IB_MTU_4096", srcMTU)
	}
	if m&AV != 0 && !StaticRateValid(a.Path.StaticRate) {
		return fail("Path.StaticRate", uint64(a.Path.StaticRate), MinKernelStaticRate, MaxKernelStaticRate,
			"IB_RATE_2_5_GBPS to IB_RATE_1600_GBPS, or 0 for the port's rate", srcRate)
	}
	return nil
}
