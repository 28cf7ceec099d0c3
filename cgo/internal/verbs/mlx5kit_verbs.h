/*
 * Small C shims for package cgo. Every function is static inline so each Go
 * file that includes this header gets its own copy and nothing clashes at
 * link time.
 *
 * They exist for three reasons only:
 *  - verbs that rdma-core defines as macros or inline wrappers (ibv_reg_mr,
 *    ibv_query_port, ibv_query_gid_ex, ibv_query_gid_table) are called
 *    through one named function;
 *  - unions (the DC access key in mlx5dv_dc_init_attr, the element of
 *    ibv_async_event) are read and written by the C compiler, not through
 *    offsets guessed in Go;
 *  - struct mlx5dv_obj holds pointers to its output structs, so it is built
 *    on the C stack here: a Go-allocated mlx5dv_obj pointing at Go memory
 *    would break the cgo pointer rules.
 *
 * Return conventions are those of the wrapped verb; the Go side decides per
 * verb whether the error is the return value or errno.
 */
#ifndef MLX5KIT_VERBS_H
#define MLX5KIT_VERBS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

/* ---- devices ---- */

/* ibv_get_device_list is a macro in verbs.h; NULL and errno on failure. */
static inline struct ibv_device **mk_get_device_list(int *num)
{
	return ibv_get_device_list(num);
}

static inline struct ibv_device *mk_device_at(struct ibv_device **list, int i)
{
	return list[i];
}

/*
 * libibverbs 49 and later answer the active speed a second time, 32 bits
 * wide: active_speed_ex, which newer headers append to struct
 * ibv_port_attr right after port_cap_flags2 and older ones lack. The
 * 8-bit active_speed cannot hold XDR (256): the kernel answers NDR there,
 * and the full speed in active_speed_ex of the QUERY_PORT method. The union
 * gives the query room for the field and names it where newer headers put
 * it, whichever header the package is built against; libibverbs fills as
 * much of the buffer as it knows (the length goes with the query), so an
 * older library leaves the field 0, which means "read active_speed".
 */
#define MK_PORT_SPEED_EX_OFFSET                                                \
	((offsetof(struct ibv_port_attr, port_cap_flags2) + sizeof(uint16_t) + \
	  _Alignof(uint32_t) - 1) /                                            \
	 _Alignof(uint32_t) * _Alignof(uint32_t))

union mk_port_attr {
	struct ibv_port_attr attr;
	struct {
		char     head[MK_PORT_SPEED_EX_OFFSET];
		uint32_t active_speed_ex;
	} ex;
};

_Static_assert(offsetof(union mk_port_attr, ex.active_speed_ex) ==
	       MK_PORT_SPEED_EX_OFFSET, "active_speed_ex after port_cap_flags2");

/* mk_active_speed is active_speed_ex when the library filled it, else
 * active_speed. */
static inline uint32_t mk_active_speed(const union mk_port_attr *u)
{
	if (u->ex.active_speed_ex)
		return u->ex.active_speed_ex;
	return u->attr.active_speed;
}

/*
 * ibv_query_port with room for active_speed_ex: the verbs context's
 * query_port takes the buffer's length, as the ibv_query_port macro passes
 * the header's sizeof. Returns what ibv_query_port returns; *speed is
 * mk_active_speed.
 */
static inline int mk_query_port(struct ibv_context *c, uint8_t port,
				struct ibv_port_attr *attr, uint32_t *speed)
{
	struct verbs_context *vctx = verbs_get_ctx_op(c, query_port);
	union mk_port_attr u;
	int ret;

	memset(&u, 0, sizeof(u));
	if (vctx)
		ret = vctx->query_port(c, port, &u.attr, sizeof(u));
	else
		ret = ibv_query_port(c, port, &u.attr);
	memcpy(attr, &u.attr, sizeof(*attr));
	*speed = mk_active_speed(&u);
	return ret;
}

/* ibv_query_gid_ex returns 0 or an errno value (ENODATA for an empty slot). */
static inline int mk_query_gid_ex(struct ibv_context *c, uint32_t port,
				  uint32_t index, struct ibv_gid_entry *entry)
{
	return ibv_query_gid_ex(c, port, index, entry, 0);
}

/* ibv_query_gid_table returns the number of entries or a negative errno. */
static inline ssize_t mk_query_gid_table(struct ibv_context *c,
					 struct ibv_gid_entry *entries,
					 size_t max_entries)
{
	return ibv_query_gid_table(c, entries, max_entries, 0);
}

/* ibv_query_device_ex returns 0 or an errno value. */
static inline int mk_query_device_ex(struct ibv_context *c,
				     struct ibv_device_attr_ex *attr)
{
	return ibv_query_device_ex(c, NULL, attr);
}

/*
 * The DC read/atomic depths of mlx5dv_query_device (rdma-core 47 and later:
 * MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM, bit 14) are two uint64_t fields that
 * newer headers append to struct mlx5dv_context right after crypto_caps;
 * older headers end there. The union gives the query room for them and
 * names them where newer headers put them, whichever header the package is
 * built against; a libmlx5 that does not know bit 14 leaves it clear in
 * comp_mask and the fields untouched. max_dc_rd_atom is 1 <<
 * log_max_ra_req_dc, max_dc_init_rd_atom 1 << log_max_ra_res_dc, which the
 * kernel bounds a DCI's max_rd_atomic by.
 */
#define MK_DV_CONTEXT_MASK_MAX_DC_RD_ATOM (1 << 14)
#define MK_DV_DC_RD_ATOM_OFFSET                                                \
	((offsetof(struct mlx5dv_context, crypto_caps) +                       \
	  sizeof(struct mlx5dv_crypto_caps) + _Alignof(uint64_t) - 1) /        \
	 _Alignof(uint64_t) * _Alignof(uint64_t))

union mk_dv_context {
	struct mlx5dv_context dv;
	struct {
		char     head[MK_DV_DC_RD_ATOM_OFFSET];
		uint64_t max_dc_rd_atom;
		uint64_t max_dc_init_rd_atom;
	} dc;
};

_Static_assert(offsetof(union mk_dv_context, dc.max_dc_rd_atom) ==
	       MK_DV_DC_RD_ATOM_OFFSET, "DC depths after crypto_caps");

/*
 * mlx5dv_query_device with comp_mask, into out and the DC depths; returns
 * 0 or an errno value.
 */
static inline int mk_query_dv(struct ibv_context *c, uint64_t comp_mask,
			      struct mlx5dv_context *out,
			      uint64_t *dc_rd_atom, uint64_t *dc_init_rd_atom)
{
	union mk_dv_context u;
	int ret;

	memset(&u, 0, sizeof(u));
	u.dv.comp_mask = comp_mask;
	ret = mlx5dv_query_device(c, &u.dv);
	memcpy(out, &u.dv, sizeof(*out));
	*dc_rd_atom = u.dc.max_dc_rd_atom;
	*dc_init_rd_atom = u.dc.max_dc_init_rd_atom;
	return ret;
}

/* ---- memory ---- */

/* ibv_reg_mr returns NULL and sets errno. */
static inline struct ibv_mr *mk_reg_mr(struct ibv_pd *pd, void *addr,
				       size_t length, unsigned int access)
{
	return ibv_reg_mr(pd, addr, length, (int)access);
}

/* ---- completion queues ---- */

static inline struct ibv_cq *mk_cq_ex_to_cq(struct ibv_cq_ex *cq)
{
	return ibv_cq_ex_to_cq(cq);
}

/*
 * ibv_get_cq_event returns 0 or -1 with errno set. cq_out receives the CQ
 * the event is for.
 */
static inline int mk_get_cq_event(struct ibv_comp_channel *ch,
				  struct ibv_cq **cq_out)
{
	void *cq_context;

	return ibv_get_cq_event(ch, cq_out, &cq_context);
}

/* ---- queue pairs ---- */

/*
 * A thread domain gives the QPs created through a parent domain over it a
 * BlueFlame register of their own (rdma-core attaches a dedicated bfreg to
 * each thread domain), so a data plane can write it without a lock and
 * keep the alternation between its two halves to itself. Both return NULL
 * and set errno on failure.
 */
static inline struct ibv_td *mk_alloc_td(struct ibv_context *c)
{
	struct ibv_td_init_attr attr;

	memset(&attr, 0, sizeof(attr));
	return ibv_alloc_td(c, &attr);
}

static inline struct ibv_pd *mk_alloc_parent_domain(struct ibv_context *c,
						    struct ibv_pd *pd,
						    struct ibv_td *td)
{
	struct ibv_parent_domain_init_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.pd = pd;
	attr.td = td;
	return ibv_alloc_parent_domain(c, &attr);
}

static inline void mk_set_dc(struct mlx5dv_qp_init_attr *attr, int dct,
			     uint64_t access_key)
{
	attr->comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_DC;
	if (dct) {
		attr->dc_init_attr.dc_type = MLX5DV_DCTYPE_DCT;
		attr->dc_init_attr.dct_access_key = access_key;
	} else {
		attr->dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
	}
}

static inline uint64_t mk_get_dct_access_key(const struct mlx5dv_qp_init_attr *attr)
{
	return attr->dc_init_attr.dct_access_key;
}

/* ---- mlx5dv_init_obj, one object at a time; all return 0 or an errno value ---- */

static inline int mk_init_qp(struct ibv_qp *qp, struct mlx5dv_qp *out)
{
	struct mlx5dv_obj obj;

	memset(&obj, 0, sizeof(obj));
	out->comp_mask = 0;
	obj.qp.in = qp;
	obj.qp.out = out;
	return mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP);
}

static inline int mk_init_cq(struct ibv_cq *cq, struct mlx5dv_cq *out)
{
	struct mlx5dv_obj obj;

	memset(&obj, 0, sizeof(obj));
	obj.cq.in = cq;
	obj.cq.out = out;
	return mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ);
}

/* Asks for the SRQ number too (MLX5DV_SRQ_MASK_SRQN). */
static inline int mk_init_srq(struct ibv_srq *srq, struct mlx5dv_srq *out)
{
	struct mlx5dv_obj obj;

	memset(&obj, 0, sizeof(obj));
	out->comp_mask = MLX5DV_SRQ_MASK_SRQN;
	obj.srq.in = srq;
	obj.srq.out = out;
	return mlx5dv_init_obj(&obj, MLX5DV_OBJ_SRQ);
}

/*
 * Copies the AH's address vector (struct mlx5_wqe_av) into av_out, which
 * must hold sizeof(struct mlx5_wqe_av) bytes.
 */
static inline int mk_init_ah(struct ibv_ah *ah, void *av_out)
{
	struct mlx5dv_obj obj;
	struct mlx5dv_ah dv;
	int ret;

	memset(&obj, 0, sizeof(obj));
	memset(&dv, 0, sizeof(dv));
	obj.ah.in = ah;
	obj.ah.out = &dv;
	ret = mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH);
	if (ret)
		return ret;
	if (!dv.av)
		return EINVAL;
	memcpy(av_out, dv.av, sizeof(struct mlx5_wqe_av));
	return 0;
}

static inline size_t mk_sizeof_wqe_av(void)
{
	return sizeof(struct mlx5_wqe_av);
}

/* ---- asynchronous events ---- */

/*
 * The union element of ibv_async_event, read by the compiler. qpn is the
 * QP number (for a DCT, the DCT number) when the event is about a QP; the
 * QP cannot be destroyed before the event is acknowledged, so reading it
 * here is safe.
 */
struct mk_async_element {
	void     *cq;
	void     *qp;
	void     *srq;
	uint32_t  qpn;
	int       port;
};

/*
 * What an event's element holds, as the Go side finds it for the event
 * type (internal/asyncevent's Element values; the layout test checks
 * them): the member of the union mk_async_element reads. Other kinds
 * (the device, a work queue, an unknown event) read nothing.
 */
enum {
	MK_ASYNC_ELEMENT_CQ   = 1,
	MK_ASYNC_ELEMENT_QP   = 2,
	MK_ASYNC_ELEMENT_SRQ  = 3,
	MK_ASYNC_ELEMENT_PORT = 4,
};

static inline void mk_async_element(const struct ibv_async_event *ev,
				    int kind, struct mk_async_element *out)
{
	memset(out, 0, sizeof(*out));
	switch (kind) {
	case MK_ASYNC_ELEMENT_CQ:
		out->cq = ev->element.cq;
		break;
	case MK_ASYNC_ELEMENT_QP:
		out->qp = ev->element.qp;
		if (ev->element.qp)
			out->qpn = ev->element.qp->qp_num;
		break;
	case MK_ASYNC_ELEMENT_SRQ:
		out->srq = ev->element.srq;
		break;
	case MK_ASYNC_ELEMENT_PORT:
		out->port = ev->element.port_num;
		break;
	default:
		break;
	}
}

#endif /* MLX5KIT_VERBS_H */
