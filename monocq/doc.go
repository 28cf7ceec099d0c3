// Package monocq polls an mlx5 completion queue by reading its CQEs straight
// from the ring that the device (or the software HCA) writes.
//
// It owns the consumer side of the completion ring: the owner-bit test,
// the read barrier, decoding of requester, responder and error CQEs and of
// scatter-to-CQE data, expansion of compressed (mini-CQE) sessions, the
// consumer-index doorbell record, and arming the CQ for an event. It knows
// the ring only through Config, plain data that a transport copies from what
// the provider reported of the CQ; it never imports a provider or cgo, and
// from ctx it takes only the sentinel ErrInvalidArgument.
//
// # Polling
//
// Three forms compile to the same loop, with the caller's code for each CQE
// inlined into it (see docs/completions.md for the -gcflags=-m proof and the
// benchmarks):
//
//	// range over a batch: Ready, then every CQE, then Release
//	for c := range cq.All(64) {
//		handle(c)
//	}
//
//	// a function literal
//	cq.Poll(64, func(c *monocq.CQE) { handle(c) })
//
//	// the cursor the caller drives
//	cq.Ready(64)
//	for c := cq.Next(); c != nil; c = cq.Next() {
//		handle(c)
//	}
//	cq.Release()
//
// Ready does everything that is not inlined: it scans the owner bits of up to
// max slots, expands compressed sessions in place, checks formats, and then
// issues one read barrier for the whole batch (every owner-bit load before
// it, every other load of those CQEs after it). The owner bits are read with
// sync/atomic loads of each CQE's last word and the barrier is
// blueflame.OwnershipBarrier: no instruction on amd64, where the processor
// keeps loads in order (as UCX and DPDK poll), lfence with the build tag
// mlx5kit_lfence (as rdma-core), dmb oshld on arm64. Next only hands out the
// slots Ready found. Release writes the consumer index to the doorbell
// record, once per batch.
//
// A *CQE points into the ring and is valid until Release (or the next Poll
// or All batch) gives its slot back to the device.
//
// # Errors
//
// The poller never panics on what it reads. A slot whose format cannot be
// right (scatter-64 in a ring of 64-byte CQEs, a compressed session with an
// impossible count) stops the poller before that slot and Err returns an
// error wrapping ErrCorrupt. A ring found completely full sets ErrOverrun
// without stopping. Error CQEs are delivered like any other; CQE.Err turns
// them into a *CompletionError, and an unknown syndrome is reported by name
// "SYNDROME(0x..)" and errors.Is(err, ErrUnknownSyndrome), never a panic.
//
// CompletionError is the one error type of a failed completion in every
// layer: the transports' Completion.Err and channel's requests return it
// too, with the work request id. It carries the verbs work completion
// status ([Status], mapped from the mlx5 syndrome by [StatusOf] as
// rdma-core's mlx5 provider maps it) and matches, with errors.Is,
// [ErrCompletion] and the sentinel of its status ([ErrRemoteAccess],
// [ErrFlushed], …).
//
// # Many queue pairs on one CQ
//
// Table maps a QPN to the caller's queue with two array loads and no hashing
// or allocation on the lookup.
package monocq
