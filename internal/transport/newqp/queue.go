package newqp

import (
	"fmt"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport/qpcore"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// Send returns the send-side fields of q: a transport.Queue starts with
// the fields of a qpcore.Send, at the same offsets (package transport fails
// to build otherwise), so the pointer to q is the pointer to them. It
// compiles to nothing.
func Send(q *transport.Queue) *qpcore.Send { return (*qpcore.Send)(unsafe.Pointer(q)) }

// Ready reports whether q may post a send WQE: connected, not in error,
// not closed. A transport's Post begins the WQE on q's send queue when it
// is, and calls Refuse when it is not, inside a closure called once: the
// inliner prices the closure as a call when it sizes Post and then inlines
// it at its one call site, so that a whole post compiles into the caller
// and only the refusal is a call (TestInlining in package rc checks it).
func Ready(q *transport.Queue) bool { return qpcore.Ready(Send(q)) }

// SendRing is q's send queue without the test for a closed QP, for a post
// that tested Ready already.
func SendRing(q *transport.Queue) *wqebuilder.SendQueue { return Send(q).SQ }

// Begin is a send post's first step as dc's and ud's Post take it: the WQE
// begun on q's send queue when q is Ready, else Refuse's stage and error.
// It inlines, and its body, a closure called once, with it.
// remote is the state of the post's remote (RemoteOf); a post to a nil or
// closed remote is refused.
func Begin(q *transport.Queue, wrid uint64, flags wqebuilder.Flags, remote Remote) (s wqebuilder.CtrlStage, err error) {
	s = func() wqebuilder.CtrlStage {
		if remote == Addressed && Ready(q) {
			return Send(q).SQ.Begin(wrid, flags)
		}
		var dead wqebuilder.CtrlStage
		dead, err = Refuse(q, wrid, flags, remote)
		return dead
	}()
	return s, err
}

// Remote is the state of a post's remote: Addressed (usable, or rc's
// connected peer), NoRemote (nil) or RemoteClosed (after its Close).
type Remote uint8

// The states of a post's remote.
const (
	Addressed Remote = iota
	NoRemote
	RemoteClosed
)

// RemoteOf returns the state of a dc or ud remote: nil (isNil), or closed
// (its Close was called). It inlines.
func RemoteOf(isNil, closed bool) Remote {
	switch {
	case isNil:
		return NoRemote
	case closed:
		return RemoteClosed
	}
	return Addressed
}

// Refuse is the post of a queue that is not Ready: a *wqebuilder.PostError
// wrapping transport.ErrNotConnected, transport.ErrQPError or
// ctx.ErrClosed, and a stage of a private full queue, which writes nothing
// that matters and whose Finish fails with the same error. It is the one
// call of a post, on its cold path.
//
// A post to a nil remote (dc's and ud's Post) is refused with a
// *wqebuilder.PostError wrapping ctx.ErrInvalidArgument, one to a remote
// after its Close with one wrapping ctx.ErrClosed. A zero queue (a DCI,
// QP not made by its constructor) is refused with one wrapping
// ctx.ErrInvalidArgument whatever the remote.
//
//go:noinline
func Refuse(q *transport.Queue, wrid uint64, flags wqebuilder.Flags, remote Remote) (wqebuilder.CtrlStage, error) {
	if s := Send(q); remote != Addressed && s.SQ != nil {
		why := fmt.Errorf("nil remote: %w", ctx.ErrInvalidArgument)
		if remote == RemoteClosed {
			why = fmt.Errorf("remote: %w", ctx.ErrClosed)
		}
		err := &wqebuilder.PostError{Transport: s.SQ.Config().Transport, Op: "post send", QPN: s.QPN, Err: why}
		return qpcore.RefuseWith(q, wrid, flags, err), err
	}
	return qpcore.Refusal(q, wrid, flags)
}

// SetState moves q's data-plane state (the transports call it after a
// state change of the QP).
func SetState(q *transport.Queue, s transport.State) { Send(q).State = qpcore.State(s) }

// Polling returns an error wrapping ctx.ErrBusy when the ring of one of
// q's completion queues is inside a poll (its Poller's, or
// transport.NewCQ's): rc's Reset, which takes q's CQEs out of those
// rings, cannot run there.
func Polling(q *transport.Queue) error { return qpcore.Polling(q) }

// Setup builds q over a created queue pair: the send queue from its
// descriptor (with the largest WQE the transport can build within the
// granted limits), its own receive queue, or srq when it is attached to
// one. The transports call it from their constructors and rc's Reset.
func Setup(q *transport.Queue, transportName string, qp *ctx.QueuePair, srq *transport.SharedReceiveQueue) error {
	return qpcore.Setup(q, transportName, qp, srq)
}
