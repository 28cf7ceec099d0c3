// The C floor: a post + poll loop written against rdma-core's mlx5dv
// helpers, over the same ring memory the Go benchmarks use.

#ifndef MLX5KIT_BENCH_CFLOOR_H
#define MLX5KIT_BENCH_CFLOOR_H

#include <stdint.h>

struct floor_queue {
	/* Send queue: wqe_cnt 64-byte WQEBBs from sq_start to sq_end. */
	uint8_t *sq_start;
	uint8_t *sq_end;
	uint32_t wqe_cnt;
	uint32_t cur_post;	/* producer index, free running */
	uint32_t tail;		/* oldest WQE not yet completed, free running */
	uint32_t qpn;
	volatile uint32_t *qp_dbrec;	/* [0] receive, [1] send, big-endian */
	uint8_t *bf_reg;		/* BlueFlame register: two halves */
	uint32_t bf_offset;
	uint32_t bf_size;
	uint64_t *wrid;			/* wqe_cnt entries: the caller's ids */

	/* Completion queue: cqe_cnt CQE64s. */
	uint8_t *cq_buf;
	uint32_t cqe_cnt;
	uint32_t cons_index;
	volatile uint32_t *cq_dbrec;	/* [0] consumer index, [1] arm */

	/* The completer's own producer index into the completion queue. */
	uint32_t dev_cq_pi;
	uint32_t cq_log_cnt;	/* log2(cqe_cnt) */
	uint32_t sop_drop_qpn;	/* send opcode and QPN, big-endian */

	/* The work request every iteration posts. */
	uint64_t laddr;
	uint64_t raddr;
	uint32_t lkey;
	uint32_t rkey;
	uint32_t len;
	uint32_t imm;		/* host order; the WQE carries it big-endian */

	/* Results handed back to Go through this struct, so that no Go
	 * pointer crosses the cgo boundary per call. */
	uint64_t wrid_sum;	/* floor_run: sum of the polled wr_ids */
	uint64_t polled_wrid;	/* floor_poll_one: wr_id of the CQE polled */
};

/* Return codes of the functions below. */
enum {
	FLOOR_OK = 0,
	FLOOR_SQ_FULL = -1,
	FLOOR_CQ_EMPTY = -2,
	FLOOR_BAD_CQE = -3,
	FLOOR_BAD_WRID = -4,
};

/* floor_run posts, completes and polls n times inside C, with wr_ids 0 to
 * n-1. On success it returns FLOOR_OK and adds every polled wr_id to
 * q->wrid_sum. */
int floor_run(struct floor_queue *q, uint64_t n);

/* floor_run_post_call is floor_run with the post in a function of its own
 * that the loop calls (never inlined), as a Go loop calls the BlueFlame
 * assembly: what the call boundary costs C. */
int floor_run_post_call(struct floor_queue *q, uint64_t n);

/* floor_post_one posts one WQE with wr_id and rings the doorbell. */
int floor_post_one(struct floor_queue *q, uint64_t wr_id);

/* floor_complete_one is the completer: it writes the requester CQE of the
 * last posted WQE. */
void floor_complete_one(struct floor_queue *q);

/* floor_poll_one polls one CQE and leaves its wr_id in q->polled_wrid. */
int floor_poll_one(struct floor_queue *q);

#endif
