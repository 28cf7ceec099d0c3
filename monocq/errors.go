package monocq

import (
	"errors"
	"fmt"

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

// CompletionError describes an error CQE (opcode REQ_ERR or RESP_ERR).
type CompletionError struct {
	Opcode         prm.CQEOpcode // REQ_ERR or RESP_ERR
	Syndrome       prm.Syndrome
	VendorSyndrome uint8
	QPN            uint32
	WQECounter     uint16
	// WQEOpcode is the send opcode of the failed WQE (requester errors).
	WQEOpcode prm.Opcode
}

// Error names the syndrome, its vendor syndrome, the QPN and WQE counter.
func (e *CompletionError) Error() string {
	return fmt.Sprintf("monocq: %s: %s (vendor syndrome 0x%02x) on QPN 0x%x, wqe_counter %d",
		e.Opcode, e.Syndrome, e.VendorSyndrome, e.QPN, e.WQECounter)
}

// Is matches ErrCompletion, and ErrUnknownSyndrome when the syndrome is not
// one the PRM defines.
func (e *CompletionError) Is(target error) bool {
	return target == ErrCompletion || (target == ErrUnknownSyndrome && !e.Syndrome.Known())
}

// UnknownQPNError reports a CQE for a QPN no queue registered.
type UnknownQPNError struct {
	QPN uint32
}

// Error names the QPN.
func (e *UnknownQPNError) Error() string {
	return fmt.Sprintf("monocq: lookup QPN 0x%x: %v", e.QPN, ErrUnknownQPN)
}

// Unwrap returns ErrUnknownQPN.
func (e *UnknownQPNError) Unwrap() error { return ErrUnknownQPN }
