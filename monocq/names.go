package monocq

import "github.com/mlx5kit/mlx5kit/internal/prm"

// CQEOpcode is the opcode of a CQE (bits 7..4 of op_own). It prints its PRM
// name; IsError reports REQ_ERR and RESP_ERR. CQE.String decodes a whole
// CQE for test failures and debugging.
type CQEOpcode = prm.CQEOpcode

// Syndrome is the syndrome byte of an error CQE. It prints its PRM name;
// Known reports whether the PRM defines it.
type Syndrome = prm.Syndrome

// The CQE opcodes a completion reports (MLX5_CQE_*), for comparing
// CQE.Opcode and transport.Completion.Opcode outside the kit.
const (
	CQEReq         = prm.CQEReq         // a send WQE completed
	CQERespWrImm   = prm.CQERespWrImm   // an RDMA WRITE with immediate took a receive
	CQERespSend    = prm.CQERespSend    // a SEND arrived
	CQERespSendImm = prm.CQERespSendImm // a SEND with immediate arrived
	CQERespSendInv = prm.CQERespSendInv // a SEND with invalidate arrived
	CQEReqErr      = prm.CQEReqErr      // a send WQE failed
	CQERespErr     = prm.CQERespErr     // a receive failed
)
