/*
 * rdma-core's extended verbs on one device, through libibverbs and libmlx5
 * as packaged, for TestExtendedVerbsUnderPreload: QPs created with
 * ibv_create_qp_ex and send_ops_flags and posted with the ibv_wr_* API
 * (every RC operation, SGE lists, inline data and inline data lists whose
 * WQEs run past the end of the send ring, several WRs in one
 * ibv_wr_start/ibv_wr_complete, ibv_wr_abort, the rollback after a WR
 * libmlx5 refuses, UD with ibv_wr_set_ud_addr, a wrong rkey, a SEND past
 * the end of its receive, operations outside send_ops_flags), and CQs
 * created with ibv_create_cq_ex and read with ibv_start_poll/ibv_next_poll/
 * ibv_end_poll and the ibv_wc_read_* accessors. Every destination is
 * compared byte for byte, with guard bytes around it, and every completion
 * field against what a ConnectX gives. Each check that fails prints a line
 * starting with "FAIL"; the program ends with "failures N" and "done".
 */
#include <inttypes.h>
#include <time.h>
#include <infiniband/mlx5dv.h>

#include "verbs_common.h"

#define GUARD 0xee
#define MEM (1 << 16)
#define QKEY 0x11111111
#define GRH 40
#define MAX_INLINE 200
#define MAX_COMPS 64

static int failures;

#define CHECK(cond, ...)                                                                                           \
	do {                                                                                                        \
		if (!(cond)) {                                                                                      \
			failures++;                                                                                 \
			printf("FAIL %s:%d: ", __func__, __LINE__);                                                 \
			printf(__VA_ARGS__);                                                                        \
			putchar('\n');                                                                              \
		}                                                                                                   \
	} while (0)

/* comp is one completion as the ibv_wc_read_* accessors give it. */
struct comp {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm; /* host order */
	uint32_t qp_num;
	uint32_t src_qp;
	unsigned int wc_flags;
	uint32_t slid;
	uint8_t sl;
	uint64_t ts;
	uint64_t wallclock;
};

/* env is what every scenario shares. */
struct env {
	struct test_device d;
	struct ibv_pd *pd;
	struct ibv_cq_ex *scq, *rcq;
	struct ibv_mr *mr;
	uint8_t *mem;
	uint64_t last_ts;
	int eth;
};

static void read_comp(struct ibv_cq_ex *cq, struct comp *c)
{
	struct timespec now;

	memset(c, 0, sizeof(*c));
	c->wr_id = cq->wr_id;
	c->status = cq->status;
	c->vendor_err = ibv_wc_read_vendor_err(cq);
	c->qp_num = ibv_wc_read_qp_num(cq);
	if (c->status != IBV_WC_SUCCESS)
		return;
	c->ts = ibv_wc_read_completion_ts(cq);
	c->wallclock = ibv_wc_read_completion_wallclock_ns(cq);
	c->opcode = ibv_wc_read_opcode(cq);
	c->wc_flags = ibv_wc_read_wc_flags(cq);
	c->byte_len = ibv_wc_read_byte_len(cq);
	if (c->wc_flags & IBV_WC_WITH_IMM)
		c->imm = be32toh(ibv_wc_read_imm_data(cq));
	c->src_qp = ibv_wc_read_src_qp(cq);
	c->slid = ibv_wc_read_slid(cq);
	c->sl = ibv_wc_read_sl(cq);
	clock_gettime(CLOCK_REALTIME, &now);
	/* The device clock converted through the clock info page: the same
	 * epoch as CLOCK_REALTIME, within any sensible skew. */
	CHECK(c->wallclock != 0 && llabs((long long)(c->wallclock - ((uint64_t)now.tv_sec * 1000000000ULL + now.tv_nsec))) <
		      3600LL * 1000000000LL,
	      "wallclock %" PRIu64 " is not near the time of day", c->wallclock);
}

/* poll takes exactly n completions from cq, in order, through one
 * ibv_start_poll, ibv_next_poll for the rest and one ibv_end_poll (more
 * than one round when the CQ runs dry first). */
static void poll_n(struct env *e, struct ibv_cq_ex *cq, struct comp *out, int n)
{
	struct ibv_poll_cq_attr pa = {};
	time_t end = time(NULL) + 10;
	int got = 0, i;

	while (got < n) {
		int ret = ibv_start_poll(cq, &pa);

		if (ret == ENOENT) {
			if (time(NULL) > end)
				FAIL("%d of %d completions", got, n);
			continue;
		}
		if (ret)
			FAIL("ibv_start_poll: %s", strerror(ret));
		read_comp(cq, &out[got++]);
		while (got < n && (ret = ibv_next_poll(cq)) == 0)
			read_comp(cq, &out[got++]);
		if (got < n && ret != ENOENT)
			FAIL("ibv_next_poll: %s", strerror(ret));
		ibv_end_poll(cq);
	}
	/* Nothing more than asked for. */
	if (ibv_start_poll(cq, &pa) != ENOENT) {
		CHECK(0, "an extra completion wr_id %" PRIu64, cq->wr_id);
		ibv_end_poll(cq);
	}
	/* The device stamps completions in the order it writes them (an
	 * error CQE has no timestamp: its syndromes are where it would be). */
	for (i = 0; i < n; i++) {
		if (out[i].status != IBV_WC_SUCCESS)
			continue;
		CHECK(out[i].ts != 0, "no completion timestamp");
		if (cq == e->scq) {
			CHECK(out[i].ts >= e->last_ts, "timestamp %" PRIu64 " before %" PRIu64, out[i].ts, e->last_ts);
			e->last_ts = out[i].ts;
		}
	}
}

static void check_req(struct comp *c, uint64_t wr_id, enum ibv_wc_opcode op, struct ibv_qp *qp)
{
	CHECK(c->status == IBV_WC_SUCCESS, "wr %" PRIu64 ": status %s", c->wr_id, ibv_wc_status_str(c->status));
	CHECK(c->wr_id == wr_id, "wr_id %" PRIu64 ", want %" PRIu64, c->wr_id, wr_id);
	CHECK(c->opcode == op, "wr %" PRIu64 ": opcode %d, want %d", c->wr_id, c->opcode, op);
	CHECK(c->qp_num == qp->qp_num, "wr %" PRIu64 ": qp_num %#x, want %#x", c->wr_id, c->qp_num, qp->qp_num);
	CHECK(!(c->wc_flags & IBV_WC_WITH_IMM), "wr %" PRIu64 ": a requester completion with an immediate", c->wr_id);
}

static void check_resp(struct env *e, struct comp *c, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t len,
		       int with_imm, uint32_t imm, struct ibv_qp *qp, struct ibv_qp *src)
{
	CHECK(c->status == IBV_WC_SUCCESS, "recv %" PRIu64 ": status %s", c->wr_id, ibv_wc_status_str(c->status));
	CHECK(c->wr_id == wr_id, "recv wr_id %" PRIu64 ", want %" PRIu64, c->wr_id, wr_id);
	CHECK(c->opcode == op, "recv %" PRIu64 ": opcode %d, want %d", c->wr_id, c->opcode, op);
	CHECK(c->byte_len == len, "recv %" PRIu64 ": byte_len %u, want %u", c->wr_id, c->byte_len, len);
	CHECK(!!(c->wc_flags & IBV_WC_WITH_IMM) == with_imm, "recv %" PRIu64 ": wc_flags %#x", c->wr_id, c->wc_flags);
	if (with_imm)
		CHECK(c->imm == imm, "recv %" PRIu64 ": imm %#x, want %#x", c->wr_id, c->imm, imm);
	CHECK(c->qp_num == qp->qp_num, "recv %" PRIu64 ": qp_num %#x, want %#x", c->wr_id, c->qp_num, qp->qp_num);
	if (qp->qp_type == IBV_QPT_UD) {
		CHECK(c->src_qp == src->qp_num, "recv %" PRIu64 ": src_qp %#x, want %#x", c->wr_id, c->src_qp,
		      src->qp_num);
		CHECK(!!(c->wc_flags & IBV_WC_GRH) == e->eth, "recv %" PRIu64 ": GRH flag in %#x", c->wr_id,
		      c->wc_flags);
	}
	/* On InfiniBand, the sender's LID and SL; not for an RC receive of 32
	 * bytes or less, which libmlx5 asks the device to scatter into the
	 * 64-byte CQE, over the bytes that hold them. */
	if (!e->eth && (qp->qp_type == IBV_QPT_UD || op == IBV_WC_RECV_RDMA_WITH_IMM || len > 32)) {
		CHECK(c->slid == e->d.pa.lid, "recv %" PRIu64 ": slid %u, want %u", c->wr_id, c->slid, e->d.pa.lid);
		CHECK(c->sl == 0, "recv %" PRIu64 ": sl %u", c->wr_id, c->sl);
	}
}

/* fill sets n bytes at p to a pattern of seed that has no guard byte. */
static void fill(uint8_t *p, size_t n, unsigned seed)
{
	size_t i;

	for (i = 0; i < n; i++) {
		p[i] = (uint8_t)(seed * 31 + i * 7 + (i >> 8));
		if (p[i] == GUARD)
			p[i] = 0x11;
	}
}

/* guard sets n bytes at p, and 64 on either side, to the guard byte. */
static void guard(uint8_t *p, size_t n)
{
	memset(p - 64, GUARD, n + 128);
}

/* guarded checks that the 64 bytes on either side of the n at dst still
 * hold the guard byte. */
static void guarded(const char *what, const uint8_t *dst, size_t n)
{
	size_t i;

	for (i = 1; i <= 64; i++) {
		CHECK(dst[-(long)i] == GUARD, "%s: byte %zu before the destination written", what, i);
		CHECK(dst[n + i - 1] == GUARD, "%s: byte %zu after the destination written", what, i);
		if (dst[-(long)i] != GUARD || dst[n + i - 1] != GUARD)
			break;
	}
}

/* expect checks that the n bytes at dst equal want and the 64 on either
 * side still hold the guard byte. */
static void expect(const char *what, const uint8_t *dst, const uint8_t *want, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (dst[i] != want[i]) {
			CHECK(0, "%s: byte %zu of %zu is %#x, want %#x", what, i, n, dst[i], want[i]);
			break;
		}
	guarded(what, dst, n);
}

/* expect_word checks that the 8-byte word at p, read as a plain uint64_t
 * (in host byte order, as a program reads the words of 8-byte atomics),
 * is want, and that the 64 bytes on either side still hold the guard
 * byte. */
static void expect_word(const char *what, const uint8_t *p, uint64_t want)
{
	uint64_t got = *(const volatile uint64_t *)p;

	CHECK(got == want, "%s: %#018" PRIx64 ", want %#018" PRIx64, what, got, want);
	guarded(what, p, 8);
}

static struct ibv_qp *create_qp(struct env *e, enum ibv_qp_type type, uint64_t ops, uint32_t depth,
				uint32_t *max_inline)
{
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = ibv_cq_ex_to_cq(e->scq), .recv_cq = ibv_cq_ex_to_cq(e->rcq), .qp_type = type,
		.cap = { .max_send_wr = depth, .max_recv_wr = 32, .max_send_sge = 4, .max_recv_sge = 4,
			 .max_inline_data = MAX_INLINE },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = e->pd,
		.send_ops_flags = ops,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(e->d.ctx, &ia);

	if (!qp)
		FAIL("ibv_create_qp_ex: %s", strerror(errno));
	if (max_inline)
		*max_inline = ia.cap.max_inline_data;
	return qp;
}

static void rc_pair(struct env *e, uint64_t ops, uint32_t depth, struct ibv_qp **a, struct ibv_qp **b)
{
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_REMOTE_ATOMIC;

	*a = create_qp(e, IBV_QPT_RC, ops, depth, NULL);
	*b = create_qp(e, IBV_QPT_RC, ops, depth, NULL);
	connect_rc(*a, (*b)->qp_num, &e->d.pa, &e->d.gid, access);
	connect_rc(*b, (*a)->qp_num, &e->d.pa, &e->d.gid, access);
}

static void post_recv(struct env *e, struct ibv_qp *qp, uint64_t wr_id, struct ibv_sge *sg, int n)
{
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = sg, .num_sge = n }, *bad;
	int ret;

	(void)e;
	if ((ret = ibv_post_recv(qp, &wr, &bad)))
		FAIL("ibv_post_recv: %s", strerror(ret));
}

static void post_recv1(struct env *e, struct ibv_qp *qp, uint64_t wr_id, uint8_t *buf, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = e->mr->lkey };

	post_recv(e, qp, wr_id, &sge, 1);
}

static void complete(struct ibv_qp_ex *x)
{
	int ret = ibv_wr_complete(x);

	if (ret)
		FAIL("ibv_wr_complete: %s", strerror(ret));
}

/* start begins one batch with the next WR's id and flags. */
static void start(struct ibv_qp_ex *x, uint64_t wr_id, unsigned flags)
{
	ibv_wr_start(x);
	x->wr_id = wr_id;
	x->wr_flags = flags;
}

/* The regions of the buffer: A's local memory and B's remote memory. */
#define LOCAL(e) ((e)->mem + 4096)
#define REMOTE(e) ((e)->mem + 32768)
#define RADDR(e, off) ((uint64_t)(uintptr_t)(REMOTE(e) + (off)))

/* write_one posts one signaled RDMA WRITE of n bytes at local to the
 * remote region at off, in a batch of its own, and takes its completion. */
static void write_one(struct env *e, struct ibv_qp *qp, uint64_t wr_id, size_t off, uint8_t *local, uint32_t n)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	struct comp s;

	start(x, wr_id, IBV_SEND_SIGNALED);
	ibv_wr_rdma_write(x, e->mr->rkey, RADDR(e, off));
	ibv_wr_set_sge(x, e->mr->lkey, (uintptr_t)local, n);
	complete(x);
	poll_n(e, e->scq, &s, 1);
	check_req(&s, wr_id, IBV_WC_RDMA_WRITE, qp);
}

/* complete_both ends a batch of one WR that completes on both sides and
 * takes one completion from each CQ. */
static void complete_both(struct env *e, struct ibv_qp_ex *x, struct comp *s, struct comp *r)
{
	complete(x);
	poll_n(e, e->scq, s, 1);
	poll_n(e, e->rcq, r, 1);
}

/* rdma_list posts one signaled RDMA WRITE, or READ, of an SGE list to the
 * start of the remote region, and takes its completion into c. */
static void rdma_list(struct env *e, struct ibv_qp *qp, uint64_t wr_id, int read, const struct ibv_sge *sg, size_t n,
		      struct comp *c)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);

	start(x, wr_id, IBV_SEND_SIGNALED);
	if (read)
		ibv_wr_rdma_read(x, e->mr->rkey, RADDR(e, 0));
	else
		ibv_wr_rdma_write(x, e->mr->rkey, RADDR(e, 0));
	ibv_wr_set_sge_list(x, n, sg);
	complete(x);
	poll_n(e, e->scq, c, 1);
	check_req(c, wr_id, read ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE, qp);
}

/* atomic_one posts one signaled compare-and-swap (cs) or fetch-and-add on
 * the 8-byte word at the start of the remote region and checks the old
 * value it returns into the local region and the remote word after, both
 * read as plain uint64_t: a ConnectX treats the word of an 8-byte atomic
 * as a uint64_t in host byte order, and returns the old value so, in the
 * mode mlx5_core sets (atomic_req_8B_endianness_mode, host endianness),
 * the only one in which mlx5_ib reports IBV_ATOMIC_HCA. */
static void atomic_one(struct env *e, struct ibv_qp *qp, uint64_t wr_id, int cs, uint64_t operand, uint64_t swap,
		       uint64_t old, uint64_t after)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	uint8_t *lo = LOCAL(e), *re = REMOTE(e);
	struct comp s;
	char what[64];

	guard(lo, 8);
	start(x, wr_id, IBV_SEND_SIGNALED);
	if (cs)
		ibv_wr_atomic_cmp_swp(x, e->mr->rkey, RADDR(e, 0), operand, swap);
	else
		ibv_wr_atomic_fetch_add(x, e->mr->rkey, RADDR(e, 0), operand);
	ibv_wr_set_sge(x, e->mr->lkey, (uintptr_t)lo, 8);
	complete(x);
	poll_n(e, e->scq, &s, 1);
	check_req(&s, wr_id, cs ? IBV_WC_COMP_SWAP : IBV_WC_FETCH_ADD, qp);
	CHECK(s.byte_len == 8, "atomic %" PRIu64 ": byte_len %u", wr_id, s.byte_len);
	snprintf(what, sizeof(what), "atomic %" PRIu64 " old value", wr_id);
	expect_word(what, lo, old);
	snprintf(what, sizeof(what), "atomic %" PRIu64 " remote word after", wr_id);
	expect_word(what, re, after);
}

/* untouched checks that the n bytes at dst, and 64 on either side, still
 * hold the guard byte. */
static void untouched(const char *what, const uint8_t *dst, size_t n)
{
	uint8_t want[4096];

	memset(want, GUARD, n);
	expect(what, dst, want, n);
}

/* rc_ops: every RC operation, one per batch, with SGEs, SGE lists and
 * inline data. */
static void rc_ops(struct env *e)
{
	uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
		       IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
		       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	struct ibv_qp *a, *b;
	struct ibv_qp_ex *x;
	struct comp s[MAX_COMPS], r[MAX_COMPS];
	uint8_t want[4096];
	uint32_t rkey;
	uint8_t *lo = LOCAL(e), *re = REMOTE(e);

	rc_pair(e, ops, 64, &a, &b);
	x = ibv_qp_to_qp_ex(a);
	rkey = e->mr->rkey;

	/* RDMA WRITE, one SGE. */
	guard(re, 1000);
	fill(lo, 1000, 1);
	write_one(e, a, 1, 0, lo, 1000);
	expect("rdma_write sge", re, lo, 1000);
	printf("rdma_write sge: checked\n");

	/* RDMA WRITE, an SGE list with a zero-length entry libmlx5 leaves out. */
	{
		struct ibv_sge sg[4] = {
			{ .addr = (uintptr_t)lo, .length = 100, .lkey = e->mr->lkey },
			{ .addr = (uintptr_t)lo + 500, .length = 0, .lkey = e->mr->lkey },
			{ .addr = (uintptr_t)lo + 1000, .length = 333, .lkey = e->mr->lkey },
			{ .addr = (uintptr_t)lo + 2000, .length = 1, .lkey = e->mr->lkey },
		};

		fill(lo, 2048, 2);
		memcpy(want, lo, 100);
		memcpy(want + 100, lo + 1000, 333);
		want[433] = lo[2000];
		guard(re, 434);
		rdma_list(e, a, 2, 0, sg, 4, s);
		expect("rdma_write sge list", re, want, 434);
		printf("rdma_write sge list: checked\n");
	}

	/* RDMA WRITE with immediate: consumes a receive of B, whose buffer
	 * stays as it was. */
	guard(re, 300);
	guard(re + 1024, 64);
	fill(lo, 300, 3);
	post_recv1(e, b, 30, re + 1024, 64);
	start(x, 3, IBV_SEND_SIGNALED);
	ibv_wr_rdma_write_imm(x, rkey, RADDR(e, 0), htobe32(0xdeadbeef));
	ibv_wr_set_sge(x, e->mr->lkey, (uintptr_t)lo, 300);
	complete_both(e, x, s, r);
	check_req(&s[0], 3, IBV_WC_RDMA_WRITE, a);
	check_resp(e, &r[0], 30, IBV_WC_RECV_RDMA_WITH_IMM, 300, 1, 0xdeadbeef, b, a);
	expect("rdma_write_imm", re, lo, 300);
	untouched("rdma_write_imm receive buffer", re + 1024, 64);
	printf("rdma_write_imm: checked\n");

	/* RDMA READ into an SGE list. */
	{
		struct ibv_sge sg[3] = {
			{ .addr = (uintptr_t)lo, .length = 17, .lkey = e->mr->lkey },
			{ .addr = (uintptr_t)lo + 1024, .length = 1000, .lkey = e->mr->lkey },
			{ .addr = (uintptr_t)lo + 4096, .length = 7, .lkey = e->mr->lkey },
		};

		fill(re, 1024, 4);
		guard(lo, 17);
		guard(lo + 1024, 1000);
		guard(lo + 4096, 7);
		rdma_list(e, a, 4, 1, sg, 3, s);
		CHECK(s[0].byte_len == 1024, "rdma_read byte_len %u", s[0].byte_len);
		expect("rdma_read sge 0", lo, re, 17);
		expect("rdma_read sge 1", lo + 1024, re + 17, 1000);
		expect("rdma_read sge 2", lo + 4096, re + 1017, 7);
		printf("rdma_read sge list: checked\n");
	}

	/* Atomics on one uint64_t the program keeps in host byte order, each
	 * on what the one before left. The values have eight distinct bytes
	 * and the fetch-and-add carries from the lowest byte into the next,
	 * so a device that took the word for big-endian (on a little-endian
	 * host) leaves another value after the fetch-and-add and returns
	 * other old values after it. */
	{
		uint64_t v1 = 0x01020304050607f8ULL, v2 = 0x0102030405060808ULL, v3 = 0x1122334455667788ULL;

		guard(re, 8);
		*(volatile uint64_t *)re = v1;
		atomic_one(e, a, 5, 0, 0x10, 0, v1, v2);
		atomic_one(e, a, 6, 1, v2, v3, v2, v3);
		/* No match (the compare is v3 with its bytes reversed, a match
		 * for a device that read the word big-endian): nothing changes,
		 * the old value comes back. */
		atomic_one(e, a, 7, 1, 0x8877665544332211ULL, v1, v3, v3);
		printf("atomics: checked\n");
	}

	/* SEND from an SGE list into a receive of two SGEs; SEND with
	 * immediate of inline data. */
	{
		struct ibv_sge sg[2] = {
			{ .addr = (uintptr_t)lo, .length = 70, .lkey = e->mr->lkey },
			{ .addr = (uintptr_t)lo + 512, .length = 130, .lkey = e->mr->lkey },
		};
		struct ibv_sge rsg[2] = {
			{ .addr = (uintptr_t)re, .length = 150, .lkey = e->mr->lkey },
			{ .addr = (uintptr_t)re + 1024, .length = 150, .lkey = e->mr->lkey },
		};

		fill(lo, 1024, 8);
		memcpy(want, lo, 70);
		memcpy(want + 70, lo + 512, 130);
		guard(re, 150);
		guard(re + 1024, 50);
		post_recv(e, b, 80, rsg, 2);
		start(x, 8, IBV_SEND_SIGNALED);
		ibv_wr_send(x);
		ibv_wr_set_sge_list(x, 2, sg);
		complete_both(e, x, s, r);
		check_req(&s[0], 8, IBV_WC_SEND, a);
		check_resp(e, &r[0], 80, IBV_WC_RECV, 200, 0, 0, b, a);
		expect("send sge list, first receive SGE", re, want, 150);
		expect("send sge list, second receive SGE", re + 1024, want + 150, 50);

		fill(lo, 100, 9);
		guard(re, 100);
		post_recv1(e, b, 90, re, 100);
		start(x, 9, IBV_SEND_SIGNALED);
		ibv_wr_send_imm(x, htobe32(0x01020304));
		ibv_wr_set_inline_data(x, lo, 100);
		memset(lo, 0, 100); /* inline: the data is in the WQE already */
		complete_both(e, x, s, r);
		check_req(&s[0], 9, IBV_WC_SEND, a);
		check_resp(e, &r[0], 90, IBV_WC_RECV, 100, 1, 0x01020304, b, a);
		fill(want, 100, 9);
		expect("send_imm inline", re, want, 100);
		printf("send: checked\n");
	}

	/* Several WRs in one batch, the first unsignaled: completions in
	 * order, the receives too. */
	{
		/* The fetch-and-add's word, a uint64_t in host byte order:
		 * 0xcdff + 0x0101 carries from the lowest byte into the next. */
		uint64_t v1 = 0x0123456789abcdffULL, v2 = 0x0000000000000101ULL, v3 = 0x0123456789abcf00ULL;

		fill(lo, 512, 10);
		guard(re, 64);
		guard(re + 256, 64);
		guard(re + 1024, 64);
		guard(re + 2048, 8);
		guard(lo + 1024, 64);
		guard(lo + 2048, 8);
		*(volatile uint64_t *)(re + 2048) = v1;
		fill(re + 3072, 64, 11);
		post_recv1(e, b, 100, re + 1024, 64);
		post_recv1(e, b, 101, re + 1024, 64);
		start(x, 10, 0);
		ibv_wr_rdma_write(x, rkey, RADDR(e, 0));
		ibv_wr_set_sge(x, e->mr->lkey, (uintptr_t)lo, 64);
		x->wr_id = 11;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write_imm(x, rkey, RADDR(e, 256), htobe32(11));
		ibv_wr_set_inline_data(x, lo + 64, 64);
		x->wr_id = 12;
		ibv_wr_send_imm(x, htobe32(12));
		ibv_wr_set_sge(x, e->mr->lkey, (uintptr_t)lo + 128, 64);
		x->wr_id = 13;
		ibv_wr_rdma_read(x, rkey, RADDR(e, 3072));
		ibv_wr_set_sge(x, e->mr->lkey, (uintptr_t)lo + 1024, 64);
		x->wr_id = 14;
		ibv_wr_atomic_fetch_add(x, rkey, RADDR(e, 2048), v2);
		ibv_wr_set_sge(x, e->mr->lkey, (uintptr_t)lo + 2048, 8);
		complete(x);
		poll_n(e, e->scq, s, 4);
		poll_n(e, e->rcq, r, 2);
		check_req(&s[0], 11, IBV_WC_RDMA_WRITE, a);
		check_req(&s[1], 12, IBV_WC_SEND, a);
		check_req(&s[2], 13, IBV_WC_RDMA_READ, a);
		check_req(&s[3], 14, IBV_WC_FETCH_ADD, a);
		check_resp(e, &r[0], 100, IBV_WC_RECV_RDMA_WITH_IMM, 64, 1, 11, b, a);
		check_resp(e, &r[1], 101, IBV_WC_RECV, 64, 1, 12, b, a);
		expect("batch write", re, lo, 64);
		expect("batch write_imm", re + 256, lo + 64, 64);
		expect("batch send", re + 1024, lo + 128, 64);
		expect("batch read", lo + 1024, re + 3072, 64);
		expect_word("batch fetch_add old value", lo + 2048, v1);
		expect_word("batch fetch_add sum", re + 2048, v3);
		printf("batch: checked\n");
	}

	/* ibv_wr_abort: the WR built is dropped and the next batch takes its
	 * place in the ring. */
	fill(lo, 128, 12);
	guard(re, 64);
	guard(re + 512, 64);
	start(x, 15, IBV_SEND_SIGNALED);
	ibv_wr_rdma_write(x, rkey, RADDR(e, 0));
	ibv_wr_set_sge(x, e->mr->lkey, (uintptr_t)lo, 64);
	ibv_wr_abort(x);
	write_one(e, a, 16, 512, lo + 64, 64);
	untouched("aborted write", re, 64);
	expect("write after abort", re + 512, lo + 64, 64);
	printf("abort: checked\n");

	/* A WR libmlx5 refuses (inline data past max_inline_data, an SGE
	 * list past max_send_sge): ibv_wr_complete reports ENOMEM and rolls
	 * the batch back, the WR before it in the batch included. */
	{
		struct ibv_sge sg[5];
		int i, ret;

		for (i = 0; i < 5; i++)
			sg[i] = (struct ibv_sge){ .addr = (uintptr_t)lo, .length = 8, .lkey = e->mr->lkey };
		guard(re, 64);
		start(x, 17, IBV_SEND_SIGNALED);
		ibv_wr_rdma_write(x, rkey, RADDR(e, 0));
		ibv_wr_set_sge(x, e->mr->lkey, (uintptr_t)lo, 64);
		ibv_wr_rdma_write(x, rkey, RADDR(e, 0));
		ibv_wr_set_inline_data(x, lo, 4096);
		ret = ibv_wr_complete(x);
		CHECK(ret == ENOMEM, "inline past the maximum: ibv_wr_complete %s", strerror(ret));
		start(x, 18, IBV_SEND_SIGNALED);
		ibv_wr_rdma_write(x, rkey, RADDR(e, 0));
		ibv_wr_set_sge_list(x, 5, sg);
		ret = ibv_wr_complete(x);
		CHECK(ret == ENOMEM, "SGE list past the maximum: ibv_wr_complete %s", strerror(ret));
		write_one(e, a, 19, 512, lo + 64, 64);
		untouched("refused batch", re, 64);
		printf("refused: checked\n");
	}

	if (ibv_destroy_qp(a) || ibv_destroy_qp(b))
		FAIL("ibv_destroy_qp: %s", strerror(errno));
}

/* wqe_bbs is the number of 64-byte WQEBBs of a WQE with the given
 * segments ahead of its data and len bytes of inline data. */
static unsigned wqe_bbs(unsigned head, unsigned len)
{
	unsigned ds = head / 16 + (len ? (4 + len + 15) / 16 : 0);

	return (ds + 3) / 4;
}

/* check_wqe checks that the WQE libmlx5 just built begins where this
 * program's count of WQEBBs says, at index start, and takes bbs WQEBBs:
 * the counts of WQEs across the ring's end are then right. */
static void check_wqe(struct mlx5dv_qp *dv, unsigned start, unsigned bbs)
{
	const uint8_t *ctrl = (const uint8_t *)dv->sq.buf + (start % dv->sq.wqe_cnt) * 64;
	uint32_t w0, w1;

	memcpy(&w0, ctrl, 4);
	memcpy(&w1, ctrl + 4, 4);
	w0 = be32toh(w0);
	w1 = be32toh(w1);
	CHECK((w0 >> 8 & 0xffff) == (start & 0xffff), "WQE at %u says index %u", start, w0 >> 8 & 0xffff);
	CHECK(((w1 & 0x3f) + 3) / 4 == bbs, "WQE at %u: ds %u, not %u WQEBBs", start, w1 & 0x3f, bbs);
}

/* ring_wrap: inline data (single buffers and lists), SGE lists and several
 * WRs per batch through a small send ring, many times round, so that WQEs
 * and the inline data in them run past the end of the ring, and (UD) the
 * data of a WQE whose control and address segments fill the last WQEBB
 * starts at the ring's start. */
static void ring_wrap(struct env *e, struct ibv_qp *a, struct ibv_qp *b, struct ibv_ah *ah, const char *name)
{
	struct mlx5dv_qp dv;
	struct mlx5dv_obj obj = { .qp = { .in = a, .out = &dv } };
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
	struct comp s[MAX_COMPS], r[MAX_COMPS];
	uint8_t want[MAX_INLINE * 4];
	uint8_t *lo = LOCAL(e), *re = REMOTE(e);
	int ud = a->qp_type == IBV_QPT_UD;
	unsigned head = ud ? 64 : 16, cnt, pos = 0, crossing = 0, at_start = 0, i, k;
	unsigned rlen = ud ? GRH + MAX_INLINE : MAX_INLINE;

	if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP))
		FAIL("mlx5dv_init_obj");
	cnt = dv.sq.wqe_cnt;
	CHECK(dv.sq.stride == 64, "send stride %u", dv.sq.stride);
	for (i = 0; i < 6 * cnt; i++) {
		/* A batch of one to three SENDs, some with immediates. */
		unsigned n = 1 + i % 3, len[3], off = 0;

		start(x, 0, 0);
		for (k = 0; k < n; k++) {
			unsigned mode = (i + k) % 4, data, end, at = pos;

			len[k] = 1 + (i * 53 + k * 97) % MAX_INLINE;
			/* Where the data lies in the ring, in bytes (inline: after
			 * its 4-byte header). */
			data = (pos % cnt) * 64 + head;
			if (data == cnt * 64)
				at_start++;
			if (mode == 3) {
				/* Two data segments, the first empty for one byte. */
				pos += (head / 16 + 1 + (len[k] > 1) + 3) / 4;
			} else {
				end = data + 4 + len[k];
				if (end > cnt * 64 && data + 4 < cnt * 64)
					crossing++;
				pos += wqe_bbs(head, len[k]);
			}
			fill(lo + off, len[k], i * 3 + k);
			post_recv1(e, b, i * 3 + k, re + k * 1024, rlen);
			guard(re + k * 1024, len[k] + (ud ? GRH : 0));
			x->wr_id = i * 3 + k;
			x->wr_flags = IBV_SEND_SIGNALED;
			if ((i + k) % 2)
				ibv_wr_send_imm(x, htobe32(i * 3 + k));
			else
				ibv_wr_send(x);
			if (ud && k % 2)
				ibv_wr_set_ud_addr(x, ah, b->qp_num, QKEY);
			if (mode == 0) {
				ibv_wr_set_inline_data(x, lo + off, len[k]);
			} else if (mode == 3) {
				struct ibv_sge sg[2] = {
					{ .addr = (uintptr_t)lo + off, .length = len[k] / 2, .lkey = e->mr->lkey },
					{ .addr = (uintptr_t)lo + off + len[k] / 2, .length = len[k] - len[k] / 2,
					  .lkey = e->mr->lkey },
				};

				ibv_wr_set_sge_list(x, 2, sg);
			} else {
				/* Three pieces, the first and last maybe empty. */
				struct ibv_data_buf bl[3] = {
					{ lo + off, len[k] / 3 },
					{ lo + off + len[k] / 3, len[k] - len[k] / 3 - len[k] / 4 },
					{ lo + off + len[k] - len[k] / 4, len[k] / 4 },
				};

				ibv_wr_set_inline_data_list(x, 3, bl);
			}
			if (ud && !(k % 2))
				ibv_wr_set_ud_addr(x, ah, b->qp_num, QKEY);
			check_wqe(&dv, at, pos - at);
			off += len[k];
		}
		complete(x);
		poll_n(e, e->scq, s, n);
		poll_n(e, e->rcq, r, n);
		for (k = 0; k < n; k++) {
			char what[64];

			check_req(&s[k], i * 3 + k, IBV_WC_SEND, a);
			check_resp(e, &r[k], i * 3 + k, IBV_WC_RECV, len[k] + (ud ? GRH : 0), (i + k) % 2, i * 3 + k,
				   b, a);
			snprintf(what, sizeof(what), "%s send %u.%u", name, i, k);
			/* A UD receive starts with 40 bytes for the GRH: what
			 * the device writes there on RoCE (the network header),
			 * left as it was on InfiniBand without a GRH. */
			if (ud && e->eth)
				memcpy(want, re + k * 1024, GRH);
			else if (ud)
				memset(want, GUARD, GRH);
			fill(want + (ud ? GRH : 0), len[k], i * 3 + k);
			expect(what, re + k * 1024, want, len[k] + (ud ? GRH : 0));
		}
		if (failures > 20)
			FAIL("too many failures");
	}
	printf("%s ring: %u WQEBBs, %u times round, inline data across the end %u times, data at the ring start %u times\n",
	       name, cnt, pos / cnt, crossing, at_start);
}

/* rc_inline_write: RDMA WRITEs of inline data through a small ring. */
static void rc_inline_write(struct env *e, struct ibv_qp *a)
{
	struct mlx5dv_qp dv;
	struct mlx5dv_obj obj = { .qp = { .in = a, .out = &dv } };
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
	struct comp s[MAX_COMPS];
	uint8_t want[MAX_INLINE];
	uint8_t *lo = LOCAL(e), *re = REMOTE(e);
	unsigned cnt, i, crossing = 0, pos;

	if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP))
		FAIL("mlx5dv_init_obj");
	cnt = dv.sq.wqe_cnt;
	/* A fresh QP: its first WQE at index 0. */
	pos = 0;
	for (i = 0; i < 6 * cnt; i++) {
		unsigned len = 1 + (i * 71) % MAX_INLINE, data = (pos % cnt) * 64 + 32 + 4, at = pos;
		char what[64];

		if (data + len > cnt * 64 && data < cnt * 64)
			crossing++;
		pos += wqe_bbs(32, len);
		fill(lo, len, 1000 + i);
		guard(re, len);
		start(x, i, IBV_SEND_SIGNALED);
		ibv_wr_rdma_write(x, e->mr->rkey, RADDR(e, 0));
		if (i % 2) {
			ibv_wr_set_inline_data(x, lo, len);
		} else {
			struct ibv_data_buf bl[2] = { { lo, len / 2 }, { lo + len / 2, len - len / 2 } };

			ibv_wr_set_inline_data_list(x, 2, bl);
		}
		check_wqe(&dv, at, pos - at);
		complete(x);
		poll_n(e, e->scq, s, 1);
		check_req(&s[0], i, IBV_WC_RDMA_WRITE, a);
		fill(want, len, 1000 + i);
		snprintf(what, sizeof(what), "inline write %u", i);
		expect(what, re, want, len);
		if (failures > 20)
			FAIL("too many failures");
	}
	printf("rc inline write ring: %u WQEBBs, %u times round, inline data across the end %u times\n", cnt,
	       pos / cnt, crossing);
}

static struct ibv_ah *make_ah(struct env *e)
{
	struct ibv_ah_attr a = { .port_num = 1, .dlid = e->d.pa.lid };
	struct ibv_ah *ah;

	if (e->eth) {
		a.is_global = 1;
		a.grh.dgid = e->d.gid;
		a.grh.hop_limit = 64;
	}
	ah = ibv_create_ah(e->pd, &a);
	if (!ah)
		FAIL("ibv_create_ah: %s", strerror(errno));
	return ah;
}

/* errors: a wrong rkey completes with IBV_WC_REM_ACCESS_ERR and flushes the
 * WR after it; a SEND longer than the receive fails on both sides. */
static void errors(struct env *e)
{
	struct ibv_qp *a, *b;
	struct ibv_qp_ex *x;
	struct comp s[MAX_COMPS], r[MAX_COMPS];
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	uint8_t *lo = LOCAL(e), *re = REMOTE(e);

	rc_pair(e, IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ, 16, &a, &b);
	x = ibv_qp_to_qp_ex(a);
	fill(lo, 64, 20);
	guard(re, 64);
	guard(re + 512, 64);
	start(x, 40, IBV_SEND_SIGNALED);
	ibv_wr_rdma_write(x, e->mr->rkey ^ 0x5a5a00, RADDR(e, 0));
	ibv_wr_set_sge(x, e->mr->lkey, (uintptr_t)lo, 64);
	x->wr_id = 41;
	ibv_wr_rdma_write(x, e->mr->rkey, RADDR(e, 512));
	ibv_wr_set_sge(x, e->mr->lkey, (uintptr_t)lo, 64);
	complete(x);
	poll_n(e, e->scq, s, 2);
	CHECK(s[0].wr_id == 40 && s[0].status == IBV_WC_REM_ACCESS_ERR, "wrong rkey: wr %" PRIu64 " status %s",
	      s[0].wr_id, ibv_wc_status_str(s[0].status));
	CHECK(s[0].qp_num == a->qp_num, "wrong rkey: qp_num %#x", s[0].qp_num);
	CHECK(s[1].wr_id == 41 && s[1].status == IBV_WC_WR_FLUSH_ERR, "after it: wr %" PRIu64 " status %s",
	      s[1].wr_id, ibv_wc_status_str(s[1].status));
	CHECK(s[1].qp_num == a->qp_num, "flushed: qp_num %#x", s[1].qp_num);
	untouched("wrong rkey", re, 64);
	untouched("flushed", re + 512, 64);
	if (ibv_query_qp(a, &qa, IBV_QP_STATE, &qi))
		FAIL("ibv_query_qp");
	CHECK(qa.qp_state == IBV_QPS_ERR, "requester state %d after the error", qa.qp_state);
	printf("wrong rkey: %s (vendor_err %#x), then %s (vendor_err %#x)\n", ibv_wc_status_str(s[0].status),
	       s[0].vendor_err, ibv_wc_status_str(s[1].status), s[1].vendor_err);
	if (ibv_destroy_qp(a) || ibv_destroy_qp(b))
		FAIL("ibv_destroy_qp: %s", strerror(errno));

	/* A SEND longer than the receive: the responder's receive completes
	 * with IBV_WC_LOC_LEN_ERR, the SEND with IBV_WC_REM_INV_REQ_ERR. */
	rc_pair(e, IBV_QP_EX_WITH_SEND, 16, &a, &b);
	x = ibv_qp_to_qp_ex(a);
	post_recv1(e, b, 60, re, 50);
	start(x, 61, IBV_SEND_SIGNALED);
	ibv_wr_send(x);
	ibv_wr_set_sge(x, e->mr->lkey, (uintptr_t)lo, 100);
	complete_both(e, x, s, r);
	CHECK(s[0].wr_id == 61 && s[0].status == IBV_WC_REM_INV_REQ_ERR && s[0].qp_num == a->qp_num,
	      "long send: wr %" PRIu64 " status %s qp_num %#x", s[0].wr_id, ibv_wc_status_str(s[0].status),
	      s[0].qp_num);
	CHECK(r[0].wr_id == 60 && r[0].status == IBV_WC_LOC_LEN_ERR && r[0].qp_num == b->qp_num,
	      "short receive: wr %" PRIu64 " status %s qp_num %#x", r[0].wr_id, ibv_wc_status_str(r[0].status),
	      r[0].qp_num);
	printf("long send: %s, short receive: %s\n", ibv_wc_status_str(s[0].status), ibv_wc_status_str(r[0].status));
	if (ibv_destroy_qp(a) || ibv_destroy_qp(b))
		FAIL("ibv_destroy_qp: %s", strerror(errno));
}

/* unsupported: what libmlx5 does with operations outside send_ops_flags. */
static void unsupported(struct env *e)
{
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = ibv_cq_ex_to_cq(e->scq), .recv_cq = ibv_cq_ex_to_cq(e->rcq), .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = e->pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE,
	};
	struct ibv_qp *qp, *a, *b;
	uint8_t *lo = LOCAL(e), *re = REMOTE(e);

	/* An operation the QP type does not have: refused at creation. */
	errno = 0;
	qp = ibv_create_qp_ex(e->d.ctx, &ia);
	printf("UD with RDMA_WRITE: %s\n", qp ? "created" : strerror(errno));
	if (qp)
		ibv_destroy_qp(qp);
	ia.qp_type = IBV_QPT_RC;
	ia.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO;
	errno = 0;
	qp = ibv_create_qp_ex(e->d.ctx, &ia);
	printf("RC with TSO: %s\n", qp ? "created" : strerror(errno));
	if (qp)
		ibv_destroy_qp(qp);

	/* One the QP type has but send_ops_flags left out: libmlx5 sets
	 * every builder of the QP type, and the device executes it. */
	rc_pair(e, IBV_QP_EX_WITH_SEND, 16, &a, &b);
	fill(lo, 64, 30);
	guard(re, 64);
	write_one(e, a, 50, 0, lo, 64);
	expect("write outside send_ops_flags", re, lo, 64);
	printf("RC SEND-only QP, RDMA_WRITE: checked\n");
	if (ibv_destroy_qp(a) || ibv_destroy_qp(b))
		FAIL("ibv_destroy_qp: %s", strerror(errno));
}

int main(void)
{
	struct env e = {};
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 256,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
			    IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
			    IBV_WC_EX_WITH_DLID_PATH_BITS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
	};
	struct ibv_device_attr da;
	struct ibv_qp *a, *b;
	struct ibv_ah *ah;

	setvbuf(stdout, NULL, _IOLBF, 0);
	open_test_device(&e.d);
	e.eth = e.d.pa.link_layer == IBV_LINK_LAYER_ETHERNET;
	printf("link %s\n", e.eth ? "ethernet" : "infiniband");
	if (ibv_query_device(e.d.ctx, &da))
		FAIL("ibv_query_device");
	printf("atomic_cap %d\n", da.atomic_cap);
	/* The atomics' words are in host byte order where mlx5_ib reports
	 * IBV_ATOMIC_HCA (atomic_req_8B_endianness_mode set to host
	 * endianness), and only there. */
	CHECK(da.atomic_cap == IBV_ATOMIC_HCA, "atomic_cap %d, want IBV_ATOMIC_HCA (%d)", da.atomic_cap, IBV_ATOMIC_HCA);
	e.pd = ibv_alloc_pd(e.d.ctx);
	if (!e.pd)
		FAIL("ibv_alloc_pd: %s", strerror(errno));
	e.scq = ibv_create_cq_ex(e.d.ctx, &ca);
	e.rcq = ibv_create_cq_ex(e.d.ctx, &ca);
	if (!e.scq || !e.rcq)
		FAIL("ibv_create_cq_ex: %s", strerror(errno));
	e.mem = aligned_alloc(4096, MEM);
	if (!e.mem)
		FAIL("aligned_alloc");
	memset(e.mem, GUARD, MEM);
	e.mr = ibv_reg_mr(e.pd, e.mem, MEM,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				  IBV_ACCESS_REMOTE_ATOMIC);
	if (!e.mr)
		FAIL("ibv_reg_mr: %s", strerror(errno));

	rc_ops(&e);

	/* RC SENDs of inline data through a ring of 16 WQEBBs. */
	rc_pair(&e, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE, 4, &a, &b);
	ring_wrap(&e, a, b, NULL, "rc");
	if (ibv_destroy_qp(a) || ibv_destroy_qp(b))
		FAIL("ibv_destroy_qp: %s", strerror(errno));
	rc_pair(&e, IBV_QP_EX_WITH_RDMA_WRITE, 4, &a, &b);
	rc_inline_write(&e, a);
	if (ibv_destroy_qp(a) || ibv_destroy_qp(b))
		FAIL("ibv_destroy_qp: %s", strerror(errno));

	/* UD, addressed with ibv_wr_set_ud_addr before or after the data. */
	a = create_qp(&e, IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM, 4, NULL);
	b = create_qp(&e, IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM, 4, NULL);
	ready_ud(a, QKEY);
	ready_ud(b, QKEY);
	ah = make_ah(&e);
	ring_wrap(&e, a, b, ah, "ud");
	if (ibv_destroy_ah(ah) || ibv_destroy_qp(a) || ibv_destroy_qp(b))
		FAIL("destroy UD: %s", strerror(errno));

	errors(&e);
	unsupported(&e);

	if (ibv_dereg_mr(e.mr) || ibv_destroy_cq(ibv_cq_ex_to_cq(e.scq)) || ibv_destroy_cq(ibv_cq_ex_to_cq(e.rcq)) ||
	    ibv_dealloc_pd(e.pd))
		FAIL("destroy: %s", strerror(errno));
	close_test_device(&e.d);
	free(e.mem);
	printf("failures %d\n", failures);
	printf("done\n");
	return 0;
}
