package channel

import (
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/names"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// SGE is one local buffer of a work request: Length bytes at Addr in the
// memory region whose local key is LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// Slice returns the SGE of n bytes at offset off of mr. It panics when mr
// is nil, when the range is not inside the region, like a slice
// expression, or when n is above wqebuilder.MaxSGELength (2^31-1: a data
// segment's byte count has 31 bits, bit 31 being the inline flag). A post refuses a hand-made SGE of
// that length with wqebuilder.ErrSGETooLong.
func Slice(mr *ctx.MemoryRegion, off, n int) SGE {
	if mr == nil {
		panic("channel: slice of a nil memory region")
	}
	if off < 0 || n < 0 || uint64(off)+uint64(n) > mr.Len() || n > wqebuilder.MaxSGELength {
		panic(fmt.Sprintf("channel: slice [%d:+%d] of a %d-byte region", off, n, mr.Len()))
	}
	return SGE{Addr: uint64(mr.Addr()) + uint64(off), Length: uint32(n), LKey: mr.LKey()}
}

// Remote is the target of an RDMA WRITE or READ: an address in the peer's
// memory and the rkey of its region.
type Remote struct {
	Addr uint64
	RKey uint32
}

// At returns the Remote off bytes into the region a peer shared.
func At(r endpoint.RemoteRegion, off uint64) Remote {
	return Remote{Addr: r.Address + off, RKey: r.RemoteKey}
}

// SendRequest is a SEND (with immediate data when WithImmediate is set) of the
// Local buffers, in that order, to Peer.
type SendRequest struct {
	Peer          int
	Local         []SGE
	Immediate     uint32
	WithImmediate bool
}

// RecvRequest is a receive into the Local buffers of the next SEND from
// Peer (or of an RDMA WRITE with immediate data, which consumes a receive).
type RecvRequest struct {
	Peer  int
	Local []SGE
}

// WriteRequest is an RDMA WRITE of the Local buffers to Remote in Peer's
// memory (with immediate data, which consumes a receive at the peer, when
// WithImmediate is set).
type WriteRequest struct {
	Peer          int
	Local         []SGE
	Remote        Remote
	Immediate     uint32
	WithImmediate bool
}

// ReadRequest is an RDMA READ from Remote in Peer's memory into the Local
// buffers.
type ReadRequest struct {
	Peer   int
	Local  []SGE
	Remote Remote
}

// CompareSwapRequest is an ATOMIC_CS on the 8-byte value at Remote in
// Peer's memory (8-byte aligned, in a region shared with remote atomic
// access): if it equals Compare it becomes Swap. The value found there
// before, swapped or not, is written to Result, an 8-byte local buffer,
// in host byte order as the device returns it (binary.NativeEndian.Uint64
// reads it). The remote value is in host byte order too.
type CompareSwapRequest struct {
	Peer          int
	Remote        Remote
	Compare, Swap uint64
	Result        SGE
}

// FetchAddRequest is an ATOMIC_FA on the 8-byte value, in host byte
// order, at Remote in Peer's memory: Add is added to it, and the value
// found before is written to the 8-byte local Result buffer, in host byte
// order.
type FetchAddRequest struct {
	Peer   int
	Remote Remote
	Add    uint64
	Result SGE
}

// Op names the kind of a work request.
type Op uint8

// Work request kinds.
const (
	OpSend Op = iota + 1
	OpRecv
	OpWrite
	OpRead
	OpCompareSwap
	OpFetchAdd
)

var opNames = [...]string{OpSend: "send", OpRecv: "receive", OpWrite: "write", OpRead: "read",
	OpCompareSwap: "compare-and-swap", OpFetchAdd: "fetch-and-add"}

// String returns "send", "receive", "write", "read", "compare-and-swap" or
// "fetch-and-add".
func (o Op) String() string { return names.Of(o, opNames[:], "Op") }

// Result is what a completed work request reports.
type Result struct {
	Peer int
	Op   Op
	// ByteCount is the number of bytes received (receives) or read
	// (reads; 8 for an atomic).
	ByteCount uint32
	// Immediate is the immediate data of a receive that carried some (WithImmediate).
	Immediate     uint32
	WithImmediate bool
	// Err is nil, or a *PeerError wrapping the *monocq.CompletionError.
	Err error
}

// Sentinel errors.
var (
	// ErrPeer: a peer index out of range.
	ErrPeer = errors.New("no such peer")
	// ErrTimeout: a blocking call or scope waited longer than
	// Options.WaitTimeout; its work is still outstanding. A timed-out
	// Receive keeps its place in the receive queue: the peer's next
	// message lands in its buffer, and the next Receive waits for the
	// message after that one. (A context's deadline is different: see
	// ErrFailed.)
	ErrTimeout = errors.New("timed out waiting for completions")
	// ErrStale: a Pending whose completion record was reused because more
	// work requests were posted after it than the channel tracks (see
	// Pending).
	ErrStale = errors.New("completion record reused")
	// ErrNestedScope: Scope was called inside a scope.
	ErrNestedScope = errors.New("scope inside a scope")
	// ErrUsed: Handshake was called twice on one prepared channel, or
	// Share after its Handshake.
	ErrUsed = errors.New("prepared channel already used")
	// ErrHandshake: the remote endpoints do not fit the channel (count,
	// transport, missing DCT number).
	ErrHandshake = errors.New("handshake refused")
	// ErrFailed: the channel moved its queues to the error state and
	// flushed their work: a blocking call's or a scope's context ended
	// before its work completed, a wait met an event that ends the channel
	// (Options.OnEvent) or a completion queue in error (an overrun, a
	// corrupt CQE), or MultiChannel.Fail was called. It refuses new work;
	// Reestablish it, or close it and build a new one.
	ErrFailed = errors.New("channel failed")
)

// PeerError is the error of one work request: the peer, the kind of
// request, and the cause (a *monocq.CompletionError for a failed completion, or
// the error of a refused post). errors.Is and errors.As see through it.
type PeerError struct {
	Peer int
	Op   Op
	Err  error
}

// Error reads "channel: write to peer 3: monocq: RDMA_WRITE on QPN …".
func (e *PeerError) Error() string {
	dir := "to"
	switch e.Op {
	case OpRecv, OpRead:
		dir = "from"
	case OpCompareSwap, OpFetchAdd:
		dir = "at"
	}
	return fmt.Sprintf("channel: %v %s peer %d: %v", e.Op, dir, e.Peer, e.Err)
}

// Unwrap returns the cause.
func (e *PeerError) Unwrap() error { return e.Err }

var _ error = (*PeerError)(nil)
