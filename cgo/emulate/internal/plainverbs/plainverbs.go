//go:build cgo && linux

// Package plainverbs drives one queue pair with plain libibverbs calls
// (ibv_create_qp, ibv_modify_qp, ibv_create_ah, ibv_post_send,
// ibv_post_recv, ibv_poll_cq): libmlx5's own data path, for the tests
// that check the kit's data path against it on the emulated device.
package plainverbs

/*
#cgo LDFLAGS: -libverbs
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

struct pv {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_ah *ah;
	char *buf;
	struct ibv_port_attr port;
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
	if (ibv_query_port(p->ctx, 1, &p->port) || ibv_query_gid(p->ctx, 1, 0, &p->gid))
		return EIO;
	p->pd = ibv_alloc_pd(p->ctx);
	p->cq = ibv_create_cq(p->ctx, 64, NULL, NULL, 0);
	if (!p->pd || !p->cq || posix_memalign((void **)&p->buf, 4096, len))
		return ENOMEM;
	memset(p->buf, 0, len);
	p->mr = ibv_reg_mr(p->pd, p->buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!p->mr)
		return errno;
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
	c := Completion{WRID: uint64(wc.wr_id), Status: int(wc.status), Opcode: int(wc.opcode), ByteLen: uint32(wc.byte_len),
		SourceQPN: uint32(wc.src_qp), QPN: uint32(wc.qp_num), HasImm: wc.wc_flags&C.IBV_WC_WITH_IMM != 0}
	if c.HasImm {
		// imm_data is in network byte order.
		c.Immediate = binary.BigEndian.Uint32((*[4]byte)(unsafe.Pointer(&wc.anon0))[:])
	}
	return c, true, nil
}
