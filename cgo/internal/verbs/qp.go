//go:build cgo && linux

package verbs

/*
#include "mlx5kit_verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
)

// QueuePair is a struct ibv_qp created with mlx5dv_create_qp (RC, UD, DCI
// or DCT) whose rings are handed to the data plane with mlx5dv_init_obj.
type QueuePair struct {
	pd    *ProtectionDomain
	qp    *C.struct_ibv_qp
	dom   dedicatedDomain
	typ   ctx.QPType
	desc  descriptor.QP
	state ctx.QPState
	// port is the port given at INIT (0 before): Modify applies it when
	// a later transition names none.
	port   uint8
	closed bool
}

// qpParams is what createQP needs; the probe uses it with bare C objects.
type qpParams struct {
	typ        ctx.QPType
	send, recv *C.struct_ibv_cq
	srq        *C.struct_ibv_srq
	// caps are passed to rdma-core as they are (CreateQueuePair passes
	// sqsize.Request's).
	caps ctx.QueuePairCaps
	// ops are the send operations the QP is created for
	// (IBV_QP_INIT_ATTR_SEND_OPS_FLAGS), which rdma-core sizes each send
	// WQE for. A DCT has no send queue and takes none.
	ops          sqsize.Ops
	dcKey        uint64
	scatterToCQE bool
}

// dedicatedDomain is a thread domain and the parent domain over a PD that
// a QP with a send queue is created through, so that its BlueFlame
// register is its own: without one, rdma-core hands the first QPs dedicated
// registers and later ones registers shared between QPs (and takes a lock
// around them), which a lock-free data plane cannot do. A device has a
// limited number of such registers; past them a QP is created on the plain
// PD and rings its register with doorbells only (see CreateQueuePair).
type dedicatedDomain struct {
	td  *C.struct_ibv_td
	pdd *C.struct_ibv_pd // the parent domain (a struct ibv_pd to the verbs)
	// ext is the parent domain's allocator: the QP's rings and doorbell
	// record (extalloc.go).
	ext extDomain
}

func newDedicatedDomain(c *C.struct_ibv_context, pd *C.struct_ibv_pd) (dedicatedDomain, error) {
	td, errno := C.mk_alloc_td(c)
	if td == nil {
		return dedicatedDomain{}, ptrError("ibv_alloc_td", "dedicated BlueFlame register for a QP", errno)
	}
	ext, err := newExtDomain(c, pd, td, "")
	if err != nil {
		C.ibv_dealloc_td(td)
		return dedicatedDomain{}, err
	}
	return dedicatedDomain{td: td, pdd: ext.pdd, ext: ext}, nil
}

// release frees the parent domain, then the thread domain, and unmaps the
// QP's memory; the QP created through them must be destroyed first, and
// nothing may reach its memory (a QP that failed to be created, a probe's).
// A closed QP retires its domain instead (extalloc.go).
func (dd *dedicatedDomain) release() error {
	if dd.pdd != nil {
		if err := dd.ext.abandon(); err != nil {
			return err
		}
		dd.pdd = nil
	}
	if dd.td != nil {
		if ret, errno := C.ibv_dealloc_td(dd.td); ret != 0 {
			return retError("ibv_dealloc_td", "", int(ret), errno)
		}
		dd.td = nil
	}
	return nil
}

// createQP creates a QP through mlx5dv_create_qp. RC and UD go through the
// same path as ibv_create_qp_ex (mlx5dv_create_qp is ibv_create_qp_ex with
// the mlx5 attributes), which is what lets scatter-to-CQE be switched off
// per QP. It returns the capabilities rdma-core granted (max_inline_data
// and the depths are rounded up).
func createQP(c *C.struct_ibv_context, pd *C.struct_ibv_pd, p qpParams) (*C.struct_ibv_qp, C.struct_ibv_qp_cap, error) {
	var ia C.struct_ibv_qp_init_attr_ex
	var dv C.struct_mlx5dv_qp_init_attr
	if err := fillCreateAttr(pd, p, &ia, &dv); err != nil {
		return nil, ia.cap, err
	}
	asked := ia.cap // what rdma-core is given: none for a DCT, no receive queue for a DCI
	qp, errno := C.mlx5dv_create_qp(c, &ia, &dv)
	if qp == nil {
		return nil, ia.cap, ptrError("mlx5dv_create_qp", fmt.Sprintf("%v QP (send %d×%d SGE inline %d, send ops %#x, recv %d×%d SGE, SRQ %v)",
			p.typ, asked.max_send_wr, asked.max_send_sge, asked.max_inline_data, uint64(p.ops), asked.max_recv_wr, asked.max_recv_sge, p.srq != nil), errno)
	}
	return qp, ia.cap, nil
}

// fillCreateAttr fills the attributes of mlx5dv_create_qp for p. A QP with
// a send queue is created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS and p.ops:
// without them rdma-core sizes every send WQE for memory-window binds and
// local invalidations (192 bytes before any data on RC, 240 on a DCI),
// which the kit never posts. For a DCI, rdma-core reads the flags of
// ibv_qp_init_attr_ex the same way (the mlx5dv attributes carry only the
// mlx5-specific operations, none of which the kit posts).
func fillCreateAttr(pd *C.struct_ibv_pd, p qpParams, ia *C.struct_ibv_qp_init_attr_ex, dv *C.struct_mlx5dv_qp_init_attr) error {
	ia.send_cq = p.send
	ia.recv_cq = p.recv
	ia.srq = p.srq
	ia.cap.max_send_wr = C.uint32_t(p.caps.SendDepth)
	ia.cap.max_send_sge = C.uint32_t(p.caps.MaxSendSGE)
	ia.cap.max_inline_data = C.uint32_t(p.caps.MaxInline)
	if p.srq == nil {
		ia.cap.max_recv_wr = C.uint32_t(p.caps.RecvDepth)
		ia.cap.max_recv_sge = C.uint32_t(p.caps.MaxRecvSGE)
	}
	ia.sq_sig_all = 0
	ia.comp_mask = C.IBV_QP_INIT_ATTR_PD
	ia.pd = pd

	if !p.scatterToCQE {
		dv.comp_mask |= C.MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS
		dv.create_flags |= C.MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE
	}
	switch p.typ {
	case ctx.QPTypeRC:
		ia.qp_type = C.IBV_QPT_RC
	case ctx.QPTypeUD:
		ia.qp_type = C.IBV_QPT_UD
	case ctx.QPTypeDCI:
		ia.qp_type = C.IBV_QPT_DRIVER
		ia.cap.max_recv_wr, ia.cap.max_recv_sge = 0, 0
		C.mk_set_dc(dv, 0, 0)
	case ctx.QPTypeDCT:
		// A DCT has no rings of its own: no send queue, receives through
		// its SRQ. rdma-core refuses any comp_mask but PD for it.
		ia.qp_type = C.IBV_QPT_DRIVER
		ia.cap = C.struct_ibv_qp_cap{}
		C.mk_set_dc(dv, 1, C.uint64_t(p.dcKey))
		return nil
	default:
		return &VerbError{Verb: "mlx5dv_create_qp", Detail: fmt.Sprintf("QP type %v", p.typ), Sentinel: ctx.ErrInvalidArgument}
	}
	ia.comp_mask |= C.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
	ia.send_ops_flags = C.uint64_t(p.ops)
	return nil
}

// CreateQueuePair creates a QP in RESET state and fills its descriptor
// with mlx5dv_init_obj (a DCT has no rings; its descriptor carries only the
// DCT number, known once it reached RTR).
//
// A QP with a send queue is created with the send operations the kit posts
// on its type (sqsize.KitOps) and with the caps sqsize.Request derives from
// cfg.Caps, so that every slot of the ring holds the kit's largest WQE; a
// configuration beyond the type's limits (depth, SGEs, inline size, found
// once per device by probing) is refused before rdma-core is called, with
// an error naming the limit.
//
// It is created through a thread domain of its own (ibv_alloc_td,
// ibv_alloc_parent_domain) so that its BlueFlame register is not shared
// with another QP: the data plane writes it without a lock and alternates
// its two halves by itself. A device has a limited number of such
// registers (fewer on an SR-IOV virtual function; a kernel without dynamic
// UARs has a handful): when no thread domain can be had, the QP is created
// on the plain PD, where rdma-core may give it a register shared with
// other QPs. Such a QP's descriptor reports BlueFlameSize 0: the data plane
// then rings the 8-byte doorbell only, a single store that cannot
// interleave with another QP's, where two BlueFlame copies of 64-byte
// chunks posted from different goroutines could. DedicatedBlueFlame tells
// which a QP got. With MLX5_SHUT_UP_BF set (not "0"), as rdma-core's own
// posts do, every QP is doorbell only and none takes a thread domain.
func (pd *ProtectionDomain) CreateQueuePair(cfg QPConfig) (*QueuePair, error) {
	const verb = "mlx5dv_create_qp"
	if cfg.SendCQ == nil {
		cfg.SendCQ = cfg.RecvCQ
	}
	if cfg.RecvCQ == nil {
		cfg.RecvCQ = cfg.SendCQ
	}
	bad := func(why string) error {
		return &VerbError{Verb: verb, Detail: fmt.Sprintf("%v QP: %s", cfg.Type, why), Sentinel: ctx.ErrInvalidArgument}
	}
	if cfg.Type != ctx.QPTypeDCT {
		if err := wqSignatureRefusal(verb, fmt.Sprintf("%v QP", cfg.Type), envQPSignature); err != nil {
			return nil, err
		}
	}
	switch {
	case cfg.SendCQ == nil:
		return nil, bad("no completion queue")
	case cfg.Type == ctx.QPTypeDCT && cfg.SRQ == nil:
		return nil, bad("a DCT needs an SRQ")
	case cfg.Type != ctx.QPTypeDCT && cfg.Caps.SendDepth == 0:
		return nil, bad("send depth 0")
	}
	for _, o := range []struct {
		d    *Device
		what string
	}{{cfg.SendCQ.d, "send CQ"}, {cfg.RecvCQ.d, "receive CQ"}} {
		if o.d != pd.d {
			return nil, bad(o.what + " of another device")
		}
	}
	if cfg.SRQ != nil && cfg.SRQ.pd.d != pd.d {
		return nil, bad("SRQ of another device")
	}
	p := qpParams{
		typ: cfg.Type, send: cfg.SendCQ.cq, recv: cfg.RecvCQ.cq,
		caps: cfg.Caps, dcKey: cfg.DCKey, scatterToCQE: cfg.ScatterToCQE,
	}
	if cfg.Type != ctx.QPTypeDCT {
		// The probe takes the device lock: before pd.use.
		dev := pd.d.sendQueueDevice()
		p.ops = sqsize.KitOps(cfg.Type, dev.Atomics)
		if dev.MaxSQDescSize != 0 {
			if err := sqsize.Check(cfg.Type, cfg.Caps, dev); err != nil {
				// What mlx5_calc_sq_size refuses, with its errno.
				return nil, &VerbError{Verb: verb, Detail: fmt.Sprintf("%v QP: %s", cfg.Type, limitMessage(err)),
					Errno: syscall.EINVAL, Sentinel: ctx.ErrInvalidArgument}
			}
		}
		p.caps = sqsize.Request(cfg.Type, p.ops, cfg.Caps, dev)
	}
	if err := pd.use(verb); err != nil {
		return nil, err
	}
	defer pd.d.mu.Unlock()
	if cfg.SendCQ.closed || cfg.RecvCQ.closed || (cfg.SRQ != nil && cfg.SRQ.closed) {
		return nil, errClosed(verb)
	}
	if cfg.SRQ != nil {
		p.srq = cfg.SRQ.srq
	}
	// A DCT has no send queue and so no BlueFlame register; rdma-core
	// accepts only a plain PD for it.
	var dom dedicatedDomain
	createPD := pd.pd
	if cfg.Type != ctx.QPTypeDCT {
		// Without a thread domain the QP falls back to rdma-core's
		// registers, doorbell only; its rings still come from a parent
		// domain's allocator, so that they outlive Close like any QP's.
		if !pd.d.shutUpBF {
			if d, err := newDedicatedDomain(pd.d.c, pd.pd); err == nil {
				dom, createPD = d, d.pdd
			}
		}
		if dom.pdd == nil {
			ext, err := newExtDomain(pd.d.c, pd.pd, nil, "QP without a thread domain")
			if err != nil {
				return nil, err
			}
			dom, createPD = dedicatedDomain{pdd: ext.pdd, ext: ext}, ext.pdd
		}
	}
	qp, caps, err := createQP(pd.d.c, createPD, p)
	if err != nil {
		_ = dom.release()
		return nil, err
	}
	q := &QueuePair{pd: pd, qp: qp, dom: dom, typ: cfg.Type, state: ctx.QPStateReset}
	q.desc.QPN = uint32(qp.qp_num)
	if cfg.Type != ctx.QPTypeDCT {
		var out C.struct_mlx5dv_qp
		if ret := C.mk_init_qp(qp, &out); ret != 0 {
			err := retError("mlx5dv_init_obj", fmt.Sprintf("%v QP %#x", cfg.Type, q.desc.QPN), int(ret), nil)
			C.ibv_destroy_qp(qp)
			_ = dom.release()
			return nil, err
		}
		q.desc = qpDescriptor(uint32(qp.qp_num), &out, caps)
		if dom.td == nil {
			q.desc.BlueFlameSize = 0
		}
		q.desc.Memory = pd.d.queueMemory(dom.ext.arena, dom.td)
	}
	pd.d.qps[q] = struct{}{}
	return q, nil
}

// limitMessage is the text of a limit error without its sentinel, which
// the VerbError adds back.
func limitMessage(err error) string {
	var le *sqsize.LimitError
	if errors.As(err, &le) {
		return le.Msg
	}
	return err.Error()
}

// DedicatedBlueFlame reports whether the QP has a BlueFlame register of its
// own (through its thread domain); a QP without one rings a register that
// may be shared, doorbell only (its descriptor's BlueFlameSize is 0). A
// DCT has none. On a device without BlueFlame (bf_reg_size 0) rdma-core's
// ibv_alloc_td hands every thread domain the context's one doorbell-only
// register (mlx5_alloc_td: td->bf = ctx->nc_uar), so a thread domain alone
// does not make the register the QP's own: mlx5dv_init_obj then reports
// bf.size 0, and so does this.
func (qp *QueuePair) DedicatedBlueFlame() bool {
	qp.pd.d.mu.Lock()
	defer qp.pd.d.mu.Unlock()
	return qp.dom.td != nil && qp.desc.BlueFlameSize != 0
}

// qpDescriptor converts mlx5dv_qp plus the granted capabilities.
func qpDescriptor(qpn uint32, out *C.struct_mlx5dv_qp, caps C.struct_ibv_qp_cap) descriptor.QP {
	return descriptor.QP{
		QPN:           qpn,
		DBRec:         unsafe.Pointer(out.dbrec),
		SQ:            descriptor.Ring{Buf: out.sq.buf, WQECnt: uint32(out.sq.wqe_cnt), Stride: uint32(out.sq.stride)},
		RQ:            descriptor.Ring{Buf: out.rq.buf, WQECnt: uint32(out.rq.wqe_cnt), Stride: uint32(out.rq.stride)},
		BlueFlame:     out.bf.reg,
		BlueFlameSize: uint32(out.bf.size),
		MaxInline:     uint32(caps.max_inline_data),
		MaxSendSGE:    uint32(caps.max_send_sge),
		MaxRecvSGE:    uint32(caps.max_recv_sge),
	}
}

// Type returns the QP type.
func (qp *QueuePair) Type() ctx.QPType { return qp.typ }

// Descriptor returns the rings, doorbell record and BlueFlame register.
// For a DCT the QPN is the DCT number, which rdma-core learns when the DCT
// reaches RTR (0 before).
func (qp *QueuePair) Descriptor() descriptor.QP {
	qp.pd.d.mu.Lock()
	defer qp.pd.d.mu.Unlock()
	return qp.desc
}

// modifyMask derives the attribute mask of a transition from the table of
// transitions the kernel accepts (package qpstate: ib_modify_qp_is_ok,
// mlx5_ib's optab, modify_dci_qp_is_ok and mlx5_ib_modify_dct), or returns
// the table's error, which carries the EINVAL the kernel would return, for
// a transition it refuses. The attributes do not change the mask: a DCI's
// path at RTR is not sent (older kernels refuse IB_QP_AV on a DCI).
func modifyMask(typ ctx.QPType, cur, next ctx.QPState, _ *ctx.QPAttr) (int, error) {
	m, err := qpstate.Derive(typ, cur, next)
	if err != nil {
		return 0, err
	}
	return int(m), nil
}

// checkAttr refuses values outside the bit widths of the verbs fields, so
// that a bad attribute fails here with a clear message rather than in the
// kernel.
func checkAttr(mask int, a *ctx.QPAttr) error {
	type field struct {
		bit  int
		name string
		v    uint32
		max  uint32
	}
	for _, f := range []field{
		{C.IBV_QP_PATH_MTU, "PathMTU", uint32(a.PathMTU), uint32(ctx.MTU4096)},
		{C.IBV_QP_DEST_QPN, "RemoteQPN", a.RemoteQPN, 0xffffff},
		{C.IBV_QP_RQ_PSN, "RQPSN", a.RQPSN, 0xffffff},
		{C.IBV_QP_SQ_PSN, "SQPSN", a.SQPSN, 0xffffff},
		{C.IBV_QP_MIN_RNR_TIMER, "MinRNRTimer", uint32(a.MinRNRTimer), 31},
		{C.IBV_QP_TIMEOUT, "Timeout", uint32(a.Timeout), 31},
		{C.IBV_QP_RETRY_CNT, "RetryCount", uint32(a.RetryCount), 7},
		{C.IBV_QP_RNR_RETRY, "RNRRetry", uint32(a.RNRRetry), 7},
		{C.IBV_QP_AV, "Path.SL", uint32(a.Path.SL), 15},
		{C.IBV_QP_AV, "Path.FlowLabel", a.Path.FlowLabel, 0xfffff},
	} {
		if mask&f.bit != 0 && f.v > f.max {
			return &rangeError{fmt.Sprintf("%s %d out of range (max %d)", f.name, f.v, f.max)}
		}
	}
	if mask&C.IBV_QP_PATH_MTU != 0 && a.PathMTU == 0 {
		return &rangeError{"PathMTU not set"}
	}
	return nil
}

// rangeError is checkAttr's refusal: a value wider than the device's field
// (which the kernel would truncate) or a PathMTU not set. precheckModify
// reports it with EINVAL, as ctx's and the software HCA's refusals of the
// same value carry. It wraps ctx.ErrInvalidArgument.
type rangeError struct{ why string }

func (e *rangeError) Error() string { return e.why + ": " + ctx.ErrInvalidArgument.Error() }
func (e *rangeError) Unwrap() error { return ctx.ErrInvalidArgument }

// fillAH converts an address to struct ibv_ah_attr. linkLayer is the link
// layer of the local port: RoCE needs a GRH, and a hop limit of 0 there
// would be an IP TTL of 0, so 0 becomes 64 (the default of rdma_cm).
func fillAH(ah *C.struct_ibv_ah_attr, p ctx.AddressAttr, ll ctx.LinkLayer) error {
	if ll == ctx.LinkLayerEthernet && !p.GlobalRoute {
		return fmt.Errorf("port %d is RoCE (Ethernet link layer): the address needs GlobalRoute with the remote GID: %w", p.Port, ctx.ErrInvalidArgument)
	}
	if p.SL > 15 || p.FlowLabel > 0xfffff {
		return fmt.Errorf("SL %d / flow label %#x out of range: %w", p.SL, p.FlowLabel, ctx.ErrInvalidArgument)
	}
	ah.dlid = C.uint16_t(p.DLID)
	ah.sl = C.uint8_t(p.SL)
	ah.src_path_bits = C.uint8_t(p.SrcPathBits)
	ah.static_rate = C.uint8_t(p.StaticRate)
	ah.port_num = C.uint8_t(p.Port)
	if p.GlobalRoute {
		ah.is_global = 1
		*(*[16]byte)(unsafe.Pointer(&ah.grh.dgid)) = p.DGID
		ah.grh.flow_label = C.uint32_t(p.FlowLabel)
		ah.grh.sgid_index = C.uint8_t(p.SGIDIndex)
		ah.grh.traffic_class = C.uint8_t(p.TrafficClass)
		hop := p.HopLimit
		if hop == 0 && ll == ctx.LinkLayerEthernet {
			hop = 64
		}
		ah.grh.hop_limit = C.uint8_t(hop)
	}
	return nil
}

// Modify moves the QP to a.State (ibv_modify_qp) with the attribute mask
// the QP type and transition need (see ctx.QPAttr). A transition the type
// does not have, an attribute value the kernel refuses against the device's
// limits (port, P_Key index, address vector, read/atomic depths, path MTU:
// qpstate.CheckAttr), or an attribute out of range, fails without calling
// the verb; what the kernel refuses carries the errno it returns. After
// RTR a DCT's descriptor carries its DCT number. After RESET rdma-core has
// zeroed the doorbell record: the data plane must restart its producer and
// consumer indices.
func (qp *QueuePair) Modify(a ctx.QPAttr) error {
	const verb = "ibv_modify_qp"
	if err := qp.pd.use(verb); err != nil {
		return err
	}
	defer qp.pd.d.mu.Unlock()
	if qp.closed {
		return errClosed(verb)
	}
	detail := fmt.Sprintf("%v QP %#x %v→%v", qp.typ, qp.desc.QPN, qp.state, a.State)
	qp.defaultPort(&a)
	mask, err := precheckModify(qp.typ, qp.state, &a, qp.port, func(mask int) (qpstate.Limits, error) {
		return qp.pd.d.modifyLimits(mask, a.Path.Port)
	}, detail)
	if err != nil {
		return err
	}

	var attr C.struct_ibv_qp_attr
	attr.qp_state = uint32(a.State)
	if mask&C.IBV_QP_PORT != 0 {
		attr.port_num = C.uint8_t(a.Port)
		attr.pkey_index = C.uint16_t(a.PKeyIndex)
	}
	if mask&C.IBV_QP_ACCESS_FLAGS != 0 {
		attr.qp_access_flags = C.uint(a.Access)
	}
	if mask&C.IBV_QP_QKEY != 0 {
		attr.qkey = C.uint32_t(a.QKey)
	}
	if mask&C.IBV_QP_AV != 0 {
		pa, err := qp.pd.d.queryPort(a.Path.Port)
		if err != nil {
			return err
		}
		if err := fillAH(&attr.ah_attr, a.Path, linkLayer(pa.link_layer)); err != nil {
			return &VerbError{Verb: verb, Detail: detail + ": " + err.Error(), Sentinel: ctx.ErrInvalidArgument}
		}
	}
	attr.path_mtu = uint32(a.PathMTU)
	attr.dest_qp_num = C.uint32_t(a.RemoteQPN)
	attr.rq_psn = C.uint32_t(a.RQPSN)
	attr.max_dest_rd_atomic = C.uint8_t(a.MaxDestRdAtomic)
	attr.min_rnr_timer = C.uint8_t(a.MinRNRTimer)
	attr.sq_psn = C.uint32_t(a.SQPSN)
	attr.timeout = C.uint8_t(a.Timeout)
	attr.retry_cnt = C.uint8_t(a.RetryCount)
	attr.rnr_retry = C.uint8_t(a.RNRRetry)
	attr.max_rd_atomic = C.uint8_t(a.MaxRdAtomic)

	if ret, errno := C.ibv_modify_qp(qp.qp, &attr, C.int(mask)); ret != 0 {
		return retError(verb, detail, int(ret), errno)
	}
	qp.state = a.State
	if mask&C.IBV_QP_PORT != 0 {
		qp.port = a.Port
	}
	if qp.typ == ctx.QPTypeDCT {
		qp.desc.QPN = uint32(qp.qp.qp_num)
	}
	return nil
}

// precheckModify returns the attribute mask of moving a QP of type typ
// from cur to a.State, or the *VerbError Modify refuses the modify with
// before calling ibv_modify_qp: a transition or mask the kernel refuses
// (qpstate.Derive), an attribute value it refuses against the device's
// limits (qpstate.CheckAttr: port, address vector, P_Key index, read/atomic
// depths, path MTU), both with the kernel's errno and an error that names
// the attribute, its value and the limit; then values outside the bit
// widths of the verbs fields (checkAttr). limits returns the device's
// limits for a mask (it queries the device only for what the mask
// carries); qpPort is the port the QP was brought to INIT on.
func precheckModify(typ ctx.QPType, cur ctx.QPState, a *ctx.QPAttr, qpPort uint8,
	limits func(mask int) (qpstate.Limits, error), detail string) (int, error) {
	const verb = "ibv_modify_qp"
	mask, err := modifyMask(typ, cur, a.State, a)
	if err == nil {
		var l qpstate.Limits
		if l, err = limits(mask); err != nil {
			return 0, err
		}
		err = qpstate.CheckAttr(typ, cur, a.State, qpstate.Mask(mask), a, qpPort, l)
	}
	if err == nil {
		err = checkAttr(mask, a)
	}
	if err == nil {
		return mask, nil
	}
	// Refused before the verb; what the kernel refuses carries the errno
	// it would return.
	why := err.Error()
	var errno syscall.Errno
	if te := (*qpstate.Error)(nil); errors.As(err, &te) {
		why, errno = te.Reason, te.Errno
	}
	if ae := (*qpstate.AttrError)(nil); errors.As(err, &ae) {
		why, errno = ae.Reason(), ae.Errno
	}
	if re := (*rangeError)(nil); errors.As(err, &re) {
		why, errno = re.why, syscall.EINVAL
	}
	return 0, &VerbError{Verb: verb, Detail: detail + ": " + why, Errno: errno, Sentinel: unwrapSentinel(err)}
}

// modifyLimits queries what qpstate.CheckAttr checks a modify with the
// given mask against: the port count, P_Key table (max_pkeys, the length
// mlx5_ib checks) and read/atomic depths of the device, and for an
// address vector the GID table and link layer of its port (when that port
// exists). A mask that carries none of the checked attributes queries
// nothing. The caller holds d.mu.
func (d *Device) modifyLimits(mask int, avPort uint8) (qpstate.Limits, error) {
	m := qpstate.Mask(mask)
	if m&(qpstate.Port|qpstate.PKeyIndex|qpstate.AV|qpstate.MaxQPRdAtomic|qpstate.MaxDestRdAtomic) == 0 {
		return qpstate.Limits{}, nil
	}
	a, err := d.queryDeviceEx()
	if err != nil {
		return qpstate.Limits{}, err
	}
	o := &a.orig_attr
	l := qpstate.Limits{
		Ports:             uint8(o.phys_port_cnt),
		PKeys:             int(o.max_pkeys),
		MaxQPInitRdAtomic: uint32(o.max_qp_init_rd_atom),
		MaxQPRdAtomic:     uint32(o.max_qp_rd_atom),
	}
	l.MaxDCInitRdAtomic, _ = dcRdAtomic(d.dv)
	if l.MaxDCInitRdAtomic == 0 {
		l.MaxDCInitRdAtomic = d.dcInitRdAtomic // probed, when rdma-core does not report it
	}
	if m&qpstate.AV != 0 && avPort >= 1 && avPort <= l.Ports {
		p, err := d.queryPort(avPort)
		if err != nil {
			return qpstate.Limits{}, err
		}
		l.GIDs, l.LinkLayer = int(p.gid_tbl_len), linkLayer(p.link_layer)
	}
	return l, nil
}

// defaultPort fills a port the attributes leave 0 with the one the QP was
// brought to INIT on (port 1 before that), and the path's port with the
// QP's.
func (qp *QueuePair) defaultPort(a *ctx.QPAttr) {
	if a.Port == 0 {
		a.Port = max(qp.port, 1)
	}
	if a.Path.Port == 0 {
		a.Path.Port = a.Port
	}
}

// unwrapSentinel returns the ctx sentinel inside err (ErrInvalidState or
// ErrInvalidArgument).
func unwrapSentinel(err error) error {
	for _, s := range []error{ctx.ErrInvalidState, ctx.ErrInvalidArgument} {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}

// State returns the QP state as the device reports it (ibv_query_qp), so a
// QP the device moved to error reports ctx.QPStateError. A DCT exists in
// the device only from RTR on; before that its state is the last one set.
func (qp *QueuePair) State() (ctx.QPState, error) {
	const verb = "ibv_query_qp"
	if err := qp.pd.use(verb); err != nil {
		return 0, err
	}
	defer qp.pd.d.mu.Unlock()
	if qp.closed {
		return 0, errClosed(verb)
	}
	if qp.typ == ctx.QPTypeDCT && qp.state != ctx.QPStateRTR {
		return qp.state, nil
	}
	var attr C.struct_ibv_qp_attr
	var init C.struct_ibv_qp_init_attr
	if ret, errno := C.ibv_query_qp(qp.qp, &attr, C.IBV_QP_STATE, &init); ret != 0 {
		return 0, retError(verb, fmt.Sprintf("%v QP %#x", qp.typ, qp.desc.QPN), int(ret), errno)
	}
	s := ctx.QPState(attr.qp_state)
	if s > ctx.QPStateError {
		return 0, &VerbError{Verb: verb, Detail: fmt.Sprintf("%v QP %#x: state %d unknown", qp.typ, qp.desc.QPN, attr.qp_state)}
	}
	qp.state = s
	return s, nil
}

// Close destroys the QP (ibv_destroy_qp). It is idempotent.
func (qp *QueuePair) Close() error {
	qp.pd.d.mu.Lock()
	defer qp.pd.d.mu.Unlock()
	return qp.closeLocked()
}

func (qp *QueuePair) closeLocked() error {
	if qp.closed {
		return nil
	}
	if qp.qp != nil {
		if ret, errno := C.ibv_destroy_qp(qp.qp); ret != 0 {
			return retError("ibv_destroy_qp", fmt.Sprintf("%v QP %#x", qp.typ, qp.desc.QPN), int(ret), errno)
		}
		qp.qp = nil
	}
	if err := qp.dom.retire(); err != nil {
		return err
	}
	qp.closed = true
	delete(qp.pd.d.qps, qp)
	return nil
}
