/*
 * The kernel ABI the emulated kernel speaks, from the installed headers:
 * uverbs (write commands, ioctl framework, ioctl methods) and mlx5's vendor
 * structures. The enum gives the Go side the sizes and offsets of what it
 * decodes as bytes (the ioctl header and attributes, which hold unions).
 */
#ifndef MLX5KIT_EMULATE_UVERBS_ABI_H
#define MLX5KIT_EMULATE_UVERBS_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <rdma/mlx5-abi.h>
/* The link layer and atomic capability numbers the kernel answers with are
 * the ones libibverbs gives its callers unchanged. */
#include <infiniband/verbs.h>

enum {
	mk_ioctl_hdr_size = sizeof(struct ib_uverbs_ioctl_hdr),
	mk_ioctl_hdr_off_length = offsetof(struct ib_uverbs_ioctl_hdr, length),
	mk_ioctl_hdr_off_object = offsetof(struct ib_uverbs_ioctl_hdr, object_id),
	mk_ioctl_hdr_off_method = offsetof(struct ib_uverbs_ioctl_hdr, method_id),
	mk_ioctl_hdr_off_num_attrs = offsetof(struct ib_uverbs_ioctl_hdr, num_attrs),
	mk_ioctl_hdr_off_reserved1 = offsetof(struct ib_uverbs_ioctl_hdr, reserved1),
	mk_ioctl_hdr_off_driver_id = offsetof(struct ib_uverbs_ioctl_hdr, driver_id),
	mk_ioctl_hdr_off_reserved2 = offsetof(struct ib_uverbs_ioctl_hdr, reserved2),
	mk_attr_size = sizeof(struct ib_uverbs_attr),
	mk_attr_off_id = offsetof(struct ib_uverbs_attr, attr_id),
	mk_attr_off_len = offsetof(struct ib_uverbs_attr, len),
	mk_attr_off_flags = offsetof(struct ib_uverbs_attr, flags),
	mk_attr_off_attr_data = offsetof(struct ib_uverbs_attr, attr_data),
	mk_attr_off_data = offsetof(struct ib_uverbs_attr, data),
	mk_cmd_hdr_size = sizeof(struct ib_uverbs_cmd_hdr),
	mk_ex_cmd_hdr_size = sizeof(struct ib_uverbs_ex_cmd_hdr),
	mk_query_port_resp_ex_size = sizeof(struct ib_uverbs_query_port_resp_ex),
	mk_query_port_resp_off_active_speed = offsetof(struct ib_uverbs_query_port_resp, active_speed),
	mk_gid_entry_size = sizeof(struct ib_uverbs_gid_entry),
	mk_alloc_ucontext_req_v0_size = sizeof(struct mlx5_ib_alloc_ucontext_req),
	mk_alloc_ucontext_req_v2_min = offsetof(struct mlx5_ib_alloc_ucontext_req_v2, max_cqe_version),
};

/* End offsets of the fields of mlx5_ib_query_device_resp, in order: the
 * kernel answers with every field that fits the caller's buffer. */
#define MK_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
static const uint32_t mk_mlx5_query_device_resp_ends[] = {
	MK_END(struct mlx5_ib_query_device_resp, response_length),
	MK_END(struct mlx5_ib_query_device_resp, tso_caps),
	MK_END(struct mlx5_ib_query_device_resp, rss_caps),
	MK_END(struct mlx5_ib_query_device_resp, cqe_comp_caps),
	MK_END(struct mlx5_ib_query_device_resp, packet_pacing_caps),
	MK_END(struct mlx5_ib_query_device_resp, mlx5_ib_support_multi_pkt_send_wqes),
	MK_END(struct mlx5_ib_query_device_resp, flags),
	MK_END(struct mlx5_ib_query_device_resp, sw_parsing_caps),
	MK_END(struct mlx5_ib_query_device_resp, striding_rq_caps),
	MK_END(struct mlx5_ib_query_device_resp, tunnel_offloads_caps),
	MK_END(struct mlx5_ib_query_device_resp, dci_streams_caps),
};
enum { mk_mlx5_query_device_resp_nends = sizeof(mk_mlx5_query_device_resp_ends) / sizeof(uint32_t) };
static inline uint32_t mk_mlx5_query_device_resp_end(int i) { return mk_mlx5_query_device_resp_ends[i]; }

/* How mlx5_ib splits an mmap offset (in pages) into a command and an index
 * (its mlx5_ib.h, not a uapi header; libmlx5 has the same numbers). */
enum {
	MK_MLX5_IB_MMAP_CMD_SHIFT = 8,
	MK_MLX5_IB_MMAP_CMD_MASK = 0xff,
};

static inline unsigned long mk_rdma_verbs_ioctl(void) { return RDMA_VERBS_IOCTL; }

#endif
