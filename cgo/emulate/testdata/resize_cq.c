/*
 * ibv_resize_cq through libibverbs and libmlx5 as packaged, for
 * TestResizeCQUnderPreload. Signalled RDMA writes on an RC loopback put
 * completions in a CQ; the CQ is grown and shrunk with completions
 * outstanding (libmlx5 copies them from the old ring up to the device's
 * resize CQE), and every wr_id must then be polled once, in order. An
 * armed CQ resized still raises its event; a resize below the completions
 * outstanding, to no entries, or of a CQ in error is refused. Each line it
 * prints is a value the test checks; it exits non-zero at the first verb
 * that does not behave as on a ConnectX.
 */
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "verbs_common.h"

#define WRITES 64

static struct ibv_mr *mr;
static uint64_t src[WRITES];
static volatile uint64_t dst[WRITES];
static uint32_t rkey;
static uint64_t next_id, next_poll;

/* post posts n signalled 8-byte RDMA writes, wr_id next_id on; write i
 * writes i+1 to dst[i % WRITES]. */
static void post(struct ibv_qp *qp, int n)
{
	for (; n > 0; n--, next_id++) {
		uint64_t i = next_id % WRITES;
		struct ibv_sge sge = { .addr = (uintptr_t)&src[i], .length = 8, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = next_id, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
					  .wr.rdma = { .remote_addr = (uintptr_t)&dst[i], .rkey = rkey } }, *bad;
		int ret;

		src[i] = next_id + 1;
		if ((ret = ibv_post_send(qp, &wr, &bad)))
			FAIL("ibv_post_send: %s", strerror(ret));
	}
}

/* settle waits until the last write posted has landed and gives its
 * completion time to reach the CQ. */
static void settle(void)
{
	time_t end = time(NULL) + 10;

	while (dst[(next_id - 1) % WRITES] != next_id)
		if (time(NULL) > end)
			FAIL("write %llu did not land", (unsigned long long)(next_id - 1));
	usleep(50000);
}

/* expect polls n completions, one at a time, and requires them to be the
 * next wr_ids in order, successful RDMA writes. */
static void expect(struct ibv_cq *cq, int n)
{
	time_t end = time(NULL) + 10;
	struct ibv_wc wc;
	int got;

	while (n > 0) {
		got = ibv_poll_cq(cq, 1, &wc);
		if (got < 0)
			FAIL("ibv_poll_cq: %d", got);
		if (got == 0) {
			if (time(NULL) > end)
				FAIL("no completion for wr_id %llu", (unsigned long long)next_poll);
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RDMA_WRITE || wc.wr_id != next_poll)
			FAIL("completion: wr_id %llu (want %llu) status %d opcode %d", (unsigned long long)wc.wr_id,
			     (unsigned long long)next_poll, wc.status, wc.opcode);
		next_poll++;
		n--;
	}
}

static void empty(struct ibv_cq *cq, const char *when)
{
	struct ibv_wc wc;

	if (ibv_poll_cq(cq, 1, &wc) != 0)
		FAIL("a completion too many %s: wr_id %llu", when, (unsigned long long)wc.wr_id);
}

static void resize(struct ibv_cq *cq, int cqe)
{
	int ret = ibv_resize_cq(cq, cqe);

	if (ret)
		FAIL("ibv_resize_cq %d: %s", cqe, strerror(ret));
}

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int n = poll(&p, 1, ms);

	if (n < 0)
		FAIL("poll: %s", strerror(errno));
	return n > 0 && (p.revents & POLLIN);
}

static void event(struct ibv_comp_channel *ch, struct ibv_cq *cq)
{
	struct ibv_cq *got;
	void *cq_ctx;

	if (!readable(ch->fd, 5000))
		FAIL("no event");
	if (ibv_get_cq_event(ch, &got, &cq_ctx) || got != cq)
		FAIL("ibv_get_cq_event");
	ibv_ack_cq_events(got, 1);
}

int main(void)
{
	struct test_device d;
	struct ibv_comp_channel *ch;
	struct ibv_pd *pd;
	struct ibv_cq *cq, *rcq;
	struct ibv_qp *a, *b;
	int ret;

	open_test_device(&d);
	ch = ibv_create_comp_channel(d.ctx);
	pd = ibv_alloc_pd(d.ctx);
	cq = ibv_create_cq(d.ctx, 15, NULL, ch, 0);
	rcq = ibv_create_cq(d.ctx, 15, NULL, NULL, 0);
	if (!ch || !pd || !cq || !rcq)
		FAIL("channel, pd or cq: %s", strerror(errno));
	mr = ibv_reg_mr(pd, (void *)src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(pd, (void *)dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr || !dmr)
		FAIL("ibv_reg_mr: %s", strerror(errno));
	rkey = dmr->rkey;
	a = make_test_qp(pd, cq, rcq, NULL, IBV_QPT_RC, 64);
	b = make_test_qp(pd, rcq, rcq, NULL, IBV_QPT_RC, 16);
	connect_rc(a, b->qp_num, &d.pa, &d.gid, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	connect_rc(b, a->qp_num, &d.pa, &d.gid, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	printf("cqe %d\n", cq->cqe);

	/* Grow with 7 completions outstanding, then 10 more. */
	post(a, 10);
	settle();
	expect(cq, 3);
	resize(cq, 40);
	printf("grown: cqe %d\n", cq->cqe);
	post(a, 10);
	settle();
	expect(cq, 17);
	empty(cq, "after growing");
	printf("grown: %llu in order\n", (unsigned long long)next_poll);

	/* Shrink with 8 outstanding: not to 4 entries, to 16. */
	post(a, 10);
	settle();
	expect(cq, 2);
	ret = ibv_resize_cq(cq, 3);
	printf("shrink below the outstanding: %s\n", strerror(ret));
	resize(cq, 8);
	printf("shrunk: cqe %d\n", cq->cqe);
	post(a, 5);
	settle();
	expect(cq, 13);
	empty(cq, "after shrinking");
	printf("shrunk: %llu in order\n", (unsigned long long)next_poll);

	/* The size it has: nothing to do. No entries: EINVAL. */
	printf("same size: %d\n", ibv_resize_cq(cq, cq->cqe));
	printf("no entries: %s\n", strerror(ibv_resize_cq(cq, 0)));

	/* Armed, then resized empty: the next completion raises the event. */
	if (ibv_req_notify_cq(cq, 0))
		FAIL("ibv_req_notify_cq");
	resize(cq, 31);
	post(a, 1);
	event(ch, cq);
	expect(cq, 1);
	/* Armed, the event raised, resized with 3 outstanding, armed again:
	 * the next completion raises the next event. */
	if (ibv_req_notify_cq(cq, 0))
		FAIL("ibv_req_notify_cq");
	post(a, 3);
	settle();
	event(ch, cq);
	resize(cq, 7);
	if (ibv_req_notify_cq(cq, 0))
		FAIL("ibv_req_notify_cq");
	post(a, 1);
	event(ch, cq);
	expect(cq, 4);
	empty(cq, "after the armed resizes");
	printf("armed: cqe %d, %llu in order\n", cq->cqe, (unsigned long long)next_poll);

	/* Overrun: 9 completions in 8 entries put the CQ in error. Polling 4
	 * of the 8 leaves room for a resize CQE: refused all the same. */
	post(a, 9);
	usleep(200000);
	expect(cq, 4);
	printf("resize in error: %s\n", strerror(ibv_resize_cq(cq, 63)));

	if (ibv_destroy_qp(a) || ibv_destroy_qp(b) || ibv_destroy_cq(cq) || ibv_destroy_cq(rcq))
		FAIL("destroy: %s", strerror(errno));
	if (ibv_dereg_mr(mr) || ibv_dereg_mr(dmr) || ibv_dealloc_pd(pd) || ibv_destroy_comp_channel(ch))
		FAIL("destroy: %s", strerror(errno));
	close_test_device(&d);
	printf("done\n");
	return 0;
}
