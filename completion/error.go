package completion

import (
	"errors"
	"strconv"
	"strings"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// Status is the status of a work completion with the values of enum
// ibv_wc_status, so it converts to and from the verbs value unchanged.
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

// Sentinel errors, one per failed status. An *Error matches the one of its
// status with errors.Is.
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

// Error is a work request that completed with an error: everything the
// error CQE says about it, and the work request id when the poller that
// found it knows it.
type Error struct {
	// Status is the verbs work completion status derived from Syndrome.
	Status Status
	// Syndrome and VendorSyndrome are the mlx5 error syndromes of the CQE.
	Syndrome       prm.Syndrome
	VendorSyndrome uint8
	// CQEOpcode is REQ_ERR (a send-queue WQE failed) or RESP_ERR (a
	// receive failed).
	CQEOpcode prm.CQEOpcode
	// Opcode is the send opcode of the failed WQE (requester errors only).
	Opcode prm.Opcode
	// QPN is the queue pair (for a DCT, the DCT number) the CQE names.
	QPN uint32
	// WQECounter is the CQE's wqe_counter: the index of the WQE's first
	// WQEBB on the send queue, or of the receive WQE.
	WQECounter uint16
	// WRID is the work request id, valid when HasWRID is set.
	WRID    uint64
	HasWRID bool
}

var _ error = (*Error)(nil)

// Requester reports whether a send-queue WQE failed (REQ_ERR).
func (e *Error) Requester() bool { return e.CQEOpcode == prm.CQEReqErr }

// Error formats the completion on one line, e.g.
// "completion: RDMA_WRITE on QPN 0x105 failed: REM_ACCESS_ERR (syndrome
// REMOTE_ACCESS_ERR 0x13, vendor syndrome 0x00), wqe_counter 3, wr_id 0x7".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("completion: ")
	if e.Requester() {
		b.WriteString(e.Opcode.String())
	} else {
		b.WriteString("receive")
	}
	b.WriteString(" on QPN 0x")
	b.WriteString(strconv.FormatUint(uint64(e.QPN), 16))
	b.WriteString(" failed: ")
	b.WriteString(e.Status.String())
	b.WriteString(" (syndrome ")
	b.WriteString(e.Syndrome.String())
	b.WriteString(" 0x")
	hex2(&b, uint8(e.Syndrome))
	b.WriteString(", vendor syndrome 0x")
	hex2(&b, e.VendorSyndrome)
	b.WriteString("), wqe_counter ")
	b.WriteString(strconv.Itoa(int(e.WQECounter)))
	if e.HasWRID {
		b.WriteString(", wr_id 0x")
		b.WriteString(strconv.FormatUint(e.WRID, 16))
	}
	return b.String()
}

func hex2(b *strings.Builder, v uint8) {
	const digits = "0123456789abcdef"
	b.WriteByte(digits[v>>4])
	b.WriteByte(digits[v&15])
}

// Is matches the sentinel of the error's status, monocq.ErrCompletion, and
// monocq.ErrUnknownSyndrome when the syndrome is not one the PRM defines.
func (e *Error) Is(target error) bool {
	switch target {
	case nil:
		return false
	case monocq.ErrCompletion:
		return true
	case monocq.ErrUnknownSyndrome:
		return !e.Syndrome.Known()
	}
	return target == e.Status.Sentinel()
}

// FromCQE returns the *Error of an error CQE, or nil for a successful one.
// It allocates only for an error CQE.
func FromCQE(c *monocq.CQE) *Error {
	if !c.IsError() {
		return nil
	}
	e := &Error{
		Syndrome:       c.Syndrome(),
		VendorSyndrome: c.VendorSyndrome(),
		CQEOpcode:      c.Opcode(),
		QPN:            c.QPN(),
		WQECounter:     c.WQECounter(),
	}
	e.Status = StatusOf(e.Syndrome)
	if e.Requester() {
		e.Opcode = c.SendOpcode()
	}
	return e
}

// Check returns nil for a successful CQE and an *Error for an error CQE. It
// is small enough to inline into a polling loop, and allocates only for an
// error CQE.
func Check(c *monocq.CQE) error {
	if !c.IsError() {
		return nil
	}
	return FromCQE(c)
}

// FromMonocq converts the error monocq.CQE.Err returns; any other error gives
// nil.
func FromMonocq(err error) *Error {
	var ce *monocq.CompletionError
	if !errors.As(err, &ce) {
		return nil
	}
	e := &Error{
		Status:         StatusOf(ce.Syndrome),
		Syndrome:       ce.Syndrome,
		VendorSyndrome: ce.VendorSyndrome,
		CQEOpcode:      ce.Opcode,
		QPN:            ce.QPN,
		WQECounter:     ce.WQECounter,
	}
	if e.Requester() {
		e.Opcode = ce.WQEOpcode
	}
	return e
}

// WithWRID returns a copy of e that carries the work request id.
func (e *Error) WithWRID(wrid uint64) *Error {
	c := *e
	c.WRID, c.HasWRID = wrid, true
	return &c
}
