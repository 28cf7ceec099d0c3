package transport

import (
	"github.com/mlx5kit/mlx5kit/internal/names"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// Completion is one polled completion, decoded and matched to its work
// request. A Poller hands the same *Completion to every call of the
// caller's function, so it is valid only during that call; copy it to keep
// it.
type Completion struct {
	// WRID is the work request id given when the WQE was posted (send or
	// receive). For a send completion it is the id of the WQE the CQE names;
	// the unsignaled WQEs before it were retired with it.
	WRID uint64
	// Queue is the queue pair the completion belongs to (nil when its QPN
	// is unknown to the poller).
	Queue *Queue
	// QPN is the number of the queue pair (for a DCT: the DCT number).
	QPN uint32
	// Opcode is the CQE opcode: REQ for a send, RESP_SEND, RESP_SEND_IMM,
	// RESP_SEND_INV or RESP_WR_IMM for a receive, REQ_ERR or RESP_ERR for an
	// error (monocq.CQEReq, monocq.CQERespSend, …).
	Opcode prm.CQEOpcode
	// SendOpcode is the opcode of the completed send WQE (REQ and REQ_ERR;
	// wqebuilder.OpSend, wqebuilder.OpRdmaWrite, …).
	SendOpcode prm.Opcode
	// ByteCount is the number of bytes received (for UD: including the 40
	// bytes of GRH space), or read by an RDMA_READ or atomic.
	ByteCount uint32
	// Immediate is the immediate data of RESP_SEND_IMM and RESP_WR_IMM, or
	// the rkey a RESP_SEND_INV invalidated.
	Immediate uint32
	// SourceQPN, SLID, SL and GRH describe the sender of a receive: its QPN
	// (UD and DC), its LID and service level (InfiniBand; on RoCE the low
	// two bits of SL are the network header type, prm.CQERoCEL3*), and
	// whether a GRH was received (UD: in the first 40 bytes of the buffer).
	SourceQPN uint32
	SLID      uint16
	SL        uint8
	GRH       bool
	// Solicited reports the solicited-event bit of a receive.
	Solicited bool
	// Syndrome and VendorSyndrome are set for an error completion.
	Syndrome       prm.Syndrome
	VendorSyndrome uint8
	// Match is MatchOK for a successful completion; compare it (a field
	// load, inlined anywhere) rather than calling a method on the hot path.
	Match Match
	// WQECounter is the wqe_counter of the CQE: the first WQEBB of a send
	// WQE, or the index of a receive WQE.
	WQECounter uint16
	// PathBits are the DLID path bits a receive arrived on (InfiniBand,
	// the low LMC bits of the destination LID; 0 on a port with LMC 0 and
	// on RoCE), which a reply takes as its source path bits
	// (ibv_init_ah_from_wc). It sits in the padding after WQECounter, out
	// of the 16 bytes a completion's decoding zeroes with one store.
	PathBits uint8
	// Timestamp is the CQE's raw completion timestamp, in device cycles
	// (ctx.Clock converts it), when the CQ was created with
	// ctx.CompletionQueueConfig.Timestamps; otherwise it stays 0 and the
	// poll never reads it. An error completion has none (0), whatever its
	// Match: an error CQE holds its syndromes where the timestamp would be.
	Timestamp uint64
}

// Match says how a completion was matched to a work request.
type Match uint8

// The ways a completion is matched.
const (
	// MatchOK: a successful completion that retired a work request.
	MatchOK Match = iota
	// MatchError: an error completion (REQ_ERR or RESP_ERR) that retired
	// a work request; Syndrome says why (WR_FLUSH_ERR for the work requests
	// flushed after a queue pair went to error).
	MatchError
	// MatchUnknownQPN: no queue of the poller has the CQE's QPN; only the
	// fields read from the CQE are set.
	MatchUnknownQPN
	// MatchUnmatched: the CQE names no outstanding WQE of its queue (a
	// duplicate or corrupt CQE); WRID is 0 and nothing was retired.
	MatchUnmatched
	// MatchUnexpected: a CQE opcode the queue cannot have (a send
	// completion on a DCT, a resize or signature CQE).
	MatchUnexpected
)

var matchNames = [...]string{"OK", "ERROR", "UNKNOWN_QPN", "UNMATCHED", "UNEXPECTED"}

// String returns the name of the match.
func (s Match) String() string { return names.Of(s, matchNames[:], "Match") }

// IsError reports whether the completion is an error completion (REQ_ERR
// or RESP_ERR) or could not be matched: Match != MatchOK.
func (c *Completion) IsError() bool { return c.Match != MatchOK }

// IsSend reports whether the completion is for a send WQE (REQ or REQ_ERR).
func (c *Completion) IsSend() bool { return c.Opcode == prm.CQEReq || c.Opcode == prm.CQEReqErr }

// IsFlush reports whether the completion is a WR_FLUSH_ERR: the work
// request was not executed because the QP had gone to error.
func (c *Completion) IsFlush() bool { return c.IsError() && c.Syndrome == prm.SyndromeWRFlush }

// Err returns nil for a successful completion, and otherwise a
// *monocq.CompletionError: for an error completion, errors.Is matches
// monocq.ErrCompletion and the sentinel of its status (monocq.ErrRemoteAccess,
// monocq.ErrFlushed, …); for a completion that could not be matched, its
// Err is monocq.ErrUnknownQPN, ErrUnmatched or ErrUnexpected. It allocates
// only when it returns an error.
func (c *Completion) Err() error {
	if !c.IsError() {
		return nil
	}
	return c.completionError()
}

// completionError builds the error of a completion that is not MatchOK.
func (c *Completion) completionError() *monocq.CompletionError {
	e := &monocq.CompletionError{
		Syndrome:       c.Syndrome,
		VendorSyndrome: c.VendorSyndrome,
		CQEOpcode:      c.Opcode,
		QPN:            c.QPN,
		WQECounter:     c.WQECounter,
	}
	if e.IsErrorCQE() {
		e.Status = monocq.StatusOf(c.Syndrome)
	}
	if e.Requester() {
		e.Opcode = c.SendOpcode
	}
	switch c.Match {
	case MatchError:
		e.WRID, e.HasWRID = c.WRID, true
	case MatchUnknownQPN:
		e.Err = monocq.ErrUnknownQPN
	case MatchUnmatched:
		e.Err = ErrUnmatched
	default:
		e.Err = ErrUnexpected
	}
	return e
}

// decode fills c from cqe for queue q (nil for an unknown QPN), WRID left
// 0: the fields that come straight from the CQE.
func (c *Completion) decode(q *Queue, cqe *monocq.CQE) {
	op := cqe.Opcode()
	c.set(q, cqe.QPN(), op, cqe.WQECounter())
	switch op {
	case prm.CQEReq:
		c.setSend(cqe)
	case prm.CQEReqErr, prm.CQERespErr:
		c.Match = MatchError
		c.SendOpcode = cqe.SendOpcode()
		c.Syndrome = cqe.Syndrome()
		c.VendorSyndrome = cqe.VendorSyndrome()
	default:
		c.setRecv(cqe)
	}
}

// set writes the fields every completion has and zeroes the others (WRID
// too), field by field: a composite literal over *c would copy it with the
// write barrier's bulk move, a call on the poll's inlined path.
func (c *Completion) set(q *Queue, qpn uint32, op prm.CQEOpcode, counter uint16) {
	c.WRID, c.Queue, c.QPN, c.Opcode, c.WQECounter = 0, q, qpn, op, counter
	c.SendOpcode, c.ByteCount, c.Immediate, c.SourceQPN, c.SLID, c.SL = 0, 0, 0, 0, 0, 0
	c.GRH, c.Solicited = false, false
	c.Syndrome, c.VendorSyndrome, c.Match = 0, 0, MatchOK
	c.PathBits = 0 // last: the stores before it merge into one
}

// setSend reads the fields of a successful send completion.
func (c *Completion) setSend(cqe *monocq.CQE) {
	c.SendOpcode = cqe.SendOpcode()
	c.ByteCount = cqe.ByteCount()
}

// setRecv reads the fields of a successful receive completion. Its body
// is a closure called once, so that it inlines into CompleteRecv's.
func (c *Completion) setRecv(cqe *monocq.CQE) {
	func() {
		c.ByteCount = cqe.ByteCount()
		c.Immediate = cqe.Immediate()
		c.SourceQPN = cqe.SourceQP()
		c.SLID = cqe.SLID()
		c.SL = cqe.SL()
		c.GRH = cqe.HasGRH()
		c.Solicited = cqe.Solicited()
		c.PathBits = cqe.PathBits()
	}()
}
