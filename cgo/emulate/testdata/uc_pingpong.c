/*
 * Two UC QPs of one process exchange messages through libibverbs and
 * libmlx5 as packaged, in the way of ibv_uc_pingpong, for
 * TestUCPingPongUnderPreload: the modify masks the kernel takes for UC
 * (RC's RTR mask is EINVAL), ibv_query_qp, SENDs each way, an RDMA WRITE
 * with immediate, and an RDMA READ that completes with a local QP
 * operation error. Each line it prints is a value the test checks; it
 * exits non-zero at the first verb that does not behave as on a ConnectX.
 */
#include <time.h>

#include "verbs_common.h"

#define ROUNDS 100
#define SIZE 512

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);

	if (!qp)
		FAIL("ibv_create_qp: %s", strerror(errno));
	return qp;
}

/* connect_uc moves a UC QP from RESET to RTS with qp_state_table's UC
 * masks, after checking that RC's RTR mask is refused. */
static void connect_uc(struct ibv_qp *qp, uint32_t peer, struct ibv_port_attr *pa, union ibv_gid *gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE };
	int ret;

	if ((ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		FAIL("modify INIT: %s", strerror(ret));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer;
	a.ah_attr.port_num = 1;
	a.ah_attr.dlid = pa->lid;
	if (pa->link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = *gid;
		a.ah_attr.grh.hop_limit = 64;
	}
	ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (ret != EINVAL)
		FAIL("modify RTR with RC's mask: %s, not EINVAL", strerror(ret));
	if ((ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)))
		FAIL("modify RTR: %s", strerror(ret));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	if ((ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)))
		FAIL("modify RTS: %s", strerror(ret));
}

static void post(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	int ret = ibv_post_send(qp, wr, &bad);

	if (ret)
		FAIL("ibv_post_send: %s", strerror(ret));
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = SIZE, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	int ret = ibv_post_recv(qp, &wr, &bad);

	if (ret)
		FAIL("ibv_post_recv: %s", strerror(ret));
}

/* next polls for one completion. */
static struct ibv_wc next(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	time_t end = time(NULL) + 10;

	for (;;) {
		int got = ibv_poll_cq(cq, 1, &wc);

		if (got < 0)
			FAIL("ibv_poll_cq: %d", got);
		if (got == 1)
			return wc;
		if (time(NULL) > end)
			FAIL("no completion");
	}
}

int main(void)
{
	struct test_device d;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_qp *a, *b;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	struct ibv_wc wc;
	static char buf[4 * SIZE];
	char *sa = buf, *ra = buf + SIZE, *sb = buf + 2 * SIZE, *rb = buf + 3 * SIZE;
	int i, j, sends = 0, recvs = 0, mismatches = 0;

	open_test_device(&d);
	pd = ibv_alloc_pd(d.ctx);
	cq = ibv_create_cq(d.ctx, 64, NULL, NULL, 0);
	if (!pd || !cq)
		FAIL("pd or cq: %s", strerror(errno));
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		FAIL("ibv_reg_mr: %s", strerror(errno));
	a = make_qp(pd, cq);
	b = make_qp(pd, cq);
	connect_uc(a, b->qp_num, &d.pa, &d.gid);
	connect_uc(b, a->qp_num, &d.pa, &d.gid);
	if (ibv_query_qp(a, &qa, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_PATH_MTU, &qi))
		FAIL("ibv_query_qp: %s", strerror(errno));
	printf("query state %d dest %s mtu %d\n", qa.qp_state, qa.dest_qp_num == b->qp_num ? "peer" : "other",
	       qa.path_mtu);

	for (i = 0; i < ROUNDS; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)sa, .length = SIZE, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED };

		memset(sa, 'a' + i % 26, SIZE);
		post_recv(b, mr, rb, 2 * i);
		post_recv(a, mr, ra, 2 * i + 1);
		post(a, &wr);
		for (j = 0; j < 2; j++) {
			wc = next(cq);
			if (wc.status != IBV_WC_SUCCESS)
				FAIL("wc status %s", ibv_wc_status_str(wc.status));
			wc.opcode == IBV_WC_SEND ? sends++ : recvs++;
		}
		memcpy(sb, rb, SIZE);
		sge.addr = (uintptr_t)sb;
		post(b, &wr);
		for (j = 0; j < 2; j++) {
			wc = next(cq);
			if (wc.status != IBV_WC_SUCCESS)
				FAIL("wc status %s", ibv_wc_status_str(wc.status));
			wc.opcode == IBV_WC_SEND ? sends++ : recvs++;
		}
		if (memcmp(ra, sa, SIZE) != 0)
			mismatches++;
	}
	printf("rounds %d sends %d recvs %d mismatches %d\n", ROUNDS, sends, recvs, mismatches);

	/* An RDMA WRITE with immediate from a to b's receive buffer. */
	{
		struct ibv_sge sge = { .addr = (uintptr_t)sa, .length = 16, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					  .send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(0x1234),
					  .wr.rdma = { .remote_addr = (uintptr_t)rb, .rkey = mr->rkey } };
		int imm = 0;

		memset(sa, 'w', 16);
		post_recv(b, mr, rb + 64, 99);
		post(a, &wr);
		for (j = 0; j < 2; j++) {
			wc = next(cq);
			if (wc.status != IBV_WC_SUCCESS)
				FAIL("write imm: wc status %s", ibv_wc_status_str(wc.status));
			if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && be32toh(wc.imm_data) == 0x1234)
				imm = 1;
		}
		printf("write imm %d written %d\n", imm, memcmp(rb, sa, 16) == 0);
	}

	/* An RDMA READ is no UC operation. */
	{
		struct ibv_sge sge = { .addr = (uintptr_t)sa, .length = 8, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 8, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
					  .send_flags = IBV_SEND_SIGNALED,
					  .wr.rdma = { .remote_addr = (uintptr_t)rb, .rkey = mr->rkey } };

		post(a, &wr);
		wc = next(cq);
		printf("read %s\n", ibv_wc_status_str(wc.status));
	}

	if (ibv_destroy_qp(a) || ibv_destroy_qp(b) || ibv_dereg_mr(mr) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd))
		FAIL("destroy: %s", strerror(errno));
	close_test_device(&d);
	printf("done\n");
	return 0;
}
