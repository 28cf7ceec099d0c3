// Package qpcore is the part of a transport.Queue that packages rc, dc and
// ud reach into and a program does not: the fields a send post reads (Send,
// the layout every transport.Queue starts with), the queue's state values,
// the control-plane error of a transport (Errorf), and the doors package
// transport opens for its constructors and refused posts (Setup, Refusal),
// which it fills in from its init.
//
// Package newqp turns a *transport.Queue into its *Send and offers the
// operations on it under the names the transports use.
package qpcore

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// State is the data plane's view of a queue pair, with the values of
// transport.State (package transport checks that they agree).
type State uint32

// The states, as transport.StateInit … transport.StateClosed.
const (
	StateInit State = iota
	StateReady
	StateError
	StateClosed
)

// Send is what a send post reads of a queue pair: the send ring, the
// state, the QPN and the control-plane queue pair (whose closed flag a post
// tests). A transport.Queue starts with fields of these types at these
// offsets (package transport fails to build otherwise), so that a
// *transport.Queue read as a *Send (newqp.Send) reads them.
type Send struct {
	// SQ is the send queue (nil for a DCT).
	SQ *wqebuilder.SendQueue
	// State is the data-plane state.
	State State
	// QPN is the queue pair number (a DCT's DCT number).
	QPN uint32
	// QP is the control-plane queue pair.
	QP *ctx.QueuePair
}

// Ready reports whether s may post a send WQE: connected, not in error,
// not closed.
func Ready(s *Send) bool { return s.State == StateReady && !s.QP.Closed() }

// Errorf builds the control-plane error of a transport: a *ctx.OpError
// that reads "<transport>: <op>: <detail>" and whose cause (given with %w in
// format) errors.Is finds.
func Errorf(transport, op, format string, args ...any) error {
	return &ctx.OpError{Package: transport, Op: op, Err: fmt.Errorf(format, args...)}
}

// Setup builds the *transport.Queue q over a created queue pair (srq, a
// *transport.SharedReceiveQueue or nil, receives for it); package
// transport sets it from its init. The arguments are typed any because
// this package is below transport; newqp.Setup is the typed door.
var Setup func(q any, transport string, qp *ctx.QueuePair, srq any) error

// Polling returns an error wrapping ctx.ErrBusy when the ring of one of
// the *transport.Queue q's completion queues is inside a poll (its
// Poller's, or transport.NewCQ's), where the CQEs of q cannot be taken out
// of it; package transport sets it from its init.
var Polling func(q any) error

// Refusal returns the stage and error of a send post on the
// *transport.Queue q when it is not Ready; package transport sets it from
// its init.
var Refusal func(q any, wrid uint64, flags wqebuilder.Flags) (wqebuilder.CtrlStage, error)

// RefuseWith returns a stage of the *transport.Queue q's private full
// queue whose Finish fails with err, for a send post refused for its
// arguments; package transport sets it from its init.
var RefuseWith func(q any, wrid uint64, flags wqebuilder.Flags, err error) wqebuilder.CtrlStage
