package monocq

import (
	"errors"
	"strconv"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// Status is the status of a work completion with the values of enum
// ibv_wc_status, so it converts to and from the verbs value unchanged. It is
// what CompletionError reports; the transports' Completion.Status says
// instead how a completion was matched to its work request.
type Status uint8

// Work completion statuses. The mlx5 syndromes map onto them as rdma-core's
// mlx5 provider maps them (see StatusOf).
const (
	StatusSuccess              Status = 0
	StatusLocalLength          Status = 1  // IBV_WC_LOC_LEN_ERR
	StatusLocalQPOperation     Status = 2  // IBV_WC_LOC_QP_OP_ERR
	StatusLocalProtection      Status = 4  // IBV_WC_LOC_PROT_ERR
	StatusFlushed              Status = 5  // IBV_WC_WR_FLUSH_ERR
	StatusMemoryWindowBind     Status = 6  // IBV_WC_MW_BIND_ERR
	StatusBadResponse          Status = 7  // IBV_WC_BAD_RESP_ERR
	StatusLocalAccess          Status = 8  // IBV_WC_LOC_ACCESS_ERR
	StatusRemoteInvalidRequest Status = 9  // IBV_WC_REM_INV_REQ_ERR
	StatusRemoteAccess         Status = 10 // IBV_WC_REM_ACCESS_ERR
	StatusRemoteOperation      Status = 11 // IBV_WC_REM_OP_ERR
	StatusRetryExceeded        Status = 12 // IBV_WC_RETRY_EXC_ERR
	StatusRNRRetryExceeded     Status = 13 // IBV_WC_RNR_RETRY_EXC_ERR
	StatusRemoteAborted        Status = 16 // IBV_WC_REM_ABORT_ERR
	StatusGeneral              Status = 21 // IBV_WC_GENERAL_ERR
)

var statusNames = map[Status]string{
	StatusSuccess:              "SUCCESS",
	StatusLocalLength:          "LOC_LEN_ERR",
	StatusLocalQPOperation:     "LOC_QP_OP_ERR",
	StatusLocalProtection:      "LOC_PROT_ERR",
	StatusFlushed:              "WR_FLUSH_ERR",
	StatusMemoryWindowBind:     "MW_BIND_ERR",
	StatusBadResponse:          "BAD_RESP_ERR",
	StatusLocalAccess:          "LOC_ACCESS_ERR",
	StatusRemoteInvalidRequest: "REM_INV_REQ_ERR",
	StatusRemoteAccess:         "REM_ACCESS_ERR",
	StatusRemoteOperation:      "REM_OP_ERR",
	StatusRetryExceeded:        "RETRY_EXC_ERR",
	StatusRNRRetryExceeded:     "RNR_RETRY_EXC_ERR",
	StatusRemoteAborted:        "REM_ABORT_ERR",
	StatusGeneral:              "GENERAL_ERR",
}

// String returns the verbs name without the IBV_WC_ prefix, e.g.
// "REM_ACCESS_ERR", or "Status(n)".
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// StatusOf maps an mlx5 syndrome to the work completion status, as
// rdma-core's mlx5 provider does; a syndrome the PRM does not define is
// StatusGeneral.
func StatusOf(s prm.Syndrome) Status {
	switch s {
	case prm.SyndromeLocalLength:
		return StatusLocalLength
	case prm.SyndromeLocalQPOp:
		return StatusLocalQPOperation
	case prm.SyndromeLocalProt:
		return StatusLocalProtection
	case prm.SyndromeWRFlush:
		return StatusFlushed
	case prm.SyndromeMWBind:
		return StatusMemoryWindowBind
	case prm.SyndromeBadResp:
		return StatusBadResponse
	case prm.SyndromeLocalAccess:
		return StatusLocalAccess
	case prm.SyndromeRemoteInvalReq:
		return StatusRemoteInvalidRequest
	case prm.SyndromeRemoteAccess:
		return StatusRemoteAccess
	case prm.SyndromeRemoteOp:
		return StatusRemoteOperation
	case prm.SyndromeTransportRetryExc:
		return StatusRetryExceeded
	case prm.SyndromeRNRRetryExc:
		return StatusRNRRetryExceeded
	case prm.SyndromeRemoteAborted:
		return StatusRemoteAborted
	}
	return StatusGeneral
}

// Sentinel errors, one per failed status. A *CompletionError of an error
// CQE matches the one of its status with errors.Is.
var (
	ErrLocalLength          = errors.New("local length error")
	ErrLocalQPOperation     = errors.New("local QP operation error")
	ErrLocalProtection      = errors.New("local protection error")
	ErrFlushed              = errors.New("work request flushed")
	ErrMemoryWindowBind     = errors.New("memory window bind error")
	ErrBadResponse          = errors.New("bad response")
	ErrLocalAccess          = errors.New("local access error")
	ErrRemoteInvalidRequest = errors.New("remote invalid request")
	ErrRemoteAccess         = errors.New("remote access error")
	ErrRemoteOperation      = errors.New("remote operation error")
	ErrRetryExceeded        = errors.New("transport retry counter exceeded")
	ErrRNRRetryExceeded     = errors.New("RNR retry counter exceeded")
	ErrRemoteAborted        = errors.New("remote aborted")
	ErrGeneral              = errors.New("general completion error")
)

// Sentinel returns the sentinel error of a failed status (nil for
// StatusSuccess).
func (s Status) Sentinel() error {
	switch s {
	case StatusSuccess:
		return nil
	case StatusLocalLength:
		return ErrLocalLength
	case StatusLocalQPOperation:
		return ErrLocalQPOperation
	case StatusLocalProtection:
		return ErrLocalProtection
	case StatusFlushed:
		return ErrFlushed
	case StatusMemoryWindowBind:
		return ErrMemoryWindowBind
	case StatusBadResponse:
		return ErrBadResponse
	case StatusLocalAccess:
		return ErrLocalAccess
	case StatusRemoteInvalidRequest:
		return ErrRemoteInvalidRequest
	case StatusRemoteAccess:
		return ErrRemoteAccess
	case StatusRemoteOperation:
		return ErrRemoteOperation
	case StatusRetryExceeded:
		return ErrRetryExceeded
	case StatusRNRRetryExceeded:
		return ErrRNRRetryExceeded
	case StatusRemoteAborted:
		return ErrRemoteAborted
	}
	return ErrGeneral
}
