//go:build cgo && linux

// Package plainverbs drives one queue pair with plain libibverbs calls
// (ibv_create_qp, ibv_modify_qp, ibv_create_ah, ibv_post_send,
// ibv_post_recv, ibv_poll_cq): libmlx5's own data path, for the tests
// that check the kit's data path against it on the emulated device.
package plainverbs

/*
#cgo LDFLAGS: -libverbs -lmlx5
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

struct pv {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_ah *ah;
	char *buf;
	struct ibv_port_attr port;
	// The GID the side sends from: on RoCE index 3, the RoCE v2
	// IPv4-mapped entry of the model's table, which the kit's end
	// chooses too (a path needs one IP family at both ends); index 0 on
	// InfiniBand.
	int gid_index;
	union ibv_gid gid;
};

static int pv_open(struct pv *p, const char *name, int qpt, size_t len)
{
	struct ibv_device **list;
	int n, i, ret = ENODEV;

	memset(p, 0, sizeof(*p));
	list = ibv_get_device_list(&n);
	if (!list)
		return errno;
	for (i = 0; i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			p->ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!p->ctx)
		return ret;
	if (ibv_query_port(p->ctx, 1, &p->port))
		return EIO;
	p->gid_index = p->port.link_layer == IBV_LINK_LAYER_ETHERNET ? 3 : 0;
	if (ibv_query_gid(p->ctx, 1, p->gid_index, &p->gid))
		return EIO;
	p->pd = ibv_alloc_pd(p->ctx);
	p->cq = ibv_create_cq(p->ctx, 64, NULL, NULL, 0);
	if (!p->pd || !p->cq || posix_memalign((void **)&p->buf, 4096, len))
		return ENOMEM;
	memset(p->buf, 0, len);
	p->mr = ibv_reg_mr(p->pd, p->buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!p->mr)
		return errno;
	if (qpt < 0)
		return 0;
	struct ibv_qp_init_attr a = {
		.send_cq = p->cq, .recv_cq = p->cq, .qp_type = qpt,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	p->qp = ibv_create_qp(p->pd, &a);
	return p->qp ? 0 : errno;
}

static void pv_path(struct pv *p, struct ibv_ah_attr *ah, uint16_t dlid, const uint8_t *dgid)
{
	memset(ah, 0, sizeof(*ah));
	ah->port_num = 1;
	ah->dlid = dlid;
	if (p->port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		ah->is_global = 1;
		memcpy(ah->grh.dgid.raw, dgid, 16);
		ah->grh.sgid_index = p->gid_index;
		ah->grh.hop_limit = 64;
	}
}

static int pv_connect_rc(struct pv *p, uint32_t peer, uint16_t dlid, const uint8_t *dgid, uint32_t rq_psn)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	int ret;

	if ((ret = ibv_modify_qp(p->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	pv_path(p, &a.ah_attr, dlid, dgid);
	if ((ret = ibv_modify_qp(p->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(p->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int pv_ready_ud(struct pv *p, uint32_t qkey, uint16_t dlid, const uint8_t *dgid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = qkey };
	struct ibv_ah_attr ah;
	int ret;

	if ((ret = ibv_modify_qp(p->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)))
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if ((ret = ibv_modify_qp(p->qp, &a, IBV_QP_STATE)))
		return ret;
	a.qp_state = IBV_QPS_RTS;
	if ((ret = ibv_modify_qp(p->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)))
		return ret;
	pv_path(p, &ah, dlid, dgid);
	p->ah = ibv_create_ah(p->pd, &ah);
	return p->ah ? 0 : errno;
}

static int pv_post_recv(struct pv *p, uint64_t off, uint32_t len, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)p->buf + off, .length = len, .lkey = p->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(p->qp, &wr, &bad);
}

static int pv_post_send(struct pv *p, uint64_t off, uint32_t len, uint64_t id, uint32_t imm, uint32_t rqpn, uint32_t qkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)p->buf + off, .length = len, .lkey = p->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(imm) }, *bad;

	if (p->ah) {
		wr.wr.ud.ah = p->ah;
		wr.wr.ud.remote_qpn = rqpn;
		wr.wr.ud.remote_qkey = qkey;
	}
	return ibv_post_send(p->qp, &wr, &bad);
}

static int pv_poll(struct pv *p, struct ibv_wc *wc)
{
	return ibv_poll_cq(p->cq, 1, wc);
}

static void pv_close(struct pv *p)
{
	if (p->ah)
		ibv_destroy_ah(p->ah);
	if (p->qp)
		ibv_destroy_qp(p->qp);
	if (p->mr)
		ibv_dereg_mr(p->mr);
	if (p->cq)
		ibv_destroy_cq(p->cq);
	if (p->pd)
		ibv_dealloc_pd(p->pd);
	if (p->ctx)
		ibv_close_device(p->ctx);
	free(p->buf);
	memset(p, 0, sizeof(*p));
}

struct pvdc {
	struct pv b;
	struct ibv_srq *srq;
	struct ibv_qp *dct, *dci;
	struct ibv_qp_ex *qpx;
	struct mlx5dv_qp_ex *mqpx;
};

static int pvdc_open(struct pvdc *d, const char *name, size_t len, uint64_t key)
{
	struct pv *p = &d->b;
	struct ibv_qp_attr a;
	int ret;

	if ((ret = pv_open(p, name, -1, len)))
		return ret;
	{
		struct ibv_srq_init_attr ia = { .attr = { .max_wr = 16, .max_sge = 1 } };

		d->srq = ibv_create_srq(p->pd, &ia);
		if (!d->srq)
			return errno;
	}
	{
		struct ibv_qp_init_attr_ex ia = {
			.send_cq = p->cq, .recv_cq = p->cq, .srq = d->srq, .qp_type = IBV_QPT_DRIVER,
			.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = p->pd,
		};
		struct mlx5dv_qp_init_attr dv = {
			.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
			.dc_init_attr = { .dc_type = MLX5DV_DCTYPE_DCT, .dct_access_key = key },
		};

		d->dct = mlx5dv_create_qp(p->ctx, &ia, &dv);
		if (!d->dct)
			return errno;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	if ((ret = ibv_modify_qp(d->dct, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.min_rnr_timer = 12;
	pv_path(p, &a.ah_attr, p->port.lid, p->gid.raw);
	if ((ret = ibv_modify_qp(d->dct, &a, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU)))
		return ret;
	{
		struct ibv_qp_init_attr_ex ia = {
			.send_cq = p->cq, .recv_cq = p->cq, .qp_type = IBV_QPT_DRIVER,
			.cap = { .max_send_wr = 16, .max_send_sge = 1 },
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = p->pd,
			.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
		};
		struct mlx5dv_qp_init_attr dv = {
			.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
			.dc_init_attr = { .dc_type = MLX5DV_DCTYPE_DCI },
		};

		d->dci = mlx5dv_create_qp(p->ctx, &ia, &dv);
		if (!d->dci)
			return errno;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	if ((ret = ibv_modify_qp(d->dci, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT)))
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	if ((ret = ibv_modify_qp(d->dci, &a, IBV_QP_STATE | IBV_QP_PATH_MTU)))
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if ((ret = ibv_modify_qp(d->dci, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)))
		return ret;
	d->qpx = ibv_qp_to_qp_ex(d->dci);
	d->mqpx = mlx5dv_qp_ex_from_ibv_qp_ex(d->qpx);
	return d->qpx && d->mqpx ? 0 : EINVAL;
}

static int pvdc_ah(struct pvdc *d, uint16_t dlid, const uint8_t *dgid)
{
	struct ibv_ah_attr ah;

	pv_path(&d->b, &ah, dlid, dgid);
	d->b.ah = ibv_create_ah(d->b.pd, &ah);
	return d->b.ah ? 0 : errno;
}

static int pvdc_post_srq_recv(struct pvdc *d, uint64_t off, uint32_t len, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)d->b.buf + off, .length = len, .lkey = d->b.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_srq_recv(d->srq, &wr, &bad);
}

static int pvdc_send(struct pvdc *d, uint64_t off, uint32_t len, uint64_t id, uint32_t imm, uint32_t dctn, uint64_t key)
{
	ibv_wr_start(d->qpx);
	d->qpx->wr_id = id;
	d->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(d->qpx, htobe32(imm));
	mlx5dv_wr_set_dc_addr(d->mqpx, d->b.ah, dctn, key);
	ibv_wr_set_sge(d->qpx, d->b.mr->lkey, (uintptr_t)d->b.buf + off, len);
	return ibv_wr_complete(d->qpx);
}

static void pvdc_close(struct pvdc *d)
{
	if (d->b.ah)
		ibv_destroy_ah(d->b.ah);
	d->b.ah = NULL;
	if (d->dci)
		ibv_destroy_qp(d->dci);
	if (d->dct)
		ibv_destroy_qp(d->dct);
	if (d->srq)
		ibv_destroy_srq(d->srq);
	pv_close(&d->b);
	memset(d, 0, sizeof(*d));
}
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"unsafe"
)

// Side is one queue pair of libibverbs with its own context, PD, CQ and a
// registered buffer.
type Side struct {
	p   *C.struct_pv
	len int
}

// Completion is what ibv_poll_cq returned for one work completion.
type Completion struct {
	WRID      uint64
	Status    int
	Opcode    int
	ByteLen   uint32
	Immediate uint32
	HasImm    bool
	SourceQPN uint32
	QPN       uint32
}

// The ibv_wc_opcode values the tests look for.
const (
	OpcodeSend = C.IBV_WC_SEND
	OpcodeRecv = C.IBV_WC_RECV
)

// Types of queue pair.
const (
	RC = C.IBV_QPT_RC
	UD = C.IBV_QPT_UD
)

func errOf(verb string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	return fmt.Errorf("plainverbs: %s: %w", verb, syscall.Errno(rc))
}

// Open opens the device, creates a PD, a CQ of 64 entries, a buffer of
// length bytes registered for local and remote access and a queue pair of
// the type (RC or UD) with 16 work requests of one SGE each way.
func Open(device string, qpType, length int) (*Side, error) {
	s := &Side{p: (*C.struct_pv)(C.calloc(1, C.sizeof_struct_pv)), len: length}
	name := C.CString(device)
	defer C.free(unsafe.Pointer(name))
	if err := errOf("open "+device, C.pv_open(s.p, name, C.int(qpType), C.size_t(length))); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close destroys everything Open created.
func (s *Side) Close() {
	if s.p != nil {
		C.pv_close(s.p)
		C.free(unsafe.Pointer(s.p))
		s.p = nil
	}
}

// QPN returns the queue pair's number.
func (s *Side) QPN() uint32 { return uint32(s.p.qp.qp_num) }

// LID returns port 1's LID.
func (s *Side) LID() uint16 { return uint16(s.p.port.lid) }

// GID returns port 1's GID 0.
func (s *Side) GID() [16]byte {
	return *(*[16]byte)(unsafe.Pointer(&s.p.gid))
}

// Buf returns the registered buffer.
func (s *Side) Buf() []byte { return unsafe.Slice((*byte)(unsafe.Pointer(s.p.buf)), s.len) }

// ConnectRC takes the RC queue pair through INIT, RTR and RTS to the peer.
func (s *Side) ConnectRC(peerQPN uint32, dlid uint16, dgid [16]byte, rqPSN uint32) error {
	return errOf("ibv_modify_qp", C.pv_connect_rc(s.p, C.uint32_t(peerQPN), C.uint16_t(dlid), (*C.uint8_t)(unsafe.Pointer(&dgid[0])), C.uint32_t(rqPSN)))
}

// ReadyUD takes the UD queue pair to RTS with the Q_Key and creates the
// address handle of the peer it sends to.
func (s *Side) ReadyUD(qkey uint32, dlid uint16, dgid [16]byte) error {
	return errOf("ready UD", C.pv_ready_ud(s.p, C.uint32_t(qkey), C.uint16_t(dlid), (*C.uint8_t)(unsafe.Pointer(&dgid[0]))))
}

// PostRecv posts a receive of length bytes at off of the buffer.
func (s *Side) PostRecv(off, length int, wrid uint64) error {
	return errOf("ibv_post_recv", C.pv_post_recv(s.p, C.uint64_t(off), C.uint32_t(length), C.uint64_t(wrid)))
}

// PostSendImm posts a signaled SEND with immediate of length bytes at off
// (on UD to remoteQPN with qkey through the address handle).
func (s *Side) PostSendImm(off, length int, wrid uint64, imm, remoteQPN, qkey uint32) error {
	return errOf("ibv_post_send", C.pv_post_send(s.p, C.uint64_t(off), C.uint32_t(length), C.uint64_t(wrid), C.uint32_t(imm), C.uint32_t(remoteQPN), C.uint32_t(qkey)))
}

// Poll polls the CQ once with ibv_poll_cq.
func (s *Side) Poll() (Completion, bool, error) {
	var wc C.struct_ibv_wc
	n := C.pv_poll(s.p, &wc)
	if n < 0 {
		return Completion{}, false, fmt.Errorf("plainverbs: ibv_poll_cq: %d", int(n))
	}
	if n == 0 {
		return Completion{}, false, nil
	}
	return completionOf(&wc), true, nil
}

func completionOf(wc *C.struct_ibv_wc) Completion {
	c := Completion{WRID: uint64(wc.wr_id), Status: int(wc.status), Opcode: int(wc.opcode), ByteLen: uint32(wc.byte_len),
		SourceQPN: uint32(wc.src_qp), QPN: uint32(wc.qp_num), HasImm: wc.wc_flags&C.IBV_WC_WITH_IMM != 0}
	if c.HasImm {
		// imm_data is in network byte order.
		c.Immediate = binary.BigEndian.Uint32((*[4]byte)(unsafe.Pointer(&wc.anon0))[:])
	}
	return c
}

// DCSide is a DC target and a DC initiator of libibverbs and libmlx5 on
// one device: the DCT (mlx5dv_create_qp) receives through an SRQ posted
// with ibv_post_srq_recv, the DCI (mlx5dv_create_qp) posts with the
// ibv_wr_* API and mlx5dv_wr_set_dc_addr, and both complete on one CQ
// polled with ibv_poll_cq.
type DCSide struct {
	d   *C.struct_pvdc
	len int
}

// OpenDC opens the device, creates a PD, a CQ of 64 entries, a buffer of
// length bytes registered for local and remote access, an SRQ of 16
// receives, a DCT on it with the DC access key, brought to RTR on port 1,
// and a DCI of 16 sends brought to RTS.
func OpenDC(device string, length int, key uint64) (*DCSide, error) {
	s := &DCSide{d: (*C.struct_pvdc)(C.calloc(1, C.sizeof_struct_pvdc)), len: length}
	name := C.CString(device)
	defer C.free(unsafe.Pointer(name))
	if err := errOf("open DC "+device, C.pvdc_open(s.d, name, C.size_t(length), C.uint64_t(key))); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close destroys everything OpenDC and Address created.
func (s *DCSide) Close() {
	if s.d != nil {
		C.pvdc_close(s.d)
		C.free(unsafe.Pointer(s.d))
		s.d = nil
	}
}

// DCTNumber returns the DCT's number (known after RTR).
func (s *DCSide) DCTNumber() uint32 { return uint32(s.d.dct.qp_num) }

// DCIQPN returns the DCI's queue pair number.
func (s *DCSide) DCIQPN() uint32 { return uint32(s.d.dci.qp_num) }

// SRQN returns the SRQ's number as libmlx5 learnt it.
func (s *DCSide) SRQN() uint32 {
	var n C.uint32_t
	if C.ibv_get_srq_num(s.d.srq, &n) != 0 {
		return 0
	}
	return uint32(n)
}

// LID returns port 1's LID.
func (s *DCSide) LID() uint16 { return uint16(s.d.b.port.lid) }

// GID returns port 1's GID 0.
func (s *DCSide) GID() [16]byte { return *(*[16]byte)(unsafe.Pointer(&s.d.b.gid)) }

// Buf returns the registered buffer.
func (s *DCSide) Buf() []byte { return unsafe.Slice((*byte)(unsafe.Pointer(s.d.b.buf)), s.len) }

// Address creates the address handle (ibv_create_ah) of the port the
// DCI's sends go to.
func (s *DCSide) Address(dlid uint16, dgid [16]byte) error {
	return errOf("ibv_create_ah", C.pvdc_ah(s.d, C.uint16_t(dlid), (*C.uint8_t)(unsafe.Pointer(&dgid[0]))))
}

// PostSRQRecv posts a receive of length bytes at off of the buffer to the
// SRQ with ibv_post_srq_recv.
func (s *DCSide) PostSRQRecv(off, length int, wrid uint64) error {
	return errOf("ibv_post_srq_recv", C.pvdc_post_srq_recv(s.d, C.uint64_t(off), C.uint32_t(length), C.uint64_t(wrid)))
}

// SendImm posts on the DCI a signaled SEND with immediate of length bytes
// at off to the DCT dctn with the DC access key, through the address
// handle Address created (ibv_wr_start, ibv_wr_send_imm,
// mlx5dv_wr_set_dc_addr, ibv_wr_set_sge, ibv_wr_complete).
func (s *DCSide) SendImm(off, length int, wrid uint64, imm, dctn uint32, key uint64) error {
	if s.d.b.ah == nil {
		return fmt.Errorf("plainverbs: DC send: no address handle: %w", syscall.EINVAL)
	}
	return errOf("ibv_wr_complete", C.pvdc_send(s.d, C.uint64_t(off), C.uint32_t(length), C.uint64_t(wrid), C.uint32_t(imm), C.uint32_t(dctn), C.uint64_t(key)))
}

// Poll polls the CQ once with ibv_poll_cq.
func (s *DCSide) Poll() (Completion, bool, error) {
	var wc C.struct_ibv_wc
	n := C.pv_poll(&s.d.b, &wc)
	if n < 0 {
		return Completion{}, false, fmt.Errorf("plainverbs: ibv_poll_cq: %d", int(n))
	}
	if n == 0 {
		return Completion{}, false, nil
	}
	return completionOf(&wc), true, nil
}
