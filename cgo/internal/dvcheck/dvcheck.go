//go:build cgo

package dvcheck

/*
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <endian.h>
#include <infiniband/mlx5dv.h>

struct dvcheck_entry {
	const char *name;
	long long value;
};

#define DVCHECK_OFF(s, f) { "offsetof(" #s "." #f ")", (long long)offsetof(struct s, f) }
#define DVCHECK_SIZE(s) { "sizeof(" #s ")", (long long)sizeof(struct s) }
#define DVCHECK_VAL(v) { #v, (long long)(v) }

static const struct dvcheck_entry dvcheck_entries[] = {
	DVCHECK_SIZE(mlx5_wqe_ctrl_seg),
	DVCHECK_OFF(mlx5_wqe_ctrl_seg, opmod_idx_opcode),
	DVCHECK_OFF(mlx5_wqe_ctrl_seg, qpn_ds),
	DVCHECK_OFF(mlx5_wqe_ctrl_seg, signature),
	DVCHECK_OFF(mlx5_wqe_ctrl_seg, dci_stream_channel_id),
	DVCHECK_OFF(mlx5_wqe_ctrl_seg, fm_ce_se),
	DVCHECK_OFF(mlx5_wqe_ctrl_seg, imm),

	DVCHECK_SIZE(mlx5_wqe_raddr_seg),
	DVCHECK_OFF(mlx5_wqe_raddr_seg, raddr),
	DVCHECK_OFF(mlx5_wqe_raddr_seg, rkey),
	DVCHECK_OFF(mlx5_wqe_raddr_seg, reserved),

	DVCHECK_SIZE(mlx5_wqe_atomic_seg),
	DVCHECK_OFF(mlx5_wqe_atomic_seg, swap_add),
	DVCHECK_OFF(mlx5_wqe_atomic_seg, compare),

	DVCHECK_SIZE(mlx5_wqe_data_seg),
	DVCHECK_OFF(mlx5_wqe_data_seg, byte_count),
	DVCHECK_OFF(mlx5_wqe_data_seg, lkey),
	DVCHECK_OFF(mlx5_wqe_data_seg, addr),

	DVCHECK_SIZE(mlx5_wqe_inl_data_seg),
	DVCHECK_OFF(mlx5_wqe_inl_data_seg, byte_count),

	DVCHECK_SIZE(mlx5_wqe_av),
	DVCHECK_OFF(mlx5_wqe_av, key.qkey.qkey),
	DVCHECK_OFF(mlx5_wqe_av, key.qkey.reserved),
	DVCHECK_OFF(mlx5_wqe_av, key.dc_key),
	DVCHECK_OFF(mlx5_wqe_av, dqp_dct),
	DVCHECK_OFF(mlx5_wqe_av, stat_rate_sl),
	DVCHECK_OFF(mlx5_wqe_av, fl_mlid),
	DVCHECK_OFF(mlx5_wqe_av, rlid),
	DVCHECK_OFF(mlx5_wqe_av, reserved0),
	DVCHECK_OFF(mlx5_wqe_av, rmac),
	DVCHECK_OFF(mlx5_wqe_av, tclass),
	DVCHECK_OFF(mlx5_wqe_av, hop_limit),
	DVCHECK_OFF(mlx5_wqe_av, grh_gid_fl),
	DVCHECK_OFF(mlx5_wqe_av, rgid),
	DVCHECK_SIZE(mlx5_wqe_datagram_seg),
	DVCHECK_OFF(mlx5_wqe_datagram_seg, av),

	DVCHECK_SIZE(mlx5_wqe_srq_next_seg),
	DVCHECK_OFF(mlx5_wqe_srq_next_seg, next_wqe_index),
	DVCHECK_OFF(mlx5_wqe_srq_next_seg, signature),

	DVCHECK_SIZE(mlx5_cqe64),
	DVCHECK_OFF(mlx5_cqe64, wqe_id),
	DVCHECK_OFF(mlx5_cqe64, ml_path),
	DVCHECK_OFF(mlx5_cqe64, slid),
	DVCHECK_OFF(mlx5_cqe64, flags_rqpn),
	DVCHECK_OFF(mlx5_cqe64, hds_ip_ext),
	DVCHECK_OFF(mlx5_cqe64, l4_hdr_type_etc),
	DVCHECK_OFF(mlx5_cqe64, vlan_info),
	DVCHECK_OFF(mlx5_cqe64, srqn_uidx),
	DVCHECK_OFF(mlx5_cqe64, imm_inval_pkey),
	DVCHECK_OFF(mlx5_cqe64, app),
	DVCHECK_OFF(mlx5_cqe64, app_op),
	DVCHECK_OFF(mlx5_cqe64, app_info),
	DVCHECK_OFF(mlx5_cqe64, byte_cnt),
	DVCHECK_OFF(mlx5_cqe64, timestamp),
	DVCHECK_OFF(mlx5_cqe64, sop_drop_qpn),
	DVCHECK_OFF(mlx5_cqe64, wqe_counter),
	DVCHECK_OFF(mlx5_cqe64, signature),
	DVCHECK_OFF(mlx5_cqe64, op_own),

	DVCHECK_SIZE(mlx5_err_cqe),
	DVCHECK_OFF(mlx5_err_cqe, srqn),
	DVCHECK_OFF(mlx5_err_cqe, vendor_err_synd),
	DVCHECK_OFF(mlx5_err_cqe, syndrome),
	DVCHECK_OFF(mlx5_err_cqe, s_wqe_opcode_qpn),
	DVCHECK_OFF(mlx5_err_cqe, wqe_counter),
	DVCHECK_OFF(mlx5_err_cqe, signature),
	DVCHECK_OFF(mlx5_err_cqe, op_own),

	DVCHECK_SIZE(mlx5dv_qp),
	DVCHECK_OFF(mlx5dv_qp, dbrec),
	DVCHECK_OFF(mlx5dv_qp, sq.buf),
	DVCHECK_OFF(mlx5dv_qp, sq.wqe_cnt),
	DVCHECK_OFF(mlx5dv_qp, sq.stride),
	DVCHECK_OFF(mlx5dv_qp, rq.buf),
	DVCHECK_OFF(mlx5dv_qp, rq.wqe_cnt),
	DVCHECK_OFF(mlx5dv_qp, rq.stride),
	DVCHECK_OFF(mlx5dv_qp, bf.reg),
	DVCHECK_OFF(mlx5dv_qp, bf.size),
	DVCHECK_OFF(mlx5dv_qp, comp_mask),
	DVCHECK_OFF(mlx5dv_qp, uar_mmap_offset),
	DVCHECK_OFF(mlx5dv_qp, tirn),
	DVCHECK_OFF(mlx5dv_qp, tisn),
	DVCHECK_OFF(mlx5dv_qp, rqn),
	DVCHECK_OFF(mlx5dv_qp, sqn),
	DVCHECK_OFF(mlx5dv_qp, tir_icm_addr),

	DVCHECK_SIZE(mlx5dv_cq),
	DVCHECK_OFF(mlx5dv_cq, buf),
	DVCHECK_OFF(mlx5dv_cq, dbrec),
	DVCHECK_OFF(mlx5dv_cq, cqe_cnt),
	DVCHECK_OFF(mlx5dv_cq, cqe_size),
	DVCHECK_OFF(mlx5dv_cq, cq_uar),
	DVCHECK_OFF(mlx5dv_cq, cqn),
	DVCHECK_OFF(mlx5dv_cq, comp_mask),

	DVCHECK_SIZE(mlx5dv_srq),
	DVCHECK_OFF(mlx5dv_srq, buf),
	DVCHECK_OFF(mlx5dv_srq, dbrec),
	DVCHECK_OFF(mlx5dv_srq, stride),
	DVCHECK_OFF(mlx5dv_srq, head),
	DVCHECK_OFF(mlx5dv_srq, tail),
	DVCHECK_OFF(mlx5dv_srq, comp_mask),
	DVCHECK_OFF(mlx5dv_srq, srqn),

	DVCHECK_VAL(MLX5_OPCODE_NOP),
	DVCHECK_VAL(MLX5_OPCODE_SEND_INVAL),
	DVCHECK_VAL(MLX5_OPCODE_RDMA_WRITE),
	DVCHECK_VAL(MLX5_OPCODE_RDMA_WRITE_IMM),
	DVCHECK_VAL(MLX5_OPCODE_SEND),
	DVCHECK_VAL(MLX5_OPCODE_SEND_IMM),
	DVCHECK_VAL(MLX5_OPCODE_TSO),
	DVCHECK_VAL(MLX5_OPCODE_RDMA_READ),
	DVCHECK_VAL(MLX5_OPCODE_ATOMIC_CS),
	DVCHECK_VAL(MLX5_OPCODE_ATOMIC_FA),
	DVCHECK_VAL(MLX5_OPCODE_ATOMIC_MASKED_CS),
	DVCHECK_VAL(MLX5_OPCODE_ATOMIC_MASKED_FA),
	DVCHECK_VAL(MLX5_OPCODE_FMR),
	DVCHECK_VAL(MLX5_OPCODE_LOCAL_INVAL),
	DVCHECK_VAL(MLX5_OPCODE_CONFIG_CMD),
	DVCHECK_VAL(MLX5_OPCODE_SET_PSV),
	DVCHECK_VAL(MLX5_OPCODE_UMR),
	DVCHECK_VAL(MLX5_OPCODE_TAG_MATCHING),
	DVCHECK_VAL(MLX5_OPCODE_FLOW_TBL_ACCESS),
	DVCHECK_VAL(MLX5_OPCODE_MMO),

	DVCHECK_VAL(MLX5_CQE_OWNER_MASK),
	DVCHECK_VAL(MLX5_CQE_REQ),
	DVCHECK_VAL(MLX5_CQE_RESP_WR_IMM),
	DVCHECK_VAL(MLX5_CQE_RESP_SEND),
	DVCHECK_VAL(MLX5_CQE_RESP_SEND_IMM),
	DVCHECK_VAL(MLX5_CQE_RESP_SEND_INV),
	DVCHECK_VAL(MLX5_CQE_RESIZE_CQ),
	DVCHECK_VAL(MLX5_CQE_NO_PACKET),
	DVCHECK_VAL(MLX5_CQE_SIG_ERR),
	DVCHECK_VAL(MLX5_CQE_REQ_ERR),
	DVCHECK_VAL(MLX5_CQE_RESP_ERR),
	DVCHECK_VAL(MLX5_CQE_INVALID),

	DVCHECK_VAL(MLX5_CQE_L3_HDR_TYPE_NONE),
	DVCHECK_VAL(MLX5_CQE_L3_HDR_TYPE_IPV6),
	DVCHECK_VAL(MLX5_CQE_L3_HDR_TYPE_IPV4),

	DVCHECK_VAL(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR),
	DVCHECK_VAL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR),
	DVCHECK_VAL(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR),
	DVCHECK_VAL(MLX5_CQE_SYNDROME_WR_FLUSH_ERR),
	DVCHECK_VAL(MLX5_CQE_SYNDROME_MW_BIND_ERR),
	DVCHECK_VAL(MLX5_CQE_SYNDROME_BAD_RESP_ERR),
	DVCHECK_VAL(MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR),
	DVCHECK_VAL(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR),
	DVCHECK_VAL(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR),
	DVCHECK_VAL(MLX5_CQE_SYNDROME_REMOTE_OP_ERR),
	DVCHECK_VAL(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR),
	DVCHECK_VAL(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR),
	DVCHECK_VAL(MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR),
	DVCHECK_VAL(MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT),

	DVCHECK_VAL(MLX5_WQE_CTRL_CQ_UPDATE),
	DVCHECK_VAL(MLX5_WQE_CTRL_SOLICITED),
	DVCHECK_VAL(MLX5_WQE_CTRL_FENCE),
	DVCHECK_VAL(MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE),
	DVCHECK_VAL(MLX5_INLINE_SEG),
	DVCHECK_VAL(MLX5_EXTENDED_UD_AV),
	DVCHECK_VAL(MLX5_INVALID_LKEY),
	DVCHECK_VAL(MLX5_CQ_DOORBELL),
	DVCHECK_VAL(MLX5_CQ_DB_REQ_NOT_SOL),
	DVCHECK_VAL(MLX5_CQ_DB_REQ_NOT),
	DVCHECK_VAL(MLX5_RCV_DBR),
	DVCHECK_VAL(MLX5_SND_DBR),
	DVCHECK_VAL(MLX5_SEND_WQE_BB),
	DVCHECK_VAL(MLX5_SEND_WQE_SHIFT),
	DVCHECK_VAL(MLX5_INLINE_SCATTER_32),
	DVCHECK_VAL(MLX5_INLINE_SCATTER_64),
};

static int dvcheck_count(void) {
	return (int)(sizeof(dvcheck_entries) / sizeof(dvcheck_entries[0]));
}

static const char *dvcheck_name(int i) { return dvcheck_entries[i].name; }

static long long dvcheck_value(int i) { return dvcheck_entries[i].value; }

// The wrappers take the imm as a number and pass htobe32(imm), the form
// mlx5dv_set_ctrl_seg stores as is.
static void dvcheck_set_ctrl_seg(void *buf, uint16_t pi, uint8_t opcode, uint8_t opmod,
				 uint32_t qp_num, uint8_t fm_ce_se, uint8_t ds,
				 uint8_t signature, uint32_t imm) {
	mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)buf, pi, opcode, opmod, qp_num,
			    fm_ce_se, ds, signature, htobe32(imm));
}

static void dvcheck_set_data_seg(void *buf, uint32_t length, uint32_t lkey, uint64_t addr) {
	mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)buf, length, lkey, (uintptr_t)addr);
}

static void dvcheck_set_dgram_seg(void *buf, uint64_t key, uint32_t dqp_dct, uint8_t ext,
				  uint8_t stat_rate_sl, uint8_t fl_mlid, uint16_t rlid,
				  uint8_t *rmac, uint8_t tclass, uint8_t hop_limit,
				  uint32_t grh_gid_fl, uint8_t *rgid) {
	mlx5dv_set_dgram_seg((struct mlx5_wqe_datagram_seg *)buf, key, dqp_dct, ext,
			     stat_rate_sl, fl_mlid, rlid, rmac, tclass, hop_limit,
			     grh_gid_fl, rgid);
}
*/
import "C"

import "unsafe"

// BufSize is the size of the buffers the Set* functions work on: one WQEBB.
const BufSize = 64

// Values returns every offset, size and enum value that package internal/prm
// mirrors from infiniband/mlx5dv.h, keyed by the C expression that produced
// it: "sizeof(mlx5_wqe_ctrl_seg)", "offsetof(mlx5_wqe_av.rgid)",
// "offsetof(mlx5dv_qp.sq.buf)", "MLX5_OPCODE_SEND" and so on.
func Values() map[string]int64 {
	n := int(C.dvcheck_count())
	m := make(map[string]int64, n)
	for i := 0; i < n; i++ {
		m[C.GoString(C.dvcheck_name(C.int(i)))] = int64(C.dvcheck_value(C.int(i)))
	}
	return m
}

// withCBuf copies buf into C memory (extra further bytes follow it there),
// runs f on it and copies the first BufSize bytes back: memory handed to C
// is C memory, never the Go heap.
func withCBuf(buf *[BufSize]byte, extra []byte, f func(p unsafe.Pointer)) {
	p := C.malloc(C.size_t(BufSize + len(extra)))
	defer C.free(p)
	c := unsafe.Slice((*byte)(p), BufSize+len(extra))
	copy(c, buf[:])
	copy(c[BufSize:], extra)
	f(p)
	copy(buf[:], c[:BufSize])
}

// SetCtrlSeg runs mlx5dv_set_ctrl_seg on the first 16 bytes of buf. imm is
// a number; mlx5dv_set_ctrl_seg receives htobe32(imm), the big-endian form it
// expects, so the bytes match prm.PutCtrl with the same imm.
func SetCtrlSeg(buf *[BufSize]byte, pi uint16, opcode, opmod uint8, qpn uint32, fmCeSe, ds, signature uint8, imm uint32) {
	withCBuf(buf, nil, func(p unsafe.Pointer) {
		C.dvcheck_set_ctrl_seg(p, C.uint16_t(pi), C.uint8_t(opcode), C.uint8_t(opmod), C.uint32_t(qpn),
			C.uint8_t(fmCeSe), C.uint8_t(ds), C.uint8_t(signature), C.uint32_t(imm))
	})
}

// SetDataSeg runs mlx5dv_set_data_seg on the first 16 bytes of buf. The
// address goes through uintptr_t, so it must fit the platform's pointers.
func SetDataSeg(buf *[BufSize]byte, length, lkey uint32, addr uint64) {
	withCBuf(buf, nil, func(p unsafe.Pointer) {
		C.dvcheck_set_data_seg(p, C.uint32_t(length), C.uint32_t(lkey), C.uint64_t(addr))
	})
}

// SetDgramSeg runs mlx5dv_set_dgram_seg on the first 48 bytes of buf; the
// rmac and rgid it copies from are placed in C memory too.
func SetDgramSeg(buf *[BufSize]byte, key uint64, dqpDCT uint32, ext, statRateSL, flMLID uint8, rlid uint16,
	rmac [6]byte, tclass, hopLimit uint8, grhGIDFL uint32, rgid [16]byte) {
	extra := append(rmac[:], rgid[:]...)
	withCBuf(buf, extra, func(p unsafe.Pointer) {
		rm := (*C.uint8_t)(unsafe.Add(p, BufSize))
		rg := (*C.uint8_t)(unsafe.Add(p, BufSize+len(rmac)))
		C.dvcheck_set_dgram_seg(p, C.uint64_t(key), C.uint32_t(dqpDCT), C.uint8_t(ext),
			C.uint8_t(statRateSL), C.uint8_t(flMLID), C.uint16_t(rlid), rm,
			C.uint8_t(tclass), C.uint8_t(hopLimit), C.uint32_t(grhGIDFL), rg)
	})
}
