//go:build cgo

#include <endian.h>
#include <stdint.h>
#include <string.h>
#include <infiniband/mlx5dv.h>

#include "cfloor.h"

/* The barriers of rdma-core's util/udma_barrier.h for the two
 * architectures the kit has assembly for, except the one after a CQE's
 * ownership check on x86-64: the floor orders it as the Go loop does
 * (blueflame.OwnershipBarrier), with no instruction by default, as UCX and
 * DPDK do, and with rdma-core's lfence when built with the tag
 * mlx5kit_lfence (which defines FLOOR_LFENCE, see cfloor_lfence.go). */
#if defined(__x86_64__)
#define to_device_barrier() asm volatile("" ::: "memory")
#ifdef FLOOR_LFENCE
#define from_device_barrier() asm volatile("lfence" ::: "memory")
#else
#define from_device_barrier() asm volatile("" ::: "memory")
#endif
#define flush_writes() asm volatile("sfence" ::: "memory")
#elif defined(__aarch64__)
#define to_device_barrier() asm volatile("dmb oshst" ::: "memory")
#define from_device_barrier() asm volatile("dmb oshld" ::: "memory")
#define flush_writes() asm volatile("dsb st" ::: "memory")
#else
#define to_device_barrier() __sync_synchronize()
#define from_device_barrier() __sync_synchronize()
#define flush_writes() __sync_synchronize()
#endif
#define wc_start() flush_writes()
#define compiler_barrier() asm volatile("" ::: "memory")

/* Slot 0 of a CQ doorbell record: the consumer index. */
#define FLOOR_CQ_SET_CI 0

/* One 64-byte chunk to the BlueFlame register: eight 8-byte stores in
 * ascending address order, as rdma-core's generic mmio_memcpy_x64. */
static inline void bf_copy64(volatile uint64_t *dst, const uint64_t *src)
{
	dst[0] = src[0];
	dst[1] = src[1];
	dst[2] = src[2];
	dst[3] = src[3];
	dst[4] = src[4];
	dst[5] = src[5];
	dst[6] = src[6];
	dst[7] = src[7];
}

/* RDMA_WRITE_IMM with one SGE, signaled: control, remote address and data
 * segments (ds = 3, one WQEBB), then the doorbell record and the BlueFlame
 * copy in the order of rdma-core's post_send_db. */
static inline __attribute__((always_inline)) int floor_post_wqe(struct floor_queue *q, uint64_t wr_id)
{
	if (q->cur_post - q->tail >= q->wqe_cnt)
		return FLOOR_SQ_FULL;

	uint32_t idx = q->cur_post & (q->wqe_cnt - 1);
	uint8_t *wqe = q->sq_start + (idx << MLX5_SEND_WQE_SHIFT);
	uint8_t *seg = wqe;
	struct mlx5_wqe_ctrl_seg *ctrl = (struct mlx5_wqe_ctrl_seg *)seg;
	int ds = 0;

	seg += sizeof(*ctrl);
	ds += sizeof(*ctrl) / 16;

	struct mlx5_wqe_raddr_seg *raddr = (struct mlx5_wqe_raddr_seg *)seg;
	raddr->raddr = htobe64(q->raddr);
	raddr->rkey = htobe32(q->rkey);
	raddr->reserved = 0;
	seg += sizeof(*raddr);
	ds += sizeof(*raddr) / 16;
	if (__builtin_expect(seg == q->sq_end, 0))
		seg = q->sq_start;

	if (q->len) {
		mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)seg, q->len, q->lkey, q->laddr);
		ds += sizeof(struct mlx5_wqe_data_seg) / 16;
	}

	mlx5dv_set_ctrl_seg(ctrl, q->cur_post & 0xffff, MLX5_OPCODE_RDMA_WRITE_IMM, 0,
			    q->qpn, MLX5_WQE_CTRL_CQ_UPDATE, ds, 0, htobe32(q->imm));
	q->wrid[idx] = wr_id;
	q->cur_post += (ds + 3) / 4;

	to_device_barrier();
	q->qp_dbrec[MLX5_SND_DBR] = htobe32(q->cur_post & 0xffff);
	wc_start();
	bf_copy64((volatile uint64_t *)(q->bf_reg + q->bf_offset), (const uint64_t *)(void *)wqe);
	flush_writes();
	q->bf_offset ^= q->bf_size;
	return FLOOR_OK;
}

/* The completer stands in for the device: it reads the send producer index
 * from the doorbell record and writes the requester CQE64 of the WQE before
 * it: send opcode and QPN, then wqe_counter, signature and op_own (with the
 * owner bit of its pass over the ring) in one 4-byte store, so op_own is
 * never seen before the counter. The Go completer in rings.go makes the
 * same stores. */
static inline void floor_complete_cqe(struct floor_queue *q)
{
	uint16_t pi = (uint16_t)be32toh(q->qp_dbrec[MLX5_SND_DBR]);
	uint32_t n = q->dev_cq_pi++;
	struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)(q->cq_buf + ((n & (q->cqe_cnt - 1)) << 6));
	uint8_t op_own = MLX5_CQE_REQ << 4 | ((n >> q->cq_log_cnt) & MLX5_CQE_OWNER_MASK);

	uint32_t tail = (uint32_t)htobe16((uint16_t)(pi - 1)) | (uint32_t)op_own << 24;

	cqe->sop_drop_qpn = q->sop_drop_qpn;
	memcpy(&cqe->wqe_counter, &tail, sizeof(tail));
}

/* Poll one CQE: ownership as rdma-core's get_sw_cqe, a read barrier, then
 * the WQE counter retires the send queue up to that WQE, and the consumer
 * index goes to the doorbell record. */
static inline int floor_poll_cqe(struct floor_queue *q, uint64_t *wr_id)
{
	struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)(q->cq_buf + ((q->cons_index & (q->cqe_cnt - 1)) << 6));
	uint8_t op_own = *(volatile uint8_t *)&cqe->op_own;

	if ((op_own >> 4) == MLX5_CQE_INVALID ||
	    ((op_own & MLX5_CQE_OWNER_MASK) ^ !!(q->cons_index & q->cqe_cnt)))
		return FLOOR_CQ_EMPTY;
	from_device_barrier();
	q->cons_index++;
	if (__builtin_expect((op_own >> 4) != MLX5_CQE_REQ, 0))
		return FLOOR_BAD_CQE;

	uint16_t wqe_ctr = be16toh(cqe->wqe_counter);
	*wr_id = q->wrid[wqe_ctr & (q->wqe_cnt - 1)];
	q->tail += (uint16_t)(wqe_ctr + 1 - q->tail);
	q->cq_dbrec[FLOOR_CQ_SET_CI] = htobe32(q->cons_index & 0xffffff);
	return FLOOR_OK;
}

/* The post in a function of its own that the loop calls, as Go's post
 * calls into its BlueFlame assembly: the same WQE, doorbell record,
 * BlueFlame copy and fences, across a call boundary. */
static __attribute__((noinline)) int floor_post_call(struct floor_queue *q, uint64_t wr_id)
{
	return floor_post_wqe(q, wr_id);
}

/* The loop of floor_run and floor_run_post_call; post_call is a constant at
 * both call sites, so each gets its own copy with one kind of post. */
static inline __attribute__((always_inline)) int floor_loop(struct floor_queue *q, uint64_t n, int post_call)
{
	uint64_t sum = 0;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t wr_id;
		int rc = post_call ? floor_post_call(q, i) : floor_post_wqe(q, i);
		if (rc)
			return rc;
		floor_complete_cqe(q);
		rc = floor_poll_cqe(q, &wr_id);
		if (rc)
			return rc;
		if (__builtin_expect(wr_id != i, 0))
			return FLOOR_BAD_WRID;
		sum += wr_id;
	}
	q->wrid_sum += sum;
	return FLOOR_OK;
}

int floor_run(struct floor_queue *q, uint64_t n)
{
	return floor_loop(q, n, 0);
}

int floor_run_post_call(struct floor_queue *q, uint64_t n)
{
	return floor_loop(q, n, 1);
}

int floor_post_one(struct floor_queue *q, uint64_t wr_id)
{
	return floor_post_wqe(q, wr_id);
}

void floor_complete_one(struct floor_queue *q)
{
	floor_complete_cqe(q);
}

int floor_poll_one(struct floor_queue *q)
{
	return floor_poll_cqe(q, &q->polled_wrid);
}
