/*
 * A DCI sends to a DCT of the same process through libibverbs and libmlx5
 * as packaged: mlx5dv_create_qp with MLX5DV_QP_INIT_ATTR_MASK_DC for both,
 * the DCT receiving through an SRQ (ibv_post_srq_recv), the DCI posting
 * with the ibv_wr_* API and mlx5dv_wr_set_dc_addr, ibv_poll_cq for both,
 * whether short messages' payloads were scattered to the DCT's CQEs, for
 * TestDCUnderPreload. Each line it prints is a value the test checks;
 * it exits non-zero at the first verb that does not behave as on a
 * ConnectX. InfiniBand ports only: on RoCE, libmlx5 asks the kernel for
 * the address handle's MAC (CREATE_AH).
 */
#include <time.h>
#include <infiniband/mlx5dv.h>

#include "verbs_common.h"

#define MSGS 100
#define SIZE 200
#define KEY 0x0123456789abcdefULL

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, const char *what)
{
	int ret = ibv_modify_qp(qp, a, mask);

	if (ret)
		FAIL("modify %s: %s", what, strerror(ret));
}

static void post_srq_recv(struct ibv_srq *srq, struct ibv_mr *mr, char *buf, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = SIZE, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	int ret = ibv_post_srq_recv(srq, &wr, &bad);

	if (ret)
		FAIL("ibv_post_srq_recv: %s", strerror(ret));
}

int main(void)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_srq *srq;
	struct ibv_qp *dci, *dct;
	struct ibv_qp_ex *qpx;
	struct mlx5dv_qp_ex *mqpx;
	struct ibv_ah *ah;
	struct ibv_port_attr pa;
	struct ibv_qp_attr a;
	static char buf[3 * SIZE];
	char *tx = buf, *rx = buf + SIZE;
	int n, i, sends = 0, recvs = 0, wrong = 0, mismatches = 0, ret;

	list = ibv_get_device_list(&n);
	if (!list || n == 0)
		FAIL("no device");
	ctx = ibv_open_device(list[0]);
	if (!ctx)
		FAIL("ibv_open_device: %s", strerror(errno));
	if (ibv_query_port(ctx, 1, &pa))
		FAIL("query port");
	if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND)
		FAIL("InfiniBand ports only");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!pd || !cq)
		FAIL("pd or cq: %s", strerror(errno));
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		FAIL("ibv_reg_mr: %s", strerror(errno));
	{
		struct ibv_srq_init_attr ia = { .attr = { .max_wr = 16, .max_sge = 1 } };

		srq = ibv_create_srq(pd, &ia);
		if (!srq)
			FAIL("ibv_create_srq: %s", strerror(errno));
	}

	/* The DCT: no rings of its own, receives through the SRQ. */
	{
		struct ibv_qp_init_attr_ex ia = {
			.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_DRIVER,
			.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd,
		};
		struct mlx5dv_qp_init_attr dv = {
			.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
			.dc_init_attr = { .dc_type = MLX5DV_DCTYPE_DCT, .dct_access_key = KEY },
		};

		dct = mlx5dv_create_qp(ctx, &ia, &dv);
		if (!dct)
			FAIL("mlx5dv_create_qp DCT: %s", strerror(errno));
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	modify(dct, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "DCT INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = 1;
	a.ah_attr.dlid = pa.lid;
	modify(dct, &a, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU, "DCT RTR");
	printf("dct number known: %d\n", dct->qp_num != 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	printf("DCT to RTS: %s\n", strerror(ibv_modify_qp(dct, &a, IBV_QP_STATE)));

	/* The DCI: a send ring, posted with the ibv_wr_* API. */
	{
		struct ibv_qp_init_attr_ex ia = {
			.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_DRIVER,
			.cap = { .max_send_wr = 16, .max_send_sge = 1 },
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
			.send_ops_flags = IBV_QP_EX_WITH_SEND,
		};
		struct mlx5dv_qp_init_attr dv = {
			.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
			.dc_init_attr = { .dc_type = MLX5DV_DCTYPE_DCI },
		};

		dci = mlx5dv_create_qp(ctx, &ia, &dv);
		if (!dci)
			FAIL("mlx5dv_create_qp DCI: %s", strerror(errno));
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	modify(dci, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT, "DCI INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	modify(dci, &a, IBV_QP_STATE | IBV_QP_PATH_MTU, "DCI RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	modify(dci, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
	       IBV_QP_MAX_QP_RD_ATOMIC, "DCI RTS");
	qpx = ibv_qp_to_qp_ex(dci);
	mqpx = mlx5dv_qp_ex_from_ibv_qp_ex(qpx);
	{
		struct ibv_ah_attr aa = { .dlid = pa.lid, .port_num = 1 };

		ah = ibv_create_ah(pd, &aa);
		if (!ah)
			FAIL("ibv_create_ah: %s", strerror(errno));
	}

	for (i = 0; i < MSGS; i++) {
		struct ibv_wc wc;
		time_t end = time(NULL) + 10;
		int len = 1 + (i * 37) % SIZE, got = 0;

		memset(tx, 'A' + i % 26, len);
		memset(rx, 0, SIZE);
		post_srq_recv(srq, mr, rx, i);
		ibv_wr_start(qpx);
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(qpx);
		mlx5dv_wr_set_dc_addr(mqpx, ah, dct->qp_num, KEY);
		ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)tx, len);
		if ((ret = ibv_wr_complete(qpx)))
			FAIL("ibv_wr_complete: %s", strerror(ret));
		while (got < 2) {
			int k = ibv_poll_cq(cq, 1, &wc);

			if (k < 0)
				FAIL("ibv_poll_cq: %d", k);
			if (k == 0) {
				if (time(NULL) > end)
					FAIL("no completion for message %d", i);
				continue;
			}
			got++;
			if (wc.status != IBV_WC_SUCCESS)
				FAIL("wc status %s wr_id %llu", ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id);
			if (wc.opcode == IBV_WC_SEND) {
				sends++;
				if (wc.qp_num != dci->qp_num || wc.wr_id != (uint64_t)i)
					wrong++;
			} else if (wc.opcode == IBV_WC_RECV) {
				recvs++;
				if (wc.qp_num != dct->qp_num || wc.src_qp != dci->qp_num || wc.byte_len != (uint32_t)len ||
				    wc.wr_id != (uint64_t)i)
					wrong++;
			} else {
				wrong++;
			}
		}
		if (memcmp(tx, rx, len) != 0)
			mismatches++;
	}
	printf("messages %d sends %d recvs %d wrong %d mismatches %d\n", MSGS, sends, recvs, wrong, mismatches);

	/*
	 * libmlx5 asks scatter-to-CQE for a DCT (its default, MLX5_SCATTER_TO_CQE
	 * unset) only when the kernel announces it for DCTs, as mlx5_ib does on
	 * every device, and mlx5_ib turns it on only over 128-byte CQEs
	 * (MLX5_CQE_SIZE=128): the receive CQEs of the short messages then
	 * carry the payload (format bits of op_own), which ibv_poll_cq copied
	 * out of them above. The ring still holds the CQEs of the last messages.
	 */
	{
		struct mlx5dv_cq dvcq;
		struct mlx5dv_obj obj = { .cq = { .in = cq, .out = &dvcq } };
		int scattered = 0;
		uint32_t k;

		if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ))
			FAIL("mlx5dv_init_obj CQ");
		for (k = 0; k < dvcq.cqe_cnt; k++) {
			struct mlx5_cqe64 *c = (void *)((char *)dvcq.buf + k * dvcq.cqe_size + dvcq.cqe_size - 64);

			if (mlx5dv_get_cqe_opcode(c) == MLX5_CQE_RESP_SEND &&
			    (c->op_own & (MLX5_INLINE_SCATTER_32 | MLX5_INLINE_SCATTER_64)))
				scattered++;
		}
		printf("DCT receives scattered to the CQE: %s\n", scattered ? "yes" : "no");
	}

	if (ibv_destroy_ah(ah) || ibv_destroy_qp(dci) || ibv_destroy_qp(dct) || ibv_destroy_srq(srq) ||
	    ibv_dereg_mr(mr) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd))
		FAIL("destroy: %s", strerror(errno));
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("done\n");
	return 0;
}
