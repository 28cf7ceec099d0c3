// Package simadopt is the seam through which the model of the kernel side
// (package cgo/emulate) asks the software HCA (package sim) to create
// objects over memory the user library allocated, as a real device does:
// libmlx5 allocates a CQ's ring and doorbell record itself and tells the
// kernel where they are. Package sim fills the function variables from its
// init; they are nil until sim is linked in.
package simadopt

import (
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
)

// The functions package sim registers.
var (
	// CompletionQueue creates a completion queue of dev (a device of the
	// model) over the caller's ring and doorbell record: the model writes
	// its CQEs there. The memory must stay mapped until the queue is
	// closed; the model does not free it. A ring or record that is not
	// writable is refused with an error matching syscall.EFAULT.
	CompletionQueue func(dev provider.Device, cfg CQConfig) (provider.CompletionQueue, error)
	// ResizeCompletionQueue moves a completion queue CompletionQueue
	// created to a new ring the caller allocated, as a ConnectX does for
	// MODIFY_CQ with op_mod resize: the model writes a CQE of opcode
	// RESIZE_CQ (5) at the old ring's next index and writes every later
	// CQE into the new ring, its producer index going on from the index
	// after that CQE. The caller (libmlx5) copies the unconsumed CQEs up
	// to the resize CQE into the new ring and moves its consumer index
	// past it. The old ring is no longer touched once it returns. A CQ
	// in error, a ring with no room for the resize CQE, or a new ring too
	// small for the CQEs outstanding and the resize CQE are refused with
	// an error matching syscall.EINVAL, a new ring that is not writable
	// with one matching syscall.EFAULT.
	ResizeCompletionQueue func(q provider.CompletionQueue, cfg CQResize) error
	// QueuePair creates a queue pair of a protection domain of the model
	// over the caller's rings and doorbell record. The memory must stay
	// mapped until the queue pair is closed. A doorbell record that is
	// not writable is refused with an error matching syscall.EFAULT.
	QueuePair func(p provider.ProtectionDomain, cfg QPConfig) (provider.QueuePair, error)
	// ForgetRegister makes the model stop watching the doorbell register
	// a queue pair QueuePair created was given (QPConfig.Register), before
	// the caller unmaps it; the queue pair goes on with its doorbell
	// record alone. A queue pair of another provider is ignored.
	ForgetRegister func(p provider.QueuePair)
	// SharedReceiveQueue creates a shared receive queue of a protection
	// domain of the model over the caller's ring and doorbell record.
	SharedReceiveQueue func(p provider.ProtectionDomain, cfg SRQConfig) (provider.SRQ, error)
	// ProtectionDomainNumber returns the PD number of a protection domain
	// of the model; ok is false for one of another provider.
	ProtectionDomainNumber func(p provider.ProtectionDomain) (pdn uint32, ok bool)
	// QueuePairAttributes returns the state of a queue pair of the model
	// and the attributes its transitions applied (what a kernel answers to
	// QUERY_QP); ok is false for a queue pair of another provider.
	QueuePairAttributes func(p provider.QueuePair) (state ctx.QPState, attr ctx.QPAttr, ok bool)
	// ModifyQueuePair moves a queue pair of the model to a.State with the
	// caller's attribute mask, as the kernel's modify_qp takes one: the
	// caller has checked the mask against the transition table (a mask
	// without State moves the QP to the state it is in, which a.State
	// names). Only the attributes the mask names are checked and applied.
	// A queue pair of another provider is refused with
	// ctx.ErrInvalidArgument.
	ModifyQueuePair func(p provider.QueuePair, a ctx.QPAttr, mask qpstate.Mask) error
	// SharedReceiveQueueNumber returns the SRQ number of a shared receive
	// queue of the model; ok is false for a queue of another provider.
	SharedReceiveQueueNumber func(s provider.SRQ) (srqn uint32, ok bool)
	// SubscribeAsyncEvents makes fn receive every async event of dev (a
	// device of the model) in place of the device's own queue, which then
	// stays empty; nil restores the queue. fn runs with the model's lock
	// held and must not call back into the model. ok is false for a device
	// of another provider.
	SubscribeAsyncEvents func(dev provider.Device, fn func(ctx.AsyncEvent)) (ok bool)
	// Provider returns the provider of the fabric f (a *sim.Fabric): its
	// device list and the devices the model of the kernel side opens; nil
	// when f is not a fabric of the model. A Fabric exports neither.
	Provider func(f any) provider.Provider
	// NeighbourMAC returns the MAC address of the Ethernet port of the
	// fabric f (a *sim.Fabric) whose GID table holds gid: what the
	// kernel's neighbour resolution finds for a unicast GID. ok is false
	// when no Ethernet port of the fabric has the GID, or f is not a
	// fabric of the model.
	NeighbourMAC func(f any, gid ctx.GID) (mac [6]byte, ok bool)
	// Idle returns the function that runs one round of the fabric f (a
	// *sim.Fabric) on the calling goroutine, as ctx.Context.Idle does on
	// a device of the model; nil when f is not a fabric of the model.
	Idle func(f any) func()
	// LookupMR returns the live memory region of the fabric f (a
	// *sim.Fabric) with the given key; ok is false when there is none.
	LookupMR func(f any, key uint32) (info MRInfo, ok bool)
	// LookupCQ returns the live completion queue of the fabric f with the
	// given number.
	LookupCQ func(f any, cqn uint32) (info CQInfo, ok bool)
	// LookupSRQ returns the live shared receive queue of the fabric f with
	// the given number.
	LookupSRQ func(f any, srqn uint32) (info SRQInfo, ok bool)
)

// CQConfig describes a completion queue whose ring and doorbell
// record the caller owns.
type CQConfig struct {
	// Ring is the first CQE; Count (a power of two) entries of CQESize
	// (64 or 128) bytes follow. The caller initialises the entries
	// (invalid opcode, owner bit set), as libmlx5 does.
	Ring    unsafe.Pointer
	Count   uint32
	CQESize uint32
	// DBRec is the doorbell record (consumer index, arm), 8-byte aligned.
	DBRec unsafe.Pointer
	// CompVector must be below DeviceAttr.CompVectors.
	CompVector uint32
	// Event, when not nil, is called each time the armed CQ raises a
	// completion event (from the engine, with the model's lock held: it
	// must not call back into the model). The arm is read from the
	// doorbell record's arm word, which the library writes before it
	// rings the UAR (see the model's takeRecordArm).
	Event func()
	// Timestamps makes the model write its clock in every CQE (the
	// kernel's IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION).
	Timestamps bool
}

// CQResize describes the new ring of a completion queue
// (ResizeCompletionQueue): Count (a power of two) entries of the CQ's
// CQE size, initialised as for CQConfig.
type CQResize struct {
	Ring  unsafe.Pointer
	Count uint32
}

// QPConfig describes a queue pair whose rings and doorbell record
// the caller owns, as libmlx5 allocates them and tells the kernel where
// they are (struct mlx5_ib_create_qp).
type QPConfig struct {
	// Type is ctx.QPTypeRC, ctx.QPTypeUD, ctx.QPTypeDCI (a send ring only)
	// or ctx.QPTypeDCT (no rings: it receives through SRQ, and needs no
	// doorbell record).
	Type           ctx.QPType
	SendCQ, RecvCQ provider.CompletionQueue
	// SRQ, when not nil, replaces the receive ring (RQCount must be 0);
	// a DCT requires one.
	SRQ provider.SRQ
	// DCKey is a DCT's access key, which a DCI's WQE must carry.
	DCKey uint64
	// Caps are the capabilities the QP was asked for; the largest WQE,
	// inline size and SGE count the model accepts follow from them as
	// the kernel's sizing does (package internal/sqsize).
	Caps ctx.QueuePairCaps
	// SQ is the send ring: SQCount (a power of two) WQEBBs of 64 bytes,
	// 64-byte aligned.
	SQ      unsafe.Pointer
	SQCount uint32
	// RQ is the receive ring: RQCount (a power of two, 0 for none)
	// entries of RQStride bytes (a power of two, at least one data
	// segment, at most the model's SGE limit of them), stride-aligned.
	RQ       unsafe.Pointer
	RQCount  uint32
	RQStride uint32
	// DBRec is the doorbell record (receive, send counters), 8-byte
	// aligned.
	DBRec unsafe.Pointer
	// Register is the doorbell register the caller rings for the send
	// queue (the bfreg of a UAR page libmlx5 mapped), 8-byte aligned:
	// two buffers of RegisterSize bytes at Register and
	// Register+RegisterSize, or one 8-byte doorbell for RegisterSize 0.
	// In strict mode the model reports a send doorbell record that moves
	// with no write there (sim.ViolationDoorbellRecordOnly); nil leaves
	// it unchecked. It must stay mapped until ForgetRegister or the queue
	// pair's Close.
	Register     unsafe.Pointer
	RegisterSize uint32
	// ScatterToCQE lets the responder write small SENDs into the CQE.
	ScatterToCQE bool
	// Unreliable makes a QP of Type ctx.QPTypeRC a UC QP: SEND, SEND
	// with immediate, RDMA WRITE and RDMA WRITE with immediate only, no
	// acknowledgement, and a responder that drops a message it cannot
	// take instead of answering it with a NAK.
	Unreliable bool
}

// SRQConfig describes a shared receive queue whose ring and
// doorbell record the caller owns, as libmlx5 allocates them and tells the
// kernel where they are (struct mlx5_ib_create_srq).
type SRQConfig struct {
	// Ring is the first WQE: Count (a power of two) WQEs of Stride bytes
	// (a power of two from 32, a next segment and at most the model's SGE
	// limit of data segments), stride-aligned. The caller links the free
	// WQEs (next_wqe_index) from WQE 0, as libmlx5 does; the model follows
	// those links from WQE 0 as it consumes WQEs.
	Ring   unsafe.Pointer
	Count  uint32
	Stride uint32
	// DBRec is the doorbell record (the 16-bit WQE counter), 4-byte
	// aligned.
	DBRec unsafe.Pointer
}

// MRInfo is what the model knows of a registered memory region.
type MRInfo struct {
	Key    uint32
	Addr   uint64
	Length uint64
	Access ctx.Access
	PDN    uint32
}

// CQInfo is what the model knows of a completion queue.
type CQInfo struct {
	CQN     uint32
	Ring    unsafe.Pointer
	Count   uint32
	CQESize uint32
	DBRec   unsafe.Pointer
	// Timestamps: the model writes its clock into the CQ's CQEs.
	Timestamps bool
}

// SRQInfo is what the model knows of a shared receive queue.
type SRQInfo struct {
	SRQN   uint32
	Ring   unsafe.Pointer
	Count  uint32
	Stride uint32
	DBRec  unsafe.Pointer
	PDN    uint32
}

// ClockInfo returns a snapshot of the device clock of the fabric f (a
// *sim.Fabric), the clock the model stamps CQEs from: what the kernel
// writes into its clock info page. ok is false when f is not a fabric of
// the model. Package sim fills it from its init.
var ClockInfo func(f any) (info ctx.ClockInfo, ok bool)
