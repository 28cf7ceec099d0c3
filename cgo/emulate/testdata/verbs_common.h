/*
 * What the test programs of this directory share: failing loudly, opening
 * the first device with its port 1 attributes and GID 0, creating a QP and
 * posting a receive, connecting an RC QP to a peer of the same port (RESET
 * to RTS with the attributes ibv_rc_pingpong sends) or taking a connected
 * QP to INIT with its RTR attributes, and bringing a UD QP to RTS. Each
 * program includes it once.
 */
#ifndef MLX5KIT_EMULATE_TESTDATA_VERBS_COMMON_H
#define MLX5KIT_EMULATE_TESTDATA_VERBS_COMMON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

/* The first device, open, with port 1's attributes and GID 0. */
struct test_device {
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_port_attr pa;
	union ibv_gid gid;
};

static inline void open_test_device(struct test_device *d)
{
	int n;

	d->list = ibv_get_device_list(&n);
	if (!d->list || n == 0)
		FAIL("no device");
	d->ctx = ibv_open_device(d->list[0]);
	if (!d->ctx)
		FAIL("ibv_open_device: %s", strerror(errno));
	if (ibv_query_port(d->ctx, 1, &d->pa) || ibv_query_gid(d->ctx, 1, 0, &d->gid))
		FAIL("query port or GID");
}

static inline void close_test_device(struct test_device *d)
{
	if (ibv_close_device(d->ctx))
		FAIL("ibv_close_device: %s", strerror(errno));
	ibv_free_device_list(d->list);
}

/* make_test_qp creates a QP of the given type on pd: send_wr sends of one
 * SGE, and 16 receives of one SGE unless srq holds its receives. */
static inline struct ibv_qp *make_test_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
					  struct ibv_srq *srq, enum ibv_qp_type type, uint32_t send_wr)
{
	struct ibv_qp_init_attr a = {
		.send_cq = scq, .recv_cq = rcq, .srq = srq, .qp_type = type,
		.cap = { .max_send_wr = send_wr, .max_send_sge = 1,
			 .max_recv_wr = srq ? 0 : 16, .max_recv_sge = srq ? 0 : 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);

	if (!qp)
		FAIL("ibv_create_qp: %s", strerror(errno));
	if (srq && a.cap.max_recv_wr != 0)
		FAIL("max_recv_wr %u on an SRQ", a.cap.max_recv_wr);
	return qp;
}

/* post_recv_buf posts one receive of len bytes at buf (in mr). */
static inline void post_recv_buf(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, uint32_t len, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	int ret = ibv_post_recv(qp, &wr, &bad);

	if (ret)
		FAIL("ibv_post_recv: %s", strerror(ret));
}

/* init_connected moves a connected QP (RC, UC) from RESET to INIT on port 1
 * with the given access flags, and sets rtr to the attributes of its RTR
 * toward peer on the same port (through GID 0 on an Ethernet port). */
static inline void init_connected(struct ibv_qp *qp, uint32_t peer, struct ibv_port_attr *pa, union ibv_gid *gid,
				  int access, struct ibv_qp_attr *rtr)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };
	int ret;

	if ((ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		FAIL("modify INIT: %s", strerror(ret));
	memset(rtr, 0, sizeof(*rtr));
	rtr->qp_state = IBV_QPS_RTR;
	rtr->path_mtu = IBV_MTU_1024;
	rtr->dest_qp_num = peer;
	rtr->ah_attr.port_num = 1;
	rtr->ah_attr.dlid = pa->lid;
	if (pa->link_layer == IBV_LINK_LAYER_ETHERNET) {
		rtr->ah_attr.is_global = 1;
		rtr->ah_attr.grh.dgid = *gid;
		rtr->ah_attr.grh.hop_limit = 64;
	}
}

/* ready_rc moves an RC QP from RESET to RTR, talking to peer on the same
 * port (through GID 0 on an Ethernet port), with the given access flags. */
static inline void ready_rc(struct ibv_qp *qp, uint32_t peer, struct ibv_port_attr *pa, union ibv_gid *gid,
			    int access)
{
	struct ibv_qp_attr a;
	int ret;

	init_connected(qp, peer, pa, gid, access, &a);
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	if ((ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		FAIL("modify RTR: %s", strerror(ret));
}

/* send_rc moves an RC QP from RTR to RTS. */
static inline void send_rc(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	int ret;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if ((ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)))
		FAIL("modify RTS: %s", strerror(ret));
}

/* connect_rc moves an RC QP from RESET to RTS, talking to peer on the same
 * port (through GID 0 on an Ethernet port), with the given access flags. */
static inline void connect_rc(struct ibv_qp *qp, uint32_t peer, struct ibv_port_attr *pa, union ibv_gid *gid,
			      int access)
{
	ready_rc(qp, peer, pa, gid, access);
	send_rc(qp);
}

/* ready_ud moves a UD QP from RESET to RTS on port 1 with the Q_Key given. */
static inline void ready_ud(struct ibv_qp *qp, uint32_t qkey)
{
	struct ibv_qp_attr m = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = qkey };
	int ret;

	if ((ret = ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)))
		FAIL("modify INIT: %s", strerror(ret));
	memset(&m, 0, sizeof(m));
	m.qp_state = IBV_QPS_RTR;
	if ((ret = ibv_modify_qp(qp, &m, IBV_QP_STATE)))
		FAIL("modify RTR: %s", strerror(ret));
	m.qp_state = IBV_QPS_RTS;
	if ((ret = ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_SQ_PSN)))
		FAIL("modify RTS: %s", strerror(ret));
}

#endif
