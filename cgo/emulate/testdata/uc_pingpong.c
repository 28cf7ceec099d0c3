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

/* connect_uc moves a UC QP from RESET to RTS with qp_state_table's UC
 * masks, after checking that RC's RTR mask is refused. */
static void connect_uc(struct ibv_qp *qp, uint32_t peer, struct ibv_port_attr *pa, union ibv_gid *gid)
{
	struct ibv_qp_attr a;
	int ret;

	init_connected(qp, peer, pa, gid, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &a);
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
	a = make_test_qp(pd, cq, cq, NULL, IBV_QPT_UC, 16);
	b = make_test_qp(pd, cq, cq, NULL, IBV_QPT_UC, 16);
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
		post_recv_buf(b, mr, rb, SIZE, 2 * i);
		post_recv_buf(a, mr, ra, SIZE, 2 * i + 1);
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
		post_recv_buf(b, mr, rb + 64, SIZE, 99);
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
