/*
 * Creates and destroys verbs objects through libibverbs and libmlx5 as
 * packaged, for TestVerbsObjectsUnderPreload: each line it prints is a
 * value the test checks; it exits non-zero at the first verb that does
 * not behave as on a ConnectX.
 */
#include <sys/mman.h>
#include <infiniband/mlx5dv.h>

#include "verbs_common.h"


int main(void)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr, *bad;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct mlx5dv_obj obj;
	struct mlx5dv_cq dvcq;
	size_t len = 1 << 16;
	void *buf;
	int n, ret;

	list = ibv_get_device_list(&n);
	if (!list || n == 0)
		FAIL("no device");
	ctx = ibv_open_device(list[0]);
	if (!ctx)
		FAIL("ibv_open_device: %s", strerror(errno));

	pd = ibv_alloc_pd(ctx);
	if (!pd)
		FAIL("ibv_alloc_pd: %s", strerror(errno));
	printf("pd handle %u\n", pd->handle);

	buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		FAIL("mmap");
	mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!mr)
		FAIL("ibv_reg_mr: %s", strerror(errno));
	printf("mr lkey %#x rkey %#x length %zu\n", mr->lkey, mr->rkey, mr->length);

	bad = ibv_reg_mr(pd, buf, len, IBV_ACCESS_REMOTE_WRITE);
	printf("reg_mr remote write alone: %s\n", bad ? "accepted" : strerror(errno));
	ret = ibv_dealloc_pd(pd);
	printf("dealloc_pd with an mr: %s\n", strerror(ret));

	ch = ibv_create_comp_channel(ctx);
	if (!ch)
		FAIL("ibv_create_comp_channel: %s", strerror(errno));
	cq = ibv_create_cq(ctx, 100, NULL, ch, 0);
	if (!cq)
		FAIL("ibv_create_cq: %s", strerror(errno));
	obj.cq.in = cq;
	obj.cq.out = &dvcq;
	if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ))
		FAIL("mlx5dv_init_obj");
	printf("cq cqe %d cqn %#x cqe_cnt %u cqe_size %u\n", cq->cqe, dvcq.cqn, dvcq.cqe_cnt, dvcq.cqe_size);
	cq = (ibv_destroy_cq(cq) == 0) ? NULL : cq;
	if (cq)
		FAIL("ibv_destroy_cq");
	if (ibv_destroy_comp_channel(ch))
		FAIL("ibv_destroy_comp_channel");
	cq = ibv_create_cq(ctx, 100, NULL, NULL, 1000);
	printf("create_cq vector 1000: %s\n", cq ? "accepted" : strerror(errno));

	if (ibv_dereg_mr(mr))
		FAIL("ibv_dereg_mr");
	if ((ret = ibv_dealloc_pd(pd)))
		FAIL("ibv_dealloc_pd: %s", strerror(ret));
	if (ibv_close_device(ctx))
		FAIL("ibv_close_device");
	ibv_free_device_list(list);
	printf("done\n");
	return 0;
}
