/*
 * Completion events through libibverbs and libmlx5 as packaged, for
 * TestCQEventsUnderPreload: a CQ with a completion channel is armed with
 * ibv_req_notify_cq (libmlx5 writes the arm word of the doorbell record
 * and rings the UAR), a SEND completes into it, and ibv_get_cq_event
 * returns the CQ and its context. Unarmed CQs and solicited arms raise no
 * event for an unsolicited completion; a CQ destroyed with an event
 * unread is destroyed without waiting. Each line it prints is a value the
 * test checks; it exits non-zero at the first verb that does not behave
 * as on a ConnectX.
 */
#include <poll.h>
#include <time.h>

#include "verbs_common.h"

#define ROUNDS 20
#define SIZE 64

static struct ibv_mr *mr;
static char buf[2 * SIZE];

static void post_recv(struct ibv_qp *qp)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf + SIZE, .length = SIZE, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *bad;
	int ret = ibv_post_recv(qp, &wr, &bad);

	if (ret)
		FAIL("ibv_post_recv: %s", strerror(ret));
}

static void post_send(struct ibv_qp *qp, int flags)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = SIZE, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | flags }, *bad;
	int ret = ibv_post_send(qp, &wr, &bad);

	if (ret)
		FAIL("ibv_post_send: %s", strerror(ret));
}

/* one polls a CQ until one completion arrives and checks it. */
static void one(struct ibv_cq *cq, enum ibv_wc_opcode op)
{
	struct ibv_wc wc;
	time_t end = time(NULL) + 10;
	int got;

	while ((got = ibv_poll_cq(cq, 1, &wc)) == 0)
		if (time(NULL) > end)
			FAIL("no completion");
	if (got < 0 || wc.status != IBV_WC_SUCCESS || wc.opcode != op)
		FAIL("completion: got %d status %d opcode %d", got, wc.status, wc.opcode);
}

/* readable reports whether fd has something to read within ms. */
static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int n = poll(&p, 1, ms);

	if (n < 0)
		FAIL("poll: %s", strerror(errno));
	return n > 0 && (p.revents & POLLIN);
}

int main(void)
{
	struct test_device d;
	struct ibv_context *ctx;
	struct ibv_comp_channel *ch;
	struct ibv_pd *pd;
	struct ibv_cq *plain, *evcq, *got;
	struct ibv_qp *a, *b;
	struct ibv_port_attr pa;
	union ibv_gid gid;
	void *cq_ctx;
	int i, events = 0;

	open_test_device(&d);
	ctx = d.ctx;
	pa = d.pa;
	gid = d.gid;
	printf("async fd readable: %d\n", readable(ctx->async_fd, 0));
	ch = ibv_create_comp_channel(ctx);
	pd = ibv_alloc_pd(ctx);
	plain = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	evcq = ibv_create_cq(ctx, 64, (void *)0x1234, ch, 0);
	if (!ch || !pd || !plain || !evcq)
		FAIL("channel, pd or cq: %s", strerror(errno));
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		FAIL("ibv_reg_mr: %s", strerror(errno));
	a = make_test_qp(pd, plain, plain, NULL, IBV_QPT_RC, 16);
	b = make_test_qp(pd, plain, evcq, NULL, IBV_QPT_RC, 16);
	connect_rc(a, b->qp_num, &pa, &gid, IBV_ACCESS_LOCAL_WRITE);
	connect_rc(b, a->qp_num, &pa, &gid, IBV_ACCESS_LOCAL_WRITE);

	/* Not armed: the completion arrives, no event. */
	post_recv(b);
	post_send(a, 0);
	one(plain, IBV_WC_SEND);
	one(evcq, IBV_WC_RECV);
	printf("unarmed event: %d\n", readable(ch->fd, 100));

	for (i = 0; i < ROUNDS; i++) {
		if (ibv_req_notify_cq(evcq, 0))
			FAIL("ibv_req_notify_cq");
		post_recv(b);
		post_send(a, 0);
		one(plain, IBV_WC_SEND);
		if (!readable(ch->fd, 5000))
			FAIL("no event in round %d", i);
		if (ibv_get_cq_event(ch, &got, &cq_ctx))
			FAIL("ibv_get_cq_event: %s", strerror(errno));
		if (got != evcq || cq_ctx != (void *)0x1234)
			FAIL("event names cq %p context %p", (void *)got, cq_ctx);
		ibv_ack_cq_events(got, 1);
		events++;
		one(evcq, IBV_WC_RECV);
		if (readable(ch->fd, 0))
			FAIL("a second event in round %d", i);
	}
	printf("events %d\n", events);

	/* Solicited only: an unsolicited SEND raises nothing, a solicited one does. */
	if (ibv_req_notify_cq(evcq, 1))
		FAIL("ibv_req_notify_cq solicited");
	post_recv(b);
	post_send(a, 0);
	one(plain, IBV_WC_SEND);
	one(evcq, IBV_WC_RECV);
	printf("solicited arm, unsolicited send: %d\n", readable(ch->fd, 100));
	post_recv(b);
	post_send(a, IBV_SEND_SOLICITED);
	one(plain, IBV_WC_SEND);
	printf("solicited arm, solicited send: %d\n", readable(ch->fd, 5000));
	if (ibv_get_cq_event(ch, &got, &cq_ctx) || got != evcq)
		FAIL("solicited event");
	ibv_ack_cq_events(got, 1);
	one(evcq, IBV_WC_RECV);

	/* An event left unread when the CQ is destroyed: the kernel takes it
	 * out of the channel and ibv_destroy_cq does not wait for it. */
	if (ibv_req_notify_cq(evcq, 0))
		FAIL("ibv_req_notify_cq");
	post_recv(b);
	post_send(a, 0);
	one(plain, IBV_WC_SEND);
	if (!readable(ch->fd, 5000))
		FAIL("no last event");
	printf("async fd readable: %d\n", readable(ctx->async_fd, 0));
	if (ibv_destroy_qp(a) || ibv_destroy_qp(b) || ibv_destroy_cq(evcq))
		FAIL("destroy: %s", strerror(errno));
	printf("channel readable after destroy: %d\n", readable(ch->fd, 0));
	if (ibv_dereg_mr(mr) || ibv_destroy_cq(plain) || ibv_dealloc_pd(pd) || ibv_destroy_comp_channel(ch))
		FAIL("destroy: %s", strerror(errno));
	close_test_device(&d);
	printf("done\n");
	return 0;
}
