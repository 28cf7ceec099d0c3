//go:build cgo && linux

package emulate

/*
#include "uverbs_abi.h"
*/
import "C"

// The numbers and sizes of the SRQ and DC commands, as Go constants for the
// tests (which cannot use cgo).
const (
	cmdCreateSRQ          = C.IB_USER_VERBS_CMD_CREATE_SRQ
	cmdModifySRQ          = C.IB_USER_VERBS_CMD_MODIFY_SRQ
	cmdQuerySRQ           = C.IB_USER_VERBS_CMD_QUERY_SRQ
	cmdDestroySRQ         = C.IB_USER_VERBS_CMD_DESTROY_SRQ
	exCmdModifyQP         = C.IB_USER_VERBS_EX_CMD_MODIFY_QP
	createSRQSize         = C.sizeof_struct_ib_uverbs_create_srq
	createSRQRespSize     = C.sizeof_struct_ib_uverbs_create_srq_resp
	querySRQRespSize      = C.sizeof_struct_ib_uverbs_query_srq_resp
	destroySRQRespSize    = C.sizeof_struct_ib_uverbs_destroy_srq_resp
	mlx5CreateSRQSize     = C.sizeof_struct_mlx5_ib_create_srq
	mlx5CreateSRQRespSize = C.sizeof_struct_mlx5_ib_create_srq_resp
	mlx5SRQFlagSig        = C.MLX5_SRQ_FLAG_SIGNATURE
	exModifyQPSize        = C.sizeof_struct_ib_uverbs_ex_modify_qp
	exModifyQPRespSize    = C.sizeof_struct_ib_uverbs_ex_modify_qp_resp
	mlx5ModifyQPSize      = C.sizeof_struct_mlx5_ib_modify_qp
	mlx5ModifyQPRespSize  = C.sizeof_struct_mlx5_ib_modify_qp_resp
	mlx5QPFlagDCI         = C.MLX5_QP_FLAG_TYPE_DCI
	mlx5QPFlagDCT         = C.MLX5_QP_FLAG_TYPE_DCT
	mlx5QPFlagDCIStream   = C.MLX5_QP_FLAG_DCI_STREAM
	qptDriver             = C.IB_UVERBS_QPT_DRIVER
	srqAttrMaxWR          = C.IBV_SRQ_MAX_WR
	srqAttrLimit          = C.IBV_SRQ_LIMIT
	qpAttrRateLimit       = C.IBV_QP_RATE_LIMIT
)
