// Package wqebuilder writes send work-queue elements (WQEs) of mlx5 NICs
// straight into the send ring, in the hardware's own format, and publishes
// them through package blueflame.
//
// # Stages
//
// A WQE is built through a chain of small value types, each offering only
// the methods valid next, so that a WQE built in the wrong order does not
// compile:
//
//	q.Begin(wrid, flags)            CtrlStage
//	  .DC(av, dctn, key) | .UD(av, qpn, qkey)   (DC and UD only)
//	  .RdmaWrite(raddr, rkey)       DataStage      (also Send, SendImm, SendInv, RdmaWriteImm)
//	  .RdmaRead(raddr, rkey)        ScatterStage
//	  .AtomicCS(...) / .MaskedFA64(...) AtomicStage → .Result(addr, lkey) FinishStage
//	  .Nop()                        FinishStage
//	DataStage.SGE(addr, len, lkey) ... .Inline(b) ... .Finish() / .FinishBlueFlame()
//
// Stages are four machine words passed by value and every method is small
// enough for the Go inliner, so a whole post compiles to straight-line
// stores into the ring with no allocation. FinishBlueFlame is inlined whole
// (its body is a closure called once) and leaves one call, into the
// BlueFlame assembly; Finish makes one call, to the check-and-commit step
// (verified with go build -gcflags=-m and -S; see the package tests). A
// stage is used once: after Finish, no copy of it may be used again, and the
// zero stage is not a WQE (its methods panic with a nil dereference: the
// post's one check does not look for it). A stage is told from the open one
// by its slot only, so a stage kept a lap of the ring, until a new Begin
// opens its slot again, is no longer told apart: its Finish is then taken
// as the open WQE's.
//
// Begin opens the WQE at the producer index, and every stage begun there
// before one of them finishes builds that same WQE: finish (or abandon)
// one WQE before beginning the next. The stages' methods write straight
// into the ring and check nothing (the post's one check is Finish's), so
// a stage abandoned and used again after another was begun in its slot
// writes into that slot, even into the WQE the other finished and no
// doorbell has yet published; only its own Finish is refused
// (ErrStaleStage). Finish is the check that makes a WQE valid, not the
// methods before it.
//
// BenchmarkPostBatch64 (RDMA_WRITE + SGE + Finish, one doorbell per 64)
// and blueflame's BenchmarkPost (the doorbell record, the two fences and
// the 64-byte BlueFlame copy) measure these paths; docs/benchmarks.md has
// the figures.
//
// # Ring
//
// The ring works as rdma-core's providers/mlx5/qp.c: a free-running producer
// index in 64-byte basic blocks (WQEBBs), the WQE index pi&0xffff in the
// control segment, ds in 16-byte units, every segment and inline payload
// wrapping to the ring start at the ring end, zero-length SGEs skipped,
// inline data padded to 16 bytes (padding bytes are not written). The
// control segment's first half is written last, by Finish. The next WQEBB is
// never pre-zeroed.
//
// Begin needs MaxWQEBBs free WQEBBs. Complete, called with a CQE's
// wqe_counter, retires that WQE and every unsignaled one before it.
//
// # Errors
//
// Errors only the run can know (queue full, inline data above MaxInline,
// an SGE above MaxSGELength, more SGEs than MaxSGE, a WQE above MaxWQEBBs)
// are sticky in the stage, like bufio.Scanner's, and returned by Finish as a
// *PostError wrapping one of ErrQueueFull, ErrInlineTooLong, ErrSGETooLong,
// ErrTooManySGE, ErrWQETooLarge. A failed WQE
// never moves the producer index and never writes outside the ring: a WQE
// begun on a full queue writes into a private scratch area, and the other
// failures stop writing at the first error, inside the WQEBBs the WQE was
// given.
//
// Nothing is checked against the device's capabilities, to keep the post
// path short: an atomic (AtomicCS, AtomicFA, the masked ones) on a device
// that reports no atomics (ctx.DeviceAttr.AtomicHCA false), which
// libmlx5's post refuses with EOPNOTSUPP, is posted, and the device
// completes the WQE with an error. Package channel refuses it before
// posting.
//
// # Doorbell
//
// Finish only writes the WQE. RingDoorbell publishes every WQE finished since
// the last doorbell with one doorbell-record update and one 8-byte register
// write (batching); FinishBlueFlame finishes and publishes one WQE, copying
// it whole to the BlueFlame register when it is the only one pending and
// fits the register (whether it carries inline data or not, as UCX posts and
// as rdma-core does with MLX5_POST_SEND_PREFER_BF=1), else with the 8-byte
// doorbell.
//
// The package writes little-endian words of byte-swapped values: it runs on
// amd64 and arm64.
package wqebuilder
