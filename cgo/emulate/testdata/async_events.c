/*
 * Async events through libibverbs and libmlx5 as packaged, for
 * TestAsyncEventsUnderPreload: ibv_get_async_event returns, each naming
 * the object it concerns, an SRQ limit armed with ibv_modify_srq and
 * reached by SENDs (the limit reads 0 afterwards, and no second event
 * follows), a CQ overrun (CQ error on the CQ, then QP fatal on the QP that
 * completed into it), and the last WQE reached of a QP on the SRQ moved to
 * error; each is acknowledged with ibv_ack_async_event. A QP destroyed
 * with its event unread is destroyed at once and the event is gone; every
 * other destroy returns once its read events are acknowledged. Each line
 * it prints is a value the test checks; it exits non-zero at the first
 * verb that does not behave as on a ConnectX, and an alarm ends it if a
 * destroy waits for acknowledgements that never come.
 */
#include <poll.h>
#include <unistd.h>

#include "verbs_common.h"

#define SIZE 64
#define SRQ_WR 16

static struct ibv_mr *mr;
static char buf[4 * SIZE];

static void post_srq_recv(struct ibv_srq *srq, int n)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf + SIZE, .length = SIZE, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *bad;
	int ret;

	while (n-- > 0)
		if ((ret = ibv_post_srq_recv(srq, &wr, &bad)))
			FAIL("ibv_post_srq_recv: %s", strerror(ret));
}

static void post(struct ibv_qp *qp, enum ibv_wr_opcode op, int n)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = SIZE, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	int ret;

	if (op == IBV_WR_RDMA_WRITE) {
		wr.wr.rdma.remote_addr = (uintptr_t)buf + 2 * SIZE;
		wr.wr.rdma.rkey = mr->rkey;
	}
	while (n-- > 0)
		if ((ret = ibv_post_send(qp, &wr, &bad)))
			FAIL("ibv_post_send: %s", strerror(ret));
}

/* poll_n polls n successful completions from cq. */
static void poll_n(struct ibv_cq *cq, int n)
{
	struct timespec start, now;
	struct ibv_wc wc;

	clock_gettime(CLOCK_MONOTONIC, &start);
	while (n > 0) {
		int got = ibv_poll_cq(cq, 1, &wc);

		if (got < 0)
			FAIL("ibv_poll_cq");
		if (got == 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec - start.tv_sec > 5)
				FAIL("completion timeout");
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS)
			FAIL("completion status %s", ibv_wc_status_str(wc.status));
		n--;
	}
}

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static struct ibv_context *ctx;
static struct ibv_qp *qa, *qb, *qc;
static struct ibv_cq *scq, *cq;
static struct ibv_srq *srq;

/* event waits for the next async event, prints its type and the object it
 * names, and acknowledges it. */
static void event(void)
{
	struct ibv_async_event ev;
	const char *what = "?";

	if (!readable(ctx->async_fd, 5000))
		FAIL("no async event");
	if (ibv_get_async_event(ctx, &ev))
		FAIL("ibv_get_async_event: %s", strerror(errno));
	switch (ev.event_type) {
	case IBV_EVENT_CQ_ERR:
		what = ev.element.cq == scq ? "send cq" : ev.element.cq == cq ? "cq" : "another cq";
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
	case IBV_EVENT_COMM_EST:
		what = ev.element.qp == qa ? "qp a" : ev.element.qp == qb ? "qp b" : "another qp";
		break;
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		what = ev.element.srq == srq ? "srq" : "another srq";
		break;
	default:
		break;
	}
	printf("event %s: %s\n", ibv_event_type_str(ev.event_type), what);
	ibv_ack_async_event(&ev);
}

static unsigned srq_limit(void)
{
	struct ibv_srq_attr sa;
	int ret;

	if ((ret = ibv_query_srq(srq, &sa)))
		FAIL("ibv_query_srq: %s", strerror(ret));
	return sa.srq_limit;
}

int main(void)
{
	struct test_device d;
	struct ibv_srq_init_attr ia = { .attr = { .max_wr = SRQ_WR, .max_sge = 1 } };
	struct ibv_srq_attr sa = { .srq_limit = 3 };
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	int ret, access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

	/* A destroy that waits for acknowledgements never given hangs. */
	alarm(60);
	open_test_device(&d);
	ctx = d.ctx;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);

	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	scq = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	if (!pd || !cq || !scq)
		FAIL("pd or cq: %s", strerror(errno));
	mr = ibv_reg_mr(pd, buf, sizeof(buf), access);
	srq = ibv_create_srq(pd, &ia);
	if (!mr || !srq)
		FAIL("mr or srq: %s", strerror(errno));
	qa = make_test_qp(pd, scq, cq, NULL, IBV_QPT_RC, 32);
	qb = make_test_qp(pd, cq, cq, srq, IBV_QPT_RC, 32);
	qc = make_test_qp(pd, cq, cq, srq, IBV_QPT_RC, 32);
	connect_rc(qa, qb->qp_num, &d.pa, &d.gid, access);
	ready_rc(qb, qa->qp_num, &d.pa, &d.gid, access);
	printf("async fd readable: %d\n", readable(ctx->async_fd, 0));

	/* qb in RTR receives its first packet: communication established,
	 * once; then qb moves to RTS. */
	post_srq_recv(srq, 2);
	for (int i = 0; i < 2; i++) {
		post(qa, IBV_WR_SEND, 1);
		poll_n(cq, 1);
		poll_n(scq, 1);
	}
	event();
	printf("after the second packet: readable %d\n", readable(ctx->async_fd, 0));
	send_rc(qb);

	/* SRQ limit 3 with 4 receives posted: the second SEND leaves 2. */
	post_srq_recv(srq, 4);
	if ((ret = ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT)))
		FAIL("ibv_modify_srq: %s", strerror(ret));
	printf("srq limit armed: %u\n", srq_limit());
	post(qa, IBV_WR_SEND, 1);
	poll_n(cq, 1);
	poll_n(scq, 1);
	printf("one below four: readable %d\n", readable(ctx->async_fd, 0));
	post(qa, IBV_WR_SEND, 1);
	poll_n(cq, 1);
	poll_n(scq, 1);
	event();
	printf("srq limit after the event: %u\n", srq_limit());
	post(qa, IBV_WR_SEND, 1);
	poll_n(cq, 1);
	poll_n(scq, 1);
	printf("disarmed: readable %d\n", readable(ctx->async_fd, 0));

	/* RDMA WRITEs into a send CQ nobody polls: the CQ overruns. */
	post(qa, IBV_WR_RDMA_WRITE, scq->cqe + 3);
	event();
	event();

	/* qb and qc, on the SRQ, moved to error. qc's event is left unread. */
	if ((ret = ibv_modify_qp(qb, &err, IBV_QP_STATE)))
		FAIL("modify qb to ERR: %s", strerror(ret));
	event();
	if ((ret = ibv_modify_qp(qc, &(struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1 },
				 IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) ||
	    (ret = ibv_modify_qp(qc, &err, IBV_QP_STATE)))
		FAIL("modify qc to ERR: %s", strerror(ret));
	if (!readable(ctx->async_fd, 5000))
		FAIL("no event for qc");
	if (ibv_destroy_qp(qc))
		FAIL("ibv_destroy_qp qc: %s", strerror(errno));
	printf("after destroying qc: readable %d\n", readable(ctx->async_fd, 0));

	if (ibv_destroy_qp(qa) || ibv_destroy_qp(qb))
		FAIL("ibv_destroy_qp: %s", strerror(errno));
	if (ibv_destroy_srq(srq))
		FAIL("ibv_destroy_srq: %s", strerror(errno));
	if (ibv_destroy_cq(scq) || ibv_destroy_cq(cq))
		FAIL("ibv_destroy_cq: %s", strerror(errno));
	if (ibv_dereg_mr(mr) || ibv_dealloc_pd(pd))
		FAIL("destroy: %s", strerror(errno));
	close_test_device(&d);
	printf("done\n");
	return 0;
}
