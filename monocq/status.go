package monocq

import (
	"errors"

	"github.com/mlx5kit/mlx5kit/internal/names"

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
	statusSuccess              Status = 0
	statusLocalLength          Status = 1  // IBV_WC_LOC_LEN_ERR
	statusLocalQPOperation     Status = 2  // IBV_WC_LOC_QP_OP_ERR
	statusLocalProtection      Status = 4  // IBV_WC_LOC_PROT_ERR
	statusFlushed              Status = 5  // IBV_WC_WR_FLUSH_ERR
	statusMemoryWindowBind     Status = 6  // IBV_WC_MW_BIND_ERR
	statusBadResponse          Status = 7  // IBV_WC_BAD_RESP_ERR
	statusLocalAccess          Status = 8  // IBV_WC_LOC_ACCESS_ERR
	statusRemoteInvalidRequest Status = 9  // IBV_WC_REM_INV_REQ_ERR
	statusRemoteAccess         Status = 10 // IBV_WC_REM_ACCESS_ERR
	statusRemoteOperation      Status = 11 // IBV_WC_REM_OP_ERR
	statusRetryExceeded        Status = 12 // IBV_WC_RETRY_EXC_ERR
	statusRNRRetryExceeded     Status = 13 // IBV_WC_RNR_RETRY_EXC_ERR
	statusRemoteAborted        Status = 16 // IBV_WC_REM_ABORT_ERR
	statusGeneral              Status = 21 // IBV_WC_GENERAL_ERR
)

var statusNames = [...]string{
	statusSuccess:              "SUCCESS",
	statusLocalLength:          "LOC_LEN_ERR",
	statusLocalQPOperation:     "LOC_QP_OP_ERR",
	statusLocalProtection:      "LOC_PROT_ERR",
	statusFlushed:              "WR_FLUSH_ERR",
	statusMemoryWindowBind:     "MW_BIND_ERR",
	statusBadResponse:          "BAD_RESP_ERR",
	statusLocalAccess:          "LOC_ACCESS_ERR",
	statusRemoteInvalidRequest: "REM_INV_REQ_ERR",
	statusRemoteAccess:         "REM_ACCESS_ERR",
	statusRemoteOperation:      "REM_OP_ERR",
	statusRetryExceeded:        "RETRY_EXC_ERR",
	statusRNRRetryExceeded:     "RNR_RETRY_EXC_ERR",
	statusRemoteAborted:        "REM_ABORT_ERR",
	statusGeneral:              "GENERAL_ERR",
}

// String returns the verbs name without the IBV_WC_ prefix, e.g.
// "REM_ACCESS_ERR", or "Status(n)".
func (s Status) String() string { return names.Of(s, statusNames[:], "Status") }

// StatusOf maps an mlx5 syndrome to the work completion status, as
// rdma-core's mlx5 provider does; a syndrome the PRM does not define is
// statusGeneral.
func StatusOf(s prm.Syndrome) Status {
	switch s {
	case prm.SyndromeLocalLength:
		return statusLocalLength
	case prm.SyndromeLocalQPOp:
		return statusLocalQPOperation
	case prm.SyndromeLocalProt:
		return statusLocalProtection
	case prm.SyndromeWRFlush:
		return statusFlushed
	case prm.SyndromeMWBind:
		return statusMemoryWindowBind
	case prm.SyndromeBadResp:
		return statusBadResponse
	case prm.SyndromeLocalAccess:
		return statusLocalAccess
	case prm.SyndromeRemoteInvalReq:
		return statusRemoteInvalidRequest
	case prm.SyndromeRemoteAccess:
		return statusRemoteAccess
	case prm.SyndromeRemoteOp:
		return statusRemoteOperation
	case prm.SyndromeTransportRetryExc:
		return statusRetryExceeded
	case prm.SyndromeRNRRetryExc:
		return statusRNRRetryExceeded
	case prm.SyndromeRemoteAborted:
		return statusRemoteAborted
	}
	return statusGeneral
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
// statusSuccess).
func (s Status) Sentinel() error {
	switch s {
	case statusSuccess:
		return nil
	case statusLocalLength:
		return ErrLocalLength
	case statusLocalQPOperation:
		return ErrLocalQPOperation
	case statusLocalProtection:
		return ErrLocalProtection
	case statusFlushed:
		return ErrFlushed
	case statusMemoryWindowBind:
		return ErrMemoryWindowBind
	case statusBadResponse:
		return ErrBadResponse
	case statusLocalAccess:
		return ErrLocalAccess
	case statusRemoteInvalidRequest:
		return ErrRemoteInvalidRequest
	case statusRemoteAccess:
		return ErrRemoteAccess
	case statusRemoteOperation:
		return ErrRemoteOperation
	case statusRetryExceeded:
		return ErrRetryExceeded
	case statusRNRRetryExceeded:
		return ErrRNRRetryExceeded
	case statusRemoteAborted:
		return ErrRemoteAborted
	}
	return ErrGeneral
}
