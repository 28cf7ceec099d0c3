package monocq

import "github.com/mlx5kit/mlx5kit/internal/prm"

// CQEOpcode is the opcode of a CQE (bits 7..4 of op_own). It prints its PRM
// name; IsError reports REQ_ERR and RESP_ERR.
type CQEOpcode = prm.CQEOpcode

// CQE opcodes.
const (
	CQEReq         = prm.CQEReq
	CQERespWrImm   = prm.CQERespWrImm
	CQERespSend    = prm.CQERespSend
	CQERespSendImm = prm.CQERespSendImm
	CQERespSendInv = prm.CQERespSendInv
	CQEResizeCQ    = prm.CQEResizeCQ
	CQENoPacket    = prm.CQENoPacket
	CQESigErr      = prm.CQESigErr
	CQEReqErr      = prm.CQEReqErr
	CQERespErr     = prm.CQERespErr
	CQEInvalid     = prm.CQEInvalid
)

// Syndrome is the syndrome byte of an error CQE. It prints its PRM name;
// Known reports whether the PRM defines it.
type Syndrome = prm.Syndrome

// Error CQE syndromes.
const (
	SyndromeLocalLength       = prm.SyndromeLocalLength
	SyndromeLocalQPOp         = prm.SyndromeLocalQPOp
	SyndromeLocalProt         = prm.SyndromeLocalProt
	SyndromeWRFlush           = prm.SyndromeWRFlush
	SyndromeMWBind            = prm.SyndromeMWBind
	SyndromeBadResp           = prm.SyndromeBadResp
	SyndromeLocalAccess       = prm.SyndromeLocalAccess
	SyndromeRemoteInvalReq    = prm.SyndromeRemoteInvalReq
	SyndromeRemoteAccess      = prm.SyndromeRemoteAccess
	SyndromeRemoteOp          = prm.SyndromeRemoteOp
	SyndromeTransportRetryExc = prm.SyndromeTransportRetryExc
	SyndromeRNRRetryExc       = prm.SyndromeRNRRetryExc
	SyndromeRemoteAborted     = prm.SyndromeRemoteAborted
)

// DumpCQE decodes a 64- or 128-byte CQE into a readable multi-line text
// (opcode, owner, format, QPN, wqe_counter, byte_cnt, immediate, and for an
// error CQE the syndrome by name), for test failures and debugging.
func DumpCQE(cqe []byte) string { return prm.DumpCQE(cqe) }
