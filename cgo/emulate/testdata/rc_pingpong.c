/*
 * Two RC QPs of one process exchange messages through libibverbs and
 * libmlx5 as packaged, in the way of ibv_rc_pingpong: ibv_post_recv,
 * ibv_post_send (SEND), ibv_poll_cq, for TestRCPingPongUnderPreload. Each
 * line it prints is a value the test checks; it exits non-zero at the
 * first verb that does not behave as on a ConnectX.
 */
#include <time.h>

#include "verbs_common.h"

#define ROUNDS 100
#define SIZE 512

static void post_send(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = SIZE, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	int ret = ibv_post_send(qp, &wr, &bad);

	if (ret)
		FAIL("ibv_post_send: %s", strerror(ret));
}

/* wait polls until n completions arrived, checking each. */
static void wait(struct ibv_cq *cq, int n, int *sends, int *recvs, uint32_t *bytes)
{
	struct ibv_wc wc;
	time_t end = time(NULL) + 10;

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
		if (wc.opcode == IBV_WC_SEND)
			(*sends)++;
		else if (wc.opcode == IBV_WC_RECV) {
			(*recvs)++;
			*bytes += wc.byte_len;
		}
		n--;
	}
}

int main(void)
{
	struct test_device d;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_qp *a, *b;
	struct ibv_port_attr pa;
	union ibv_gid gid;
	static char buf[4 * SIZE];
	char *sa = buf, *ra = buf + SIZE, *sb = buf + 2 * SIZE, *rb = buf + 3 * SIZE;
	int i, sends = 0, recvs = 0, mismatches = 0;
	uint32_t bytes = 0;

	open_test_device(&d);
	ctx = d.ctx;
	pa = d.pa;
	gid = d.gid;
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!pd || !cq)
		FAIL("pd or cq: %s", strerror(errno));
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		FAIL("ibv_reg_mr: %s", strerror(errno));
	a = make_test_qp(pd, cq, cq, NULL, IBV_QPT_RC, 16);
	b = make_test_qp(pd, cq, cq, NULL, IBV_QPT_RC, 16);
	connect_rc(a, b->qp_num, &pa, &gid, IBV_ACCESS_LOCAL_WRITE);
	connect_rc(b, a->qp_num, &pa, &gid, IBV_ACCESS_LOCAL_WRITE);

	/* a pings b, b pongs back what it got, ROUNDS times. */
	for (i = 0; i < ROUNDS; i++) {
		memset(sa, 'a' + i % 26, SIZE);
		post_recv_buf(b, mr, rb, SIZE, 2 * i);
		post_recv_buf(a, mr, ra, SIZE, 2 * i + 1);
		post_send(a, mr, sa, i);
		wait(cq, 2, &sends, &recvs, &bytes);
		memcpy(sb, rb, SIZE);
		post_send(b, mr, sb, i);
		wait(cq, 2, &sends, &recvs, &bytes);
		if (memcmp(ra, sa, SIZE) != 0)
			mismatches++;
	}
	printf("rounds %d sends %d recvs %d bytes %u mismatches %d\n", ROUNDS, sends, recvs, bytes, mismatches);

	if (ibv_destroy_qp(a) || ibv_destroy_qp(b) || ibv_dereg_mr(mr) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd))
		FAIL("destroy: %s", strerror(errno));
	close_test_device(&d);
	printf("done\n");
	return 0;
}
