// Package sqsize models how rdma-core's mlx5 provider sizes a send queue
// (providers/mlx5/verbs.c: the per-WQE overhead of the send operations a QP
// may post, the WQE size, the ring) and how the kit asks for one, so that
// the ring rdma-core allocates is sized for the kit's own largest WQE, and a
// configuration beyond a QP type's limits is refused with a clear error
// before rdma-core is called.
//
// Without IBV_QP_INIT_ATTR_SEND_OPS_FLAGS rdma-core assumes that an RC QP
// or a DCI may post memory-window binds and local invalidations, whose UMR
// WQEs are 192 bytes before any data: every slot of the ring is sized for
// them, the ring is four times what the kit's WQEs need, and the usable SGE
// count and inline size shrink. The kit creates its QPs with the operations
// it posts (KitOps) and no more.
//
// The package has no cgo: the hardware provider (package cgo) passes
// Request's caps and KitOps to mlx5dv_create_qp, and the software HCA
// (package sim) builds its rings from Plan, so both give a QP the same
// geometry and refuse the same configurations.
package sqsize

import (
	"fmt"
	"math/bits"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// Ops is a set of send operations: the bits of enum
// ibv_qp_create_send_ops_flags (verbs.h), which rdma-core takes in
// ibv_qp_init_attr_ex.send_ops_flags.
type Ops uint64

// Send operations (IBV_QP_EX_WITH_*).
const (
	OpRDMAWrite    Ops = 1 << 0
	OpRDMAWriteImm Ops = 1 << 1
	OpSend         Ops = 1 << 2
	OpSendImm      Ops = 1 << 3
	OpRDMARead     Ops = 1 << 4
	OpAtomicCS     Ops = 1 << 5
	OpAtomicFA     Ops = 1 << 6
	OpLocalInv     Ops = 1 << 7
	OpBindMW       Ops = 1 << 8
	OpSendInv      Ops = 1 << 9
	OpTSO          Ops = 1 << 10
)

// Sizes of the segments of a UMR WQE (memory-window bind, local
// invalidation), which rdma-core counts when OpBindMW or OpLocalInv is set:
// struct mlx5_wqe_umr_ctrl_seg, struct mlx5_wqe_mkey_context_seg and the
// larger of struct mlx5_wqe_umr_klm_seg and 64.
const (
	umrCtrlSize    = 48
	mkeyCtxSize    = 64
	umrPayloadSize = 64
)

// MaxWQESize is the largest send WQE the kit builds, in bytes: the ds count
// of a control segment has 6 bits (at most 63 segments of 16 bytes), so a
// WQE spans at most 16 basic blocks.
const MaxWQESize = 16 * prm.WQEBBSize

// DefaultOps returns the operations rdma-core assumes a QP of type t may
// post when it is created without IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: every
// RC operation, binds and invalidations included, for RC and DCI; SEND,
// SEND_IMM and TSO for UD.
func DefaultOps(t ctx.QPType) Ops {
	switch t {
	case ctx.QPTypeUD:
		return OpSend | OpSendImm | OpTSO
	case ctx.QPTypeRC, ctx.QPTypeDCI:
		return OpSend | OpSendInv | OpSendImm | OpRDMAWrite | OpRDMAWriteImm | OpRDMARead |
			OpAtomicCS | OpAtomicFA | OpLocalInv | OpBindMW
	}
	return 0
}

// KitOps returns the operations the kit posts on a QP of type t, the set it
// creates the QP with: SEND, SEND_IMM, SEND_INV, RDMA WRITE (with
// immediate), RDMA READ and, when the device executes atomics, compare-and-
// swap and fetch-and-add on RC and DCI; SEND and SEND_IMM on UD. rdma-core
// refuses the atomic operations (EOPNOTSUPP) on a device without atomics.
// The masked atomics have no flag of their own: rdma-core sizes for them
// no more than for the plain ones, and Request makes room for them.
func KitOps(t ctx.QPType, atomics bool) Ops {
	switch t {
	case ctx.QPTypeUD:
		return OpSend | OpSendImm
	case ctx.QPTypeRC, ctx.QPTypeDCI:
		o := OpSend | OpSendImm | OpSendInv | OpRDMAWrite | OpRDMAWriteImm | OpRDMARead
		if atomics {
			o |= OpAtomicCS | OpAtomicFA
		}
		return o
	}
	return 0
}

// Overhead returns what rdma-core counts before the payload of every send
// WQE of a QP of type t that may post ops (_sq_overhead): the control
// segment, the largest operation segments among ops (remote address;
// remote address and atomic segment; the UMR segments of a bind or
// invalidation) and the address vector of UD and DCI. It returns 0 for a
// type without a send queue.
func Overhead(t ctx.QPType, ops Ops) int {
	size := prm.CtrlSize
	if ops&(OpRDMAWrite|OpRDMAWriteImm|OpRDMARead) != 0 {
		size = max(size, prm.CtrlSize+prm.RaddrSize)
	}
	if ops&(OpAtomicCS|OpAtomicFA) != 0 {
		size = max(size, prm.CtrlSize+prm.RaddrSize+prm.AtomicSize)
	}
	if ops&(OpBindMW|OpLocalInv) != 0 {
		size = max(size, prm.CtrlSize+umrCtrlSize+mkeyCtxSize+umrPayloadSize)
	}
	switch t {
	case ctx.QPTypeRC:
		return size
	case ctx.QPTypeUD, ctx.QPTypeDCI:
		return size + prm.AVSize
	}
	return 0
}

// KitWQEBBs is the size in WQEBBs of the largest WQE the kit builds on a
// queue pair of type t with maxSGE data segments or maxInline bytes inline:
// control segment, address vector (UD, DCI), remote address (RC, DCI) and
// the payload, at least the masked 64-bit compare-and-swap with its result
// segment where atomics are allowed, and at least 2 (wqebuilder's smallest
// headroom).
func KitWQEBBs(t ctx.QPType, maxSGE, maxInline uint32) uint32 {
	payload := max(maxSGE, uint32(prm.InlineDS(int(min(maxInline, MaxWQESize)))))
	atomic := uint32(prm.MaskedCS64Size/prm.SegmentSize + 1)
	var ds uint32
	switch t {
	case ctx.QPTypeUD:
		ds = 1 + prm.AVSegments + payload
	case ctx.QPTypeDCI:
		ds = 1 + prm.AVSegments + 1 + max(payload, atomic)
	default:
		ds = 1 + 1 + max(payload, atomic)
	}
	ds = min(ds, prm.MaxDS)
	return max(uint32(prm.WQEBBs(int(ds))), 2)
}

// KitMaxPayload is the most bytes of data segments, or of inline segment
// header and data, that a WQE of the kit on a queue pair of type t carries:
// the 6-bit ds count allows prm.MaxDS segments of 16 bytes, less the
// control segment, the address vector (UD, DCI) and the remote address
// (RC, DCI). A 1 KiB send WQE (max_sq_desc_sz 1024) is larger than that:
// rdma-core grants inline sizes up to the descriptor, which a WQE cannot
// express (UD: 956 bytes granted, 940 expressible).
func KitMaxPayload(t ctx.QPType) uint32 {
	segs := prm.MaxDS - 1
	switch t {
	case ctx.QPTypeUD:
		segs -= prm.AVSegments
	case ctx.QPTypeDCI:
		segs -= prm.AVSegments + 1
	default:
		segs--
	}
	return uint32(segs * prm.SegmentSize)
}

// KitMaxSGE is the most data segments of a WQE of the kit on a queue pair
// of type t (KitMaxPayload).
func KitMaxSGE(t ctx.QPType) uint32 { return KitMaxPayload(t) / prm.DataSize }

// KitMaxInline is the most inline bytes of a WQE of the kit on a queue pair
// of type t (KitMaxPayload, less the inline segment's header).
func KitMaxInline(t ctx.QPType) uint32 { return KitMaxPayload(t) - prm.InlineHeaderSize }

// Device holds what a send queue is sized against.
type Device struct {
	// MaxSQDescSize is rdma-core's max_sq_desc_sz: the largest send WQE in
	// bytes (from the kernel's mlx5_ib_alloc_ucontext_resp; no query
	// reports it, the hardware provider finds it by creating QPs).
	MaxSQDescSize uint32
	// MaxSendWQEBB is rdma-core's max_send_wqebb: the most 64-byte blocks
	// of a send ring. The mlx5 kernel driver reports 1 << log_max_qp_sz,
	// the same value as max_qp_wr.
	MaxSendWQEBB uint32
	// MaxSGE is max_sge of ibv_query_device; 0 means no bound beyond the
	// WQE size.
	MaxSGE uint32
	// Atomics says that the device executes atomics (atomic_cap is not
	// IBV_ATOMIC_NONE): the atomic operations are then among KitOps.
	Atomics bool
}

// DeviceOf returns the Device that a's fields describe (MaxSendWQESize,
// MaxQPWR, MaxSGE, AtomicHCA). Its MaxSQDescSize is 0 when the provider
// did not report a WQE size.
func DeviceOf(a ctx.DeviceAttr) Device {
	return Device{MaxSQDescSize: a.MaxSendWQESize, MaxSendWQEBB: a.MaxQPWR, MaxSGE: a.MaxSGE, Atomics: a.AtomicHCA}
}

// maxWQE is the largest WQE size rdma-core accepts on d: max_sq_desc_sz
// rounded down to whole basic blocks (a size is rounded up to them and must
// stay within it), and no larger than the kit's ds count allows.
func (d Device) maxWQE() int {
	return min(int(d.MaxSQDescSize)/prm.WQEBBSize*prm.WQEBBSize, MaxWQESize)
}

// Geometry is what rdma-core's mlx5_calc_sq_size makes of a request.
type Geometry struct {
	// Overhead is what rdma-core counts before the payload of every WQE.
	Overhead uint32
	// WQESize is the size of a slot in bytes (a multiple of 64): every
	// work request is counted at this size.
	WQESize uint32
	// WQECnt is the number of 64-byte blocks of the ring (a power of two).
	WQECnt uint32
	// MaxPost is the max_send_wr rdma-core grants: WQEs of WQESize the
	// ring holds.
	MaxPost uint32
	// MaxInline is the max_inline_data rdma-core grants: what fills a slot.
	MaxInline uint32
	// MaxSGE is the max_send_sge rdma-core grants: what was asked.
	MaxSGE uint32
}

// WQEBBs returns the slot size in 64-byte blocks.
func (g Geometry) WQEBBs() uint32 { return g.WQESize / prm.WQEBBSize }

// Compute returns what rdma-core makes of a send queue of type t that may
// post ops, asked for caps.SendDepth work requests of caps.MaxSendSGE data
// segments or caps.MaxInline bytes inline, on d (mlx5_calc_send_wqe and
// mlx5_calc_sq_size), or an error wrapping ctx.ErrInvalidArgument where
// rdma-core fails with EINVAL, naming the limit. A depth of 0 is a QP
// without a send queue: the zero Geometry.
func Compute(t ctx.QPType, ops Ops, caps ctx.QueuePairCaps, d Device) (Geometry, error) {
	if caps.SendDepth == 0 {
		return Geometry{}, nil
	}
	ov := Overhead(t, ops)
	if ov == 0 {
		return Geometry{}, limitErr("%v QP has no send queue", t)
	}
	desc := int(d.MaxSQDescSize)
	if maxGather := (desc - ov) / prm.DataSize; desc < ov || int64(caps.MaxSendSGE) > int64(maxGather) {
		return Geometry{}, limitErr("max send SGE %d above the %v limit of %d (max_sq_desc_sz %d, %d bytes of overhead)",
			caps.MaxSendSGE, t, max(maxGather, 0), desc, ov)
	}
	// rdma-core refuses the WQE before and after rounding it up to basic
	// blocks; the second check implies the first.
	size := wqeSize(ov, caps.MaxSendSGE, caps.MaxInline)
	if size > desc {
		return Geometry{}, limitErr("%v send WQE of %d bytes (max send SGE %d, max inline %d, %d bytes of overhead) above max_sq_desc_sz %d",
			t, size, caps.MaxSendSGE, caps.MaxInline, ov, desc)
	}
	// rdma-core refuses depths whose ring size would overflow an int.
	if caps.SendDepth > uint32(0x7fffffff/desc) {
		return Geometry{}, limitErr("send depth %d above the %v limit of %d (max_sq_desc_sz %d)",
			caps.SendDepth, t, 0x7fffffff/desc, desc)
	}
	bytes := roundPow2(uint64(caps.SendDepth) * uint64(size))
	cnt := bytes / prm.WQEBBSize
	if cnt > uint64(d.MaxSendWQEBB) {
		return Geometry{}, limitErr("send depth %d above the %v limit of %d for %d-byte WQEs (max send SGE %d, max inline %d; a ring of at most %d WQEBBs)",
			caps.SendDepth, t, depthLimit(size, d), size, caps.MaxSendSGE, caps.MaxInline, d.MaxSendWQEBB)
	}
	return Geometry{
		Overhead:  uint32(ov),
		WQESize:   uint32(size),
		WQECnt:    uint32(cnt),
		MaxPost:   uint32(bytes / uint64(size)),
		MaxInline: uint32(size - ov - prm.InlineHeaderSize),
		MaxSGE:    caps.MaxSendSGE,
	}, nil
}

// wqeSize is rdma-core's WQE size: the overhead plus the larger of the data
// segments and the inline segment, in whole basic blocks.
func wqeSize(ov int, sge, inline uint32) int {
	size := ov + int(sge)*prm.DataSize
	if inline > 0 {
		size = max(size, ov+align(prm.InlineHeaderSize+int(inline), prm.SegmentSize))
	}
	return align(size, prm.WQEBBSize)
}

// depthLimit is the deepest ring of size-byte WQEs on d.
func depthLimit(size int, d Device) uint32 {
	// The ring is rounded up to a power of two of bytes, which
	// MaxSendWQEBB*64 is: depth*size fits iff its round-up does.
	return uint32(min(uint64(d.MaxSendWQEBB)*prm.WQEBBSize/uint64(size), 0x7fffffff/uint64(max(d.MaxSQDescSize, 1))))
}

// Request returns the caps the kit asks rdma-core for so that a slot of the
// ring holds the kit's largest WQE for caps (KitWQEBBs): when rdma-core's
// own WQE size for caps would be smaller, max_inline_data is raised until
// it is not; then max_send_sge and max_inline_data are raised to what fills
// the slot (max_send_sge no further than d.MaxSGE), so the limits granted
// are those the slot really has. The depth is unchanged: the ring then
// holds caps.SendDepth of the kit's largest WQEs.
func Request(t ctx.QPType, ops Ops, caps ctx.QueuePairCaps, d Device) ctx.QueuePairCaps {
	if caps.SendDepth == 0 {
		return caps
	}
	ov := Overhead(t, ops)
	if ov == 0 {
		return caps
	}
	size := max(wqeSize(ov, caps.MaxSendSGE, caps.MaxInline), int(KitWQEBBs(t, caps.MaxSendSGE, caps.MaxInline))*prm.WQEBBSize)
	room := size - ov
	sge := uint32(room / prm.DataSize)
	if d.MaxSGE != 0 {
		sge = min(sge, d.MaxSGE)
	}
	caps.MaxSendSGE = max(caps.MaxSendSGE, sge)
	caps.MaxInline = max(caps.MaxInline, uint32(room-prm.InlineHeaderSize))
	return caps
}

// Plan is what the kit asks for and gets: Request's caps with KitOps on d,
// and the Geometry rdma-core computes from them. It checks caps against
// the limits of the type first (Check) and returns its error.
func Plan(t ctx.QPType, caps ctx.QueuePairCaps, d Device) (ctx.QueuePairCaps, Geometry, error) {
	if err := Check(t, caps, d); err != nil {
		return caps, Geometry{}, err
	}
	ops := KitOps(t, d.Atomics)
	req := Request(t, ops, caps, d)
	g, err := Compute(t, ops, req, d)
	return req, g, err
}

// Check refuses caps beyond the send-queue limits of type t on d with an
// error wrapping ctx.ErrInvalidArgument that names the limit. A depth of
// 0 (no send queue) passes.
func Check(t ctx.QPType, caps ctx.QueuePairCaps, d Device) error {
	if caps.SendDepth == 0 {
		return nil
	}
	ops := KitOps(t, d.Atomics)
	ov := Overhead(t, ops)
	if ov == 0 {
		return limitErr("%v QP has no send queue", t)
	}
	lim := LimitsOf(t, d)
	if lim == (ctx.SendQueueLimits{}) {
		return limitErr("%v send WQE: %d bytes of overhead and the kit's WQEs leave no room within max_sq_desc_sz %d", t, ov, d.MaxSQDescSize)
	}
	switch {
	case caps.MaxSendSGE > lim.MaxSGE:
		return limitErr("max send SGE %d above the %v limit of %d", caps.MaxSendSGE, t, lim.MaxSGE)
	case caps.MaxInline > lim.MaxInline:
		return limitErr("max inline %d above the %v limit of %d bytes", caps.MaxInline, t, lim.MaxInline)
	}
	req := Request(t, ops, caps, d)
	size := wqeSize(ov, req.MaxSendSGE, req.MaxInline)
	if limit := depthLimit(size, d); caps.SendDepth > limit {
		return limitErr("send depth %d above the %v limit of %d for max send SGE %d and max inline %d (%d-byte WQEs, a ring of at most %d WQEBBs)",
			caps.SendDepth, t, limit, caps.MaxSendSGE, caps.MaxInline, size, d.MaxSendWQEBB)
	}
	_, err := Compute(t, ops, req, d)
	return err
}

// LimitsOf returns the send-queue limits of type t on d: the deepest queue
// (with one SGE and no inline data: larger WQEs lower it), the most SGEs and
// the most inline bytes one WQE of the kit may carry (within both the
// WQE size and the ds count: KitMaxSGE, KitMaxInline). It returns zero limits
// for a type without a send queue or a Device without a WQE size.
func LimitsOf(t ctx.QPType, d Device) ctx.SendQueueLimits {
	ov := Overhead(t, KitOps(t, d.Atomics))
	maxWQE := d.maxWQE()
	if ov == 0 || maxWQE < ov+prm.DataSize || maxWQE < int(KitWQEBBs(t, 1, 0))*prm.WQEBBSize {
		return ctx.SendQueueLimits{}
	}
	sge := min(uint32((maxWQE-ov)/prm.DataSize), KitMaxSGE(t))
	if d.MaxSGE != 0 {
		sge = min(sge, d.MaxSGE)
	}
	smallest := max(wqeSize(ov, 1, 0), int(KitWQEBBs(t, 1, 0))*prm.WQEBBSize)
	return ctx.SendQueueLimits{
		MaxDepth:  depthLimit(smallest, d),
		MaxSGE:    sge,
		MaxInline: min(uint32(maxWQE-ov-prm.InlineHeaderSize), KitMaxInline(t)),
	}
}

// Granted returns caps that libmlx5 granted a QP of type t on d (and told
// the kernel) as the kit's limits take them: libmlx5 grants the inline
// bytes that fill a slot, up to max_sq_desc_sz less its overhead, which on
// a device with 1 KiB send WQEs is more than a WQE can express within the
// ds count (UD: 956 bytes, 940 expressible; RC without atomics: 988, not
// 972). Such an inline size, one no larger than a WQE of max_sq_desc_sz
// holds after the type's smallest overhead, is lowered to LimitsOf's; any
// other caps are returned as they are. mlx5_ib checks no inline size of a
// user QP: a kernel's model (the emulated kernel, the software HCA's
// adoption of a library's rings) checks Granted's caps, not the request's.
func Granted(t ctx.QPType, caps ctx.QueuePairCaps, d Device) ctx.QueuePairCaps {
	ov := Overhead(t, OpSend)
	lim := LimitsOf(t, d)
	if ov == 0 || lim.MaxInline == 0 || caps.MaxInline <= lim.MaxInline {
		return caps
	}
	if int64(caps.MaxInline) <= int64(d.maxWQE())-int64(ov)-prm.InlineHeaderSize {
		caps.MaxInline = lim.MaxInline
	}
	return caps
}

// LimitError is the refusal of a send-queue configuration beyond a limit of
// its QP type or of rdma-core's sizing. It wraps ctx.ErrInvalidArgument.
type LimitError struct {
	// Msg names the limit and the values, e.g. "max inline 930 above the
	// DCI limit of 924 bytes".
	Msg string
}

// Error returns Msg and the sentinel's text.
func (e *LimitError) Error() string { return e.Msg + ": " + ctx.ErrInvalidArgument.Error() }

// Unwrap returns ctx.ErrInvalidArgument.
func (e *LimitError) Unwrap() error { return ctx.ErrInvalidArgument }

func limitErr(format string, args ...any) error {
	return &LimitError{Msg: fmt.Sprintf(format, args...)}
}

func align(n, a int) int { return (n + a - 1) / a * a }

func roundPow2(n uint64) uint64 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len64(n-1)
}
