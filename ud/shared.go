package ud

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// The types below are shared by packages rc, dc and ud: each package names
// them, and the names denote the same types, so one Poller (or one
// monocq.Table[Queue]) serves queue pairs of every transport and one
// SharedReceiveQueue serves RC QPs and DCTs alike. Methods of these types
// are not inlined into a caller outside this module (Go inlines a method
// only when the caller imports the package of its receiver type); none of
// them is on the per-completion path: a Completion is read through its
// fields, and Poller.Poll inlines.
type (
	// Queue is the data-plane part of a queue pair: receive posting,
	// doorbells, and Complete, which turns a CQE into a Completion.
	Queue = transport.Queue
	// Completion is a polled completion matched to its work request.
	Completion = transport.Completion
	// CompletionError is the error of a failed completion. errors.Is
	// matches the completion package's sentinel of its status
	// (completion.ErrRemoteAccess, completion.ErrFlushed, …) and
	// completion.ErrCompletion; errors.As also yields a *completion.Error.
	CompletionError = transport.CompletionError
	// Status says how a completion was matched.
	Status = transport.Status
	// State is the data plane's view of a queue pair.
	State = transport.State
	// PollerStats counts what a Poller saw.
	PollerStats = transport.PollerStats
	// RecvStage is a receive WQE being built.
	RecvStage = transport.RecvStage
	// SharedReceiveQueue is a shared receive queue.
	SharedReceiveQueue = transport.SharedReceiveQueue
	// SRQConfig configures a SharedReceiveQueue.
	SRQConfig = transport.SRQConfig
	// PostError is the error of a refused post.
	PostError = transport.PostError
	// Limits are the sizes a provider granted a queue pair.
	Limits = transport.Limits
)

// Completion statuses.
const (
	StatusOK         = transport.StatusOK
	StatusError      = transport.StatusError
	StatusUnknownQPN = transport.StatusUnknownQPN
	StatusUnmatched  = transport.StatusUnmatched
	StatusUnexpected = transport.StatusUnexpected
)

// Queue states.
const (
	StateInit   = transport.StateInit
	StateReady  = transport.StateReady
	StateError  = transport.StateError
	StateClosed = transport.StateClosed
)

// Errors, the same values in packages rc, dc and ud.
var (
	ErrClosed           = transport.ErrClosed
	ErrInvalidConfig    = transport.ErrInvalidConfig
	ErrNotConnected     = transport.ErrNotConnected
	ErrQPError          = transport.ErrQPError
	ErrNoReceiveQueue   = transport.ErrNoReceiveQueue
	ErrReceiveQueueFull = transport.ErrReceiveQueueFull
	ErrTooManySGE       = transport.ErrTooManySGE
	ErrUnknownQPN       = transport.ErrUnknownQPN
	ErrUnmatched        = transport.ErrUnmatched
	ErrTransport        = transport.ErrTransport
)

// NewCQ returns a monocq poller over the ring of cq, for callers that run
// their own dispatch loop (see the package documentation).
func NewCQ(cq *ctx.CompletionQueue) (*monocq.CQ, error) { return transport.NewCQ(cq) }

// NewSharedReceiveQueue creates a shared receive queue in pd.
func NewSharedReceiveQueue(pd *ctx.ProtectionDomain, cfg SRQConfig) (*SharedReceiveQueue, error) {
	return transport.NewSharedReceiveQueue(name, pd, cfg)
}
