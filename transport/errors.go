package transport

import (
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// Sentinel errors of the transports. Packages rc, dc and ud re-export them
// under the same names, so errors.Is works whichever package a caller
// names.
var (
	// ErrClosed is ctx.ErrClosed: the queue pair, or an object it depends
	// on (its PD, a CQ, the Context), has been closed.
	ErrClosed = ctx.ErrClosed
	// ErrInvalidConfig is ctx.ErrInvalidArgument: a configuration refused
	// at creation, before anything was created.
	ErrInvalidConfig = ctx.ErrInvalidArgument
	// ErrNotConnected: a send was posted on a queue pair that has not
	// reached RTS (an RC QP before Connect).
	ErrNotConnected = errors.New("queue pair not connected")
	// ErrQPError: the queue pair went to the error state (an error
	// completion was polled, or it was moved there); it accepts no more
	// work requests.
	ErrQPError = errors.New("queue pair in error state")
	// ErrNoReceiveQueue: a receive was posted on a queue pair without a
	// receive queue of its own (it uses an SRQ, or was created without one).
	ErrNoReceiveQueue = errors.New("queue pair has no receive queue")
	// ErrReceiveQueueFull: every receive WQE is posted and not yet
	// completed.
	ErrReceiveQueueFull = errors.New("receive queue full")
	// ErrTooManySGE: a receive WQE got more scatter entries than the queue's
	// max receive SGE.
	ErrTooManySGE = errors.New("more scatter entries than max receive SGE")
	// ErrSGETooLong is wqebuilder.ErrSGETooLong: a send or receive
	// scatter/gather entry of more than MaxSGELength bytes (2^31-1), whose
	// byte count would have bit 31, the inline flag, set. Nothing is
	// posted.
	ErrSGETooLong = wqebuilder.ErrSGETooLong
	// ErrStaleStage is wqebuilder.ErrStaleStage: a receive stage (like a
	// send stage) was finished twice, or after a later BeginRecv or
	// PostRecv on the same queue took its slot. Nothing is posted.
	ErrStaleStage = wqebuilder.ErrStaleStage
	// ErrUnknownQPN: a poller met a CQE for a QPN no queue was added for.
	ErrUnknownQPN = errors.New("completion for an unknown QPN")
	// ErrUnmatched: a completion named a WQE that is not outstanding
	// (a duplicate or corrupt CQE); nothing was retired.
	ErrUnmatched = errors.New("completion matches no outstanding WQE")
	// ErrTransport: an operation the transport or the QP's type does not
	// have (a send on a DCT, Connect on a connected QP, an endpoint of the
	// wrong transport).
	ErrTransport = errors.New("not valid for this transport")
)

// PostError is the error of a refused post: the transport ("rc", "dc",
// "ud"), the verb ("post send", "post receive"), the QPN and the reason,
// one of the sentinels above. The errors a queue pair returns on its hot
// path are built once when it is created, so returning one allocates
// nothing.
type PostError struct {
	Transport string
	Op        string
	// QPN is the queue pair's number, or the SRQ number when SRQ is set.
	QPN uint32
	SRQ bool
	Err error
}

// Error reads "rc: post send on QP 0x105: queue pair not connected".
func (e *PostError) Error() string {
	what := "QP"
	if e.SRQ {
		what = "SRQ"
	}
	return fmt.Sprintf("%s: %s on %s %#x: %v", e.Transport, e.Op, what, e.QPN, e.Err)
}

// Unwrap returns the sentinel.
func (e *PostError) Unwrap() error { return e.Err }

var _ error = (*PostError)(nil)

// Errorf builds a control-plane error "<transport>: <op>: <detail>" whose
// cause (given with %w in format) errors.Is finds.
func Errorf(transport, op, format string, args ...any) error {
	return fmt.Errorf(transport+": "+op+": "+format, args...)
}
