/*
 * The allocator callbacks of the parent domains that QPs, CQs and SRQs are
 * created through (see extmem.go and extalloc.go): rdma-core asks them for
 * every ring and doorbell record of the object (MLX5DV_RES_TYPE_QP, _CQ,
 * _SRQ, _DBR) and hands the memory back to them at its destruction. They
 * forward to Go (extalloc_export.go), which maps the memory and defers its
 * unmapping until the data plane can no longer reach it. pd_context is the
 * number of the Go arena, not a pointer.
 *
 * Static inline like mlx5kit_verbs.h: each including file gets its copy.
 */
#ifndef MLX5KIT_EXTALLOC_H
#define MLX5KIT_EXTALLOC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <infiniband/verbs.h>

/* In Go, extalloc_export.go. */
extern void *mkExtAlloc(uintptr_t arena, size_t size, size_t alignment, uint64_t resource_type);
extern void mkExtFree(uintptr_t arena, void *ptr, uint64_t resource_type);

static inline void *mk_ext_alloc_cb(struct ibv_pd *pd, void *pd_context,
				    size_t size, size_t alignment,
				    uint64_t resource_type)
{
	void *p;

	(void)pd;
	p = mkExtAlloc((uintptr_t)pd_context, size, alignment, resource_type);
	/*
	 * rdma-core fails the creation on NULL with the errno left here
	 * (mlx5_alloc_buf_custom, mlx5_alloc_dbrec set none).
	 */
	if (!p)
		errno = ENOMEM;
	return p;
}

static inline void mk_ext_free_cb(struct ibv_pd *pd, void *pd_context,
				  void *ptr, uint64_t resource_type)
{
	(void)pd;
	mkExtFree((uintptr_t)pd_context, ptr, resource_type);
}

/*
 * A parent domain over pd (and td, when not NULL) whose buffers come from
 * the Go arena numbered arena. NULL and errno on failure.
 */
static inline struct ibv_pd *mk_alloc_ext_parent_domain(struct ibv_context *c,
							struct ibv_pd *pd,
							struct ibv_td *td,
							uintptr_t arena)
{
	struct ibv_parent_domain_init_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.pd = pd;
	attr.td = td;
	attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
			 IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
	attr.alloc = mk_ext_alloc_cb;
	attr.free = mk_ext_free_cb;
	attr.pd_context = (void *)arena;
	return ibv_alloc_parent_domain(c, &attr);
}

#endif
