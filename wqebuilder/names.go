package wqebuilder

import (
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// Opcode is a send WQE opcode, as PostError reports it and as a requester
// CQE names the WQE it completes. It prints its PRM name.
type Opcode = prm.Opcode

// Send WQE opcodes the builder writes.
const (
	OpNop            = prm.OpNop
	OpSendInval      = prm.OpSendInval
	OpRdmaWrite      = prm.OpRdmaWrite
	OpRdmaWriteImm   = prm.OpRdmaWriteImm
	OpSend           = prm.OpSend
	OpSendImm        = prm.OpSendImm
	OpRdmaRead       = prm.OpRdmaRead
	OpAtomicCS       = prm.OpAtomicCS
	OpAtomicFA       = prm.OpAtomicFA
	OpAtomicMaskedCS = prm.OpAtomicMaskedCS
	OpAtomicMaskedFA = prm.OpAtomicMaskedFA
)

// Transport tells Dump which segments follow the control segment (an
// address vector for UD and DC).
type Transport = prm.Transport

// Transports for Dump.
const (
	TransportUnknown = prm.TransportUnknown
	TransportRC      = prm.TransportRC
	TransportUD      = prm.TransportUD
	TransportDC      = prm.TransportDC
)

// Dump decodes the WQE that starts at producer index pi (free-running, in
// WQEBBs) into readable text, one line per segment, following segments that
// wrap at the ring end. It is meant for test failures and for debugging
// one's own posts; it reads the ring and changes nothing.
func (q *SendQueue) Dump(pi uint32, t Transport) string {
	ring := unsafe.Slice((*byte)(q.buf), uintptr(q.end)-uintptr(q.buf))
	return prm.DumpWQE(ring, pi, t)
}
