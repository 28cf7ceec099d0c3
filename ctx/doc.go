// Package ctx holds the control-plane objects of mlx5kit (Context,
// ProtectionDomain, MemoryRegion, CompletionQueue, QueuePair,
// SharedReceiveQueue, AddressHandle, Buffer) and the provider seam: the
// Provider interface and its handle interfaces, and the Go twins of
// mlx5dv_qp, mlx5dv_cq and mlx5dv_srq that the hardware provider (package
// cgo) and the software HCA (package sim) both fill in. The data plane reads
// only these descriptors.
//
// # Providers
//
// A provider registers itself under a name from its init function
// (Register), like a database/sql driver; ctx never imports one. Open picks
// the hardware provider "mlx5" when it is registered and has a device, and
// the software HCA "sim" otherwise. Options.Provider or the environment
// variable MLX5KIT_PROVIDER ask for one explicitly; Context.Kind and
// Context.Provider say which one was opened.
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
// # Errors
//
// Errors are *OpError values naming the verb, wrapping a sentinel
// (ErrClosed, ErrNotSupported, ErrInvalidArgument, ErrInvalidState, …) that
// errors.Is finds.
package ctx
