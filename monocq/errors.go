package monocq

import (
	"errors"
	"strconv"
	"strings"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// Sentinel errors, found with errors.Is.
var (
	// ErrCorrupt: a slot the device handed to software holds a CQE whose
	// format cannot be right. The poller stops before that slot.
	ErrCorrupt = errors.New("corrupt CQE")
	// ErrOverrun: every slot of the ring held a CQE software had not
	// released, so the device had no room left and the next completion
	// overruns the CQ.
	ErrOverrun = errors.New("completion queue overrun")
	// ErrNoUAR: Arm was called on a CQ configured without a UAR page.
	ErrNoUAR = errors.New("completion queue has no UAR page")
	// ErrCompletion is matched by every *CompletionError.
	ErrCompletion = errors.New("completion with error")
	// ErrUnknownSyndrome is matched by a *CompletionError whose syndrome
	// the PRM does not define.
	ErrUnknownSyndrome = errors.New("unknown CQE syndrome")
	// ErrUnknownQPN: a CQE names a QPN that no queue registered.
	ErrUnknownQPN = errors.New("unknown QPN")
	// ErrDuplicateQPN: Register was asked to map a QPN already mapped.
	ErrDuplicateQPN = errors.New("QPN already registered")
)

// CompletionError is the error of a completion: a work request that
// completed with an error (an error CQE, REQ_ERR or RESP_ERR), or a
// completion that could not be matched to a work request (Err says why:
// ErrUnknownQPN, or a transport's sentinel). It carries everything the CQE
// says about the work request, and its work request id when the poller
// that found it knows it. Every layer (monocq, the transports, channel)
// reports a failed completion with this type.
type CompletionError struct {
	// Status is the verbs work completion status derived from Syndrome
	// (statusSuccess for a CQE that is not an error CQE).
	Status Status
	// Syndrome and VendorSyndrome are the mlx5 error syndromes of an error
	// CQE.
	Syndrome       Syndrome
	VendorSyndrome uint8
	// CQEOpcode is REQ_ERR (a send-queue WQE failed) or RESP_ERR (a receive
	// failed) for an error CQE; the CQE's opcode otherwise.
	CQEOpcode CQEOpcode
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
	// Err is why a completion could not be matched (ErrUnknownQPN, …); nil
	// for an error CQE matched to its work request.
	Err error
}

var _ error = (*CompletionError)(nil)

// IsErrorCQE reports whether the CQE was an error CQE (REQ_ERR or
// RESP_ERR).
func (e *CompletionError) IsErrorCQE() bool {
	return e.CQEOpcode == prm.CQEReqErr || e.CQEOpcode == prm.CQERespErr
}

// Requester reports whether a send-queue WQE failed (REQ_ERR).
func (e *CompletionError) Requester() bool { return e.CQEOpcode == prm.CQEReqErr }

// Error formats the completion on one line, e.g. "monocq: RDMA_WRITE on
// QPN 0x105 failed: REM_ACCESS_ERR (syndrome REMOTE_ACCESS_ERR 0x13, vendor
// syndrome 0x00), wqe_counter 3, wr_id 0x7", or for a completion that was
// not matched "monocq: completion REQ on QPN 0x105, wqe_counter 3: unknown
// QPN".
func (e *CompletionError) Error() string {
	var b strings.Builder
	b.WriteString("monocq: ")
	if e.Err != nil || !e.IsErrorCQE() {
		b.WriteString("completion ")
		b.WriteString(e.CQEOpcode.String())
		b.WriteString(" on QPN 0x")
		b.WriteString(strconv.FormatUint(uint64(e.QPN), 16))
		b.WriteString(", wqe_counter ")
		b.WriteString(strconv.Itoa(int(e.WQECounter)))
		if e.Err != nil {
			b.WriteString(": ")
			b.WriteString(e.Err.Error())
		}
		return b.String()
	}
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
	switch e.Status {
	case statusRetryExceeded:
		b.WriteString("; the peer did not answer: its process is gone, it cannot be reached, or its queue is not connected to this one")
	case statusRNRRetryExceeded:
		b.WriteString("; the peer had no receive posted for the message (a SEND, or an RDMA WRITE with immediate) each time it was retried")
	}
	return b.String()
}

func hex2(b *strings.Builder, v uint8) {
	const digits = "0123456789abcdef"
	b.WriteByte(digits[v>>4])
	b.WriteByte(digits[v&15])
}

// Is matches, for an error CQE, ErrCompletion, the sentinel of its status
// (ErrRemoteAccess, ErrFlushed, …) and ErrUnknownSyndrome when the
// syndrome is not one the PRM defines. Err is matched through Unwrap.
func (e *CompletionError) Is(target error) bool {
	if target == nil || !e.IsErrorCQE() {
		return false
	}
	switch target {
	case ErrCompletion:
		return true
	case ErrUnknownSyndrome:
		return !e.Syndrome.Known()
	}
	return target == StatusOf(e.Syndrome).Sentinel()
}

// Unwrap returns Err.
func (e *CompletionError) Unwrap() error { return e.Err }

// WithWRID returns a copy of e that carries the work request id.
func (e *CompletionError) WithWRID(wrid uint64) *CompletionError {
	c := *e
	c.WRID, c.HasWRID = wrid, true
	return &c
}
