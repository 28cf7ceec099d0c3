package wqebuilder

import (
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// Opcode is a send WQE opcode, as PostError reports it and as a requester
// CQE names the WQE it completes. It prints its PRM name.
type Opcode = prm.Opcode

// The send WQE opcodes the stages write (MLX5_OPCODE_*), for comparing
// PostError.Opcode, monocq.CQE.SendOpcode and
// transport.Completion.SendOpcode outside the kit.
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

// dump decodes the WQE that starts at producer index pi (free-running, in
// WQEBBs) into readable text, one line per segment, following segments that
// wrap at the ring end. It is meant for test failures; it reads the ring
// and changes nothing.
func (q *SendQueue) dump(pi uint32, t prm.Transport) string {
	ring := unsafe.Slice((*byte)(q.buf), uintptr(q.end)-uintptr(q.buf))
	return prm.DumpWQE(ring, pi, t)
}
