/*
 * Two UD QPs of one process exchange datagrams through libibverbs and
 * libmlx5 as packaged, in the way of ibv_ud_pingpong: ibv_create_ah (on
 * RoCE the kernel answers the destination MAC), ibv_post_recv,
 * ibv_post_send (SEND with the AH, remote QPN and Q_Key), ibv_poll_cq, for
 * TestUDPingPongUnderPreload. Each line it prints is a value the test
 * checks; it exits non-zero at the first verb that does not behave as on a
 * ConnectX.
 */
#include <time.h>
#include <infiniband/mlx5dv.h>

#include "verbs_common.h"

#define ROUNDS 100
#define SIZE 256
#define GRH 40
#define QKEY 0x11111111

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp *qp = make_test_qp(pd, cq, cq, NULL, IBV_QPT_UD, 16);

	ready_ud(qp, QKEY);
	return qp;
}

static void post_send(struct ibv_qp *qp, struct ibv_ah *ah, uint32_t peer, struct ibv_mr *mr, char *buf, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = SIZE, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	int ret;

	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = peer;
	wr.wr.ud.remote_qkey = QKEY;
	if ((ret = ibv_post_send(qp, &wr, &bad)))
		FAIL("ibv_post_send: %s", strerror(ret));
}

/* wait polls until n completions arrived, checking each. */
static void wait(struct ibv_cq *cq, int n, uint32_t src, int *sends, int *recvs, uint32_t *bytes, int *wrong)
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
			if (wc.src_qp != src)
				(*wrong)++;
		}
		n--;
	}
}

static struct ibv_ah *make_ah(struct ibv_pd *pd, struct ibv_port_attr *pa, union ibv_gid *gid)
{
	struct ibv_ah_attr a = { .port_num = 1, .dlid = pa->lid, .sl = 0 };
	struct ibv_ah *ah;

	if (pa->link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.is_global = 1;
		a.grh.dgid = *gid;
		a.grh.sgid_index = 0;
		a.grh.hop_limit = 64;
	}
	ah = ibv_create_ah(pd, &a);
	if (!ah)
		FAIL("ibv_create_ah: %s", strerror(errno));
	return ah;
}

int main(void)
{
	struct test_device d;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_qp *a, *b;
	struct ibv_ah *ah;
	struct ibv_ah_attr nograh = { .port_num = 1, .dlid = 1 };
	struct ibv_port_attr pa;
	union ibv_gid gid, unknown;
	static char buf[4 * (GRH + SIZE)];
	char *sa = buf, *ra = buf + (GRH + SIZE), *sb = buf + 2 * (GRH + SIZE), *rb = buf + 3 * (GRH + SIZE);
	int i, sends = 0, recvs = 0, mismatches = 0;
	uint32_t bytes = 0;
	int wrong = 0;
	struct mlx5dv_ah dvah;
	struct mlx5dv_obj obj;
	uint8_t *rmac;

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
	a = make_qp(pd, cq);
	b = make_qp(pd, cq);
	ah = make_ah(pd, &pa, &gid);
	printf("link %s\n", pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "ethernet" : "infiniband");
	/* The address vector libmlx5 built: on RoCE its MAC is the kernel's answer. */
	obj.ah.in = ah;
	obj.ah.out = &dvah;
	if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH))
		FAIL("mlx5dv_init_obj AH");
	rmac = dvah.av->rmac;
	printf("ah rmac %02x:%02x:%02x:%02x:%02x:%02x\n", rmac[0], rmac[1], rmac[2], rmac[3], rmac[4], rmac[5]);

	if (pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
		/* No GRH on RoCE: libmlx5 refuses it itself. */
		errno = 0;
		if (ibv_create_ah(pd, &nograh))
			FAIL("ibv_create_ah without a GRH on RoCE succeeded");
		printf("ah without grh: %s\n", strerror(errno));
		/* An IPv4 address no port of the fabric has: no neighbour answers. */
		memset(&unknown, 0, sizeof(unknown));
		unknown.raw[10] = 0xff;
		unknown.raw[11] = 0xff;
		unknown.raw[12] = 10;
		unknown.raw[13] = 99;
		unknown.raw[14] = 99;
		unknown.raw[15] = 99;
		nograh.is_global = 1;
		nograh.grh.dgid = unknown;
		/* From the RoCE v2 IPv4-mapped GID: one IP family, which the
		 * kernel's neighbour resolution needs before it asks. */
		nograh.grh.sgid_index = 3;
		nograh.grh.hop_limit = 1;
		errno = 0;
		if (ibv_create_ah(pd, &nograh))
			FAIL("ibv_create_ah to an unknown GID succeeded");
		printf("ah to unknown gid: %s\n", strerror(errno));
	}

	/* a pings b, b pongs back what it got, ROUNDS times. */
	for (i = 0; i < ROUNDS; i++) {
		memset(sa, 'a' + i % 26, SIZE);
		post_recv_buf(b, mr, rb, GRH + SIZE, 2 * i);
		post_recv_buf(a, mr, ra, GRH + SIZE, 2 * i + 1);
		post_send(a, ah, b->qp_num, mr, sa, i);
		wait(cq, 2, a->qp_num, &sends, &recvs, &bytes, &wrong);
		memcpy(sb, rb + GRH, SIZE);
		post_send(b, ah, a->qp_num, mr, sb, i);
		wait(cq, 2, b->qp_num, &sends, &recvs, &bytes, &wrong);
		if (memcmp(ra + GRH, sa, SIZE) != 0)
			mismatches++;
	}
	printf("rounds %d sends %d recvs %d bytes %u mismatches %d wrong sources %d\n", ROUNDS, sends, recvs, bytes,
	       mismatches, wrong);

	if (ibv_destroy_ah(ah))
		FAIL("ibv_destroy_ah: %s", strerror(errno));
	if (ibv_destroy_qp(a) || ibv_destroy_qp(b) || ibv_dereg_mr(mr) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd))
		FAIL("destroy: %s", strerror(errno));
	close_test_device(&d);
	printf("done\n");
	return 0;
}
