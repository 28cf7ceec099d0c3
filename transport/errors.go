package transport

import "errors"

// Sentinel errors of the transports rc, dc and ud. The transports also
// return the sentinels of the layers below: ctx.ErrClosed (a closed queue
// pair, or an object it depends on), ctx.ErrInvalidArgument (a configuration
// refused before anything was created), wqebuilder.ErrTooManySGE,
// wqebuilder.ErrSGETooLong and wqebuilder.ErrStaleStage (a refused receive
// WQE, as for a send WQE) and monocq.ErrUnknownQPN (a CQE for a QPN no queue
// was added for).
var (
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
	// ErrUnmatched: a completion named a WQE that is not outstanding
	// (a duplicate or corrupt CQE); nothing was retired.
	ErrUnmatched = errors.New("completion matches no outstanding WQE")
	// ErrUnexpected: a CQE opcode the queue cannot have (a send completion
	// on a DCT, a resize or signature CQE).
	ErrUnexpected = errors.New("unexpected CQE opcode")
	// ErrTransport: an operation the transport or the QP's type does not
	// have (a send on a DCT, Connect on a connected QP, an endpoint of the
	// wrong transport).
	ErrTransport = errors.New("not valid for this transport")
)
