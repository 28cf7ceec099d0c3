/*
 * RC QPs of one process receiving through shared receive queues, in the
 * way of ibv_srq_pingpong: NUM_QP QP pairs, the QPs of each side on one
 * SRQ of that side; ibv_post_srq_recv, ibv_post_send (SEND), ibv_poll_cq,
 * ibv_query_srq and ibv_modify_srq of libibverbs and libmlx5 as packaged,
 * for TestSRQPingPongUnderPreload. Each line it prints is a value the test
 * checks; it exits non-zero at the first verb that does not behave as on a
 * ConnectX.
 */
#include <time.h>

#include "verbs_common.h"

#define ROUNDS 50
#define NUM_QP 4
#define SIZE 256
#define SRQ_WR 32

static void post_srq_recv(struct ibv_srq *srq, struct ibv_mr *mr, char *buf, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = SIZE, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	int ret = ibv_post_srq_recv(srq, &wr, &bad);

	if (ret)
		FAIL("ibv_post_srq_recv: %s", strerror(ret));
}

static void post_send(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = SIZE, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	int ret = ibv_post_send(qp, &wr, &bad);

	if (ret)
		FAIL("ibv_post_send: %s", strerror(ret));
}

/*
 * wait polls until n completions arrived. Each send is counted; each
 * receive is counted and checked: it names one of the QPs qps, and the
 * buffer of its WQE (slot wr_id of rx) holds a message whose first byte is
 * that QP's index (the index of its peer, which sent it). slot[k] is set
 * to the buffer slot QP k received into: with an SRQ, a QP takes whichever
 * WQE is next, as messages of different QPs are not ordered.
 */
static void wait(struct ibv_cq *cq, int n, struct ibv_qp **qps, char *rx, int *slot, int *sends, int *recvs, int *wrong)
{
	struct ibv_wc wc;
	time_t end = time(NULL) + 10;
	int k;

	while (n > 0) {
		int got = ibv_poll_cq(cq, 1, &wc);

		if (got < 0)
			FAIL("ibv_poll_cq: %d", got);
		if (got == 0) {
			if (time(NULL) > end)
				FAIL("no completion");
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS)
			FAIL("wc status %s wr_id %llu", ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id);
		n--;
		if (wc.opcode == IBV_WC_SEND) {
			(*sends)++;
			continue;
		}
		if (wc.opcode != IBV_WC_RECV) {
			(*wrong)++;
			continue;
		}
		(*recvs)++;
		for (k = 0; k < NUM_QP && qps[k]->qp_num != wc.qp_num; k++)
			;
		if (k == NUM_QP || wc.byte_len != SIZE || wc.wr_id >= NUM_QP || rx[wc.wr_id * SIZE] != k) {
			(*wrong)++;
			continue;
		}
		slot[k] = wc.wr_id;
	}
}

int main(void)
{
	struct test_device d;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_srq *srq[2];
	struct ibv_qp *qp[2][NUM_QP];
	struct ibv_port_attr pa;
	struct ibv_srq_attr sa;
	union ibv_gid gid;
	static char buf[4 * NUM_QP * SIZE];
	int i, j, s, sends = 0, recvs = 0, wrong = 0, mismatches = 0, ret;

	open_test_device(&d);
	ctx = d.ctx;
	pa = d.pa;
	gid = d.gid;
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 4 * NUM_QP + 8, NULL, NULL, 0);
	if (!pd || !cq)
		FAIL("pd or cq: %s", strerror(errno));
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		FAIL("ibv_reg_mr: %s", strerror(errno));
	for (s = 0; s < 2; s++) {
		struct ibv_srq_init_attr ia = { .attr = { .max_wr = SRQ_WR, .max_sge = 1 } };

		srq[s] = ibv_create_srq(pd, &ia);
		if (!srq[s])
			FAIL("ibv_create_srq: %s", strerror(errno));
		for (i = 0; i < NUM_QP; i++)
			qp[s][i] = make_test_qp(pd, cq, cq, srq[s], IBV_QPT_RC, 16);
	}
	if ((ret = ibv_query_srq(srq[0], &sa)))
		FAIL("ibv_query_srq: %s", strerror(ret));
	printf("srq max_wr %u max_sge %u limit %u\n", sa.max_wr, sa.max_sge, sa.srq_limit);
	memset(&sa, 0, sizeof(sa));
	printf("modify limit 0: %d\n", ibv_modify_srq(srq[0], &sa, IBV_SRQ_LIMIT));
	sa.srq_limit = 4;
	printf("modify limit 4: %s\n", strerror(ibv_modify_srq(srq[0], &sa, IBV_SRQ_LIMIT)));
	sa.max_wr = 2 * SRQ_WR;
	printf("modify max_wr: %s\n", strerror(ibv_modify_srq(srq[0], &sa, IBV_SRQ_MAX_WR)));
	for (i = 0; i < NUM_QP; i++) {
		connect_rc(qp[0][i], qp[1][i]->qp_num, &pa, &gid, IBV_ACCESS_LOCAL_WRITE);
		connect_rc(qp[1][i], qp[0][i]->qp_num, &pa, &gid, IBV_ACCESS_LOCAL_WRITE);
	}

	/*
	 * Each QP of side 0 pings its peer of side 1 (a message starting with
	 * the QP's index), which pongs back what it got.
	 */
	for (j = 0; j < ROUNDS; j++) {
		char *rx1 = buf + NUM_QP * SIZE, *rx0 = buf + 2 * NUM_QP * SIZE;
		int slot1[NUM_QP], slot0[NUM_QP];

		for (i = 0; i < NUM_QP; i++) {
			char *ping = buf + i * SIZE;

			memset(ping, 'a' + (i + j) % 26, SIZE);
			ping[0] = i;
			slot1[i] = slot0[i] = -1;
			post_srq_recv(srq[1], mr, rx1 + i * SIZE, i);
			post_srq_recv(srq[0], mr, rx0 + i * SIZE, i);
			post_send(qp[0][i], mr, ping, i);
		}
		wait(cq, 2 * NUM_QP, qp[1], rx1, slot1, &sends, &recvs, &wrong);
		for (i = 0; i < NUM_QP; i++) {
			char *pong = buf + (3 * NUM_QP + i) * SIZE;

			if (slot1[i] < 0)
				FAIL("QP %d of side 1 received nothing", i);
			memcpy(pong, rx1 + slot1[i] * SIZE, SIZE);
			post_send(qp[1][i], mr, pong, i);
		}
		wait(cq, 2 * NUM_QP, qp[0], rx0, slot0, &sends, &recvs, &wrong);
		for (i = 0; i < NUM_QP; i++)
			if (slot0[i] < 0 || memcmp(buf + i * SIZE, rx0 + slot0[i] * SIZE, SIZE) != 0)
				mismatches++;
	}
	printf("rounds %d qps %d sends %d recvs %d wrong %d mismatches %d\n", ROUNDS, NUM_QP, sends, recvs, wrong, mismatches);

	for (s = 0; s < 2; s++) {
		if (ibv_destroy_srq(srq[s]) != EBUSY)
			FAIL("ibv_destroy_srq of an SRQ in use");
		for (i = 0; i < NUM_QP; i++)
			if (ibv_destroy_qp(qp[s][i]))
				FAIL("ibv_destroy_qp: %s", strerror(errno));
		if (ibv_destroy_srq(srq[s]))
			FAIL("ibv_destroy_srq: %s", strerror(errno));
	}
	if (ibv_dereg_mr(mr) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd))
		FAIL("destroy: %s", strerror(errno));
	close_test_device(&d);
	printf("done\n");
	return 0;
}
