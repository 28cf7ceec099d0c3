// Package ctx holds the control-plane objects of mlx5kit (Context,
// ProtectionDomain, MemoryRegion, CompletionQueue, QueuePair,
// SharedReceiveQueue, AddressHandle, Buffer) and the Go twins of
// mlx5dv_qp, mlx5dv_cq and mlx5dv_srq that the hardware provider (package
// cgo) and the software HCA (package sim) both fill in. The data plane reads
// only these descriptors.
//
// # Providers
//
// A provider registers itself under a name from its init function, like a
// database/sql driver; ctx never imports one. The interfaces a provider
// implements are internal to this module (the providers are the two named
// below). Open uses the provider Options.Provider names, else the one the
// environment variable MLX5KIT_PROVIDER names, else the hardware provider
// "mlx5". The software HCA "sim" is only ever chosen by name: with no mlx5
// device and no choice, Open returns an error saying how to choose it.
// Context.Kind and Context.Provider say which one was opened.
//
// # Lifetimes
//
// Every object depends on the objects it was created from: a QP on its PD,
// its CQs and its SRQ; an MR, SRQ or address handle on its PD; a PD or CQ on
// the Context. Closing an object first closes everything that depends on it,
// in the order the device needs (QPs, SRQs, CQs, address handles, MRs, PDs,
// Context). Close is idempotent, and any method of a closed object returns an
// error wrapping ErrClosed.
//
// # Completion events and the arm sequence number
//
// A CompletionQueue created with EventChannel raises one event per arm. The
// data plane arms it by writing the arm doorbell (monocq.CQ.Arm); the word
// it writes carries a 2-bit arm sequence number, which must be the number
// of events consumed so far modulo 4 (rdma-core keeps it as arm_sn and
// advances it in ibv_get_cq_event). Two parties take part and each counts
// one half: the CompletionQueue consumes and acknowledges one event with
// the provider (ibv_get_cq_event plus ibv_ack_cq_events; the provider only
// counts them), and the poller owns the sequence number:
// monocq.CQ.AcknowledgeEvent must be called once for every event read,
// before the next Arm. The CompletionQueue's event read is not exported:
// completion.Notifier does both, in that order, and is the way to wait for
// events. The software HCA checks the number of every arm against the
// events read, in strict mode.
//
// # Resetting a queue pair
//
// Moving a QueuePair to RESET (Modify with QPStateReset) empties its queues
// and zeroes its doorbell record, on hardware (rdma-core clears it in
// mlx5_modify_qp) and in the software HCA alike: the producer indices
// start again at 0, and a send queue or receive queue built over the old
// descriptor must be rebuilt (rc.QP.Reset does it). The ring memory and
// the descriptor stay the same. Only RC and UD queue pairs move to RESET:
// the kernel refuses it for a DCT and, on the first DC kernels, for a DCI;
// those are destroyed and created again instead.
//
// # Errors
//
// Errors are *OpError values naming the verb, wrapping a sentinel
// (ErrClosed, ErrNotSupported, ErrInvalidArgument, ErrInvalidState, …) that
// errors.Is finds.
package ctx
