package monocq

import (
	"fmt"
	"iter"
	"math/bits"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/blueflame"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/seam"
)

// maxCQECnt is the largest ring New accepts: the consumer index the device
// sees is 24 bits wide, and the owner bit must flip inside that range.
const maxCQECnt = 1 << 23

// Config is the completion ring as the provider created it (the fields of
// struct mlx5dv_cq). Transports fill it from what the provider reported of
// the CQ (transport.NewCQ builds one from a ctx.CompletionQueue).
type Config struct {
	// Buf is the first byte of the ring: CQECnt slots of CQESize bytes.
	// It must be 64-byte aligned and never Go heap memory.
	Buf unsafe.Pointer
	// CQECnt is the number of slots, a power of two from 2 to maxCQECnt.
	CQECnt uint32
	// CQESize is 64 or 128. In a 128-byte slot the CQE64 is the second
	// half.
	CQESize uint32
	// DBRec is the CQ doorbell record: two big-endian words, [0] the
	// consumer index, [1] the arm word. 4-byte aligned.
	DBRec unsafe.Pointer
	// UAR is the CQ's UAR page; the arm doorbell is at
	// prm.CQDoorbellOffset. It may be nil for a CQ that is never armed.
	UAR unsafe.Pointer
	// CQN is the completion queue number (24 bits).
	CQN uint32
	// Memory is the owner of the ring, the doorbell record and the UAR
	// (what the provider reported): the poller keeps it reachable, so that
	// polling a CQ that was closed, even by another goroutine (Context.Close
	// to stop a poll loop), reads memory that is still mapped. Leave it nil
	// only for memory that outlives the poller anyway.
	Memory any
}

func init() {
	seam.CQDoorbell = func(poller any) unsafe.Pointer { return poller.(*CQ).dbrec }
}

// CQ polls one completion ring. It is used by one goroutine at a time.
//
// A CQ closed under the poller (ctx.CompletionQueue.Close, or a parent's
// Close, from any goroutine) stops receiving CQEs: Poll, All and Ready then
// hand out the CQEs the device had written before, and find nothing after
// them. Nothing in the ring says that the CQ is closed; a poll loop learns
// it from the CQ's owner (ctx.CompletionQueue.Closed, or the Err of the
// transports' Pollers, which wraps ctx.ErrClosed), as a loop over a net.Conn
// learns it from the error of its next read.
type CQ struct {
	// Hot fields first: Next reads ring, mask, shift, ci and state.
	ring   unsafe.Pointer // the CQE64 of slot 0: Buf + CQESize - 64
	mask   uint32         // CQECnt - 1
	shift  uint8          // log2(CQESize)
	logCnt uint8          // log2(CQECnt), below 32 (shifts use logCnt&31: no guard)
	ci     uint32         // free-running consumer index
	// state places the consumer index between the index last released
	// and the end of what Ready found, relative to ci so that the common
	// case is the number 0: bits 0..23 count the CQEs Ready found that
	// Next has not returned (the end is ci plus them), bit 31 says a
	// corrupt slot stops the poller at that end, and bits 32..63 count
	// the CQEs returned since the last Release (ci minus them is the index
	// dbrec[0] holds). Poll's one-CQE path runs only when state is 0, and
	// then changes only ci.
	state uint64
	dbrec unsafe.Pointer

	uar   unsafe.Pointer
	cqn   uint32
	armSN uint32
	err   error

	sessions    uint64 // compressed sessions expanded
	miniCQEs    uint64 // CQEs expanded from mini-CQEs
	overrunSeen bool

	// memory is Config.Memory, kept reachable with the poller (in the
	// place of a copy of Config.Buf, which ring replaces: the CQ stays in
	// its allocation size class).
	memory any
}

// New returns a poller for the ring that cfg describes. The ring's slots
// must hold what the device left in them (op_own 0xf0 for slots never
// written, as providers initialise them), and the consumer index starts at
// 0 like a freshly created CQ.
func New(cfg Config) (*CQ, error) {
	bad := func(format string, args ...any) (*CQ, error) {
		return nil, fmt.Errorf("monocq: new CQ 0x%x: "+format+": %w", append([]any{cfg.CQN}, append(args, ctx.ErrInvalidArgument)...)...)
	}
	switch {
	case cfg.Buf == nil:
		return bad("nil ring")
	case uintptr(cfg.Buf)%prm.CQE64Size != 0:
		return bad("ring %p not 64-byte aligned", cfg.Buf)
	case cfg.CQECnt < 2 || cfg.CQECnt > maxCQECnt || cfg.CQECnt&(cfg.CQECnt-1) != 0:
		return bad("CQECnt %d not a power of two from 2 to %d", cfg.CQECnt, maxCQECnt)
	case cfg.CQESize != prm.CQE64Size && cfg.CQESize != prm.CQE128Size:
		return bad("CQESize %d is neither 64 nor 128", cfg.CQESize)
	case cfg.DBRec == nil:
		return bad("nil doorbell record")
	case uintptr(cfg.DBRec)%4 != 0:
		return bad("doorbell record %p not 4-byte aligned", cfg.DBRec)
	case uintptr(cfg.UAR)%8 != 0:
		return bad("UAR %p not 8-byte aligned", cfg.UAR)
	case cfg.CQN > prm.CQEQPNMask:
		return bad("CQN wider than 24 bits")
	}
	return &CQ{
		ring:   unsafe.Add(cfg.Buf, cfg.CQESize-prm.CQE64Size),
		mask:   cfg.CQECnt - 1,
		shift:  uint8(bits.TrailingZeros32(cfg.CQESize)),
		logCnt: uint8(bits.TrailingZeros32(cfg.CQECnt)),
		dbrec:  cfg.DBRec,
		uar:    cfg.UAR,
		cqn:    cfg.CQN,
		memory: cfg.Memory,
	}, nil
}

// slot returns the CQE64 of the slot that consumer index i maps to.
func (cq *CQ) slot(i uint32) *CQE {
	return (*CQE)(unsafe.Add(cq.ring, uintptr(i&cq.mask)<<(cq.shift&63)))
}

// sw reports whether op_own op, read from the slot of consumer index i,
// marks a CQE that software owns: the test of rdma-core's get_sw_cqe, opcode
// not INVALID and owner bit == !!(i & cqeCnt).
func sw(op uint8, i, cqeCnt uint32) bool {
	// INVALID is the largest opcode.
	return op < uint8(prm.CQEInvalid)<<prm.CQEOpcodeShift && ownerAgrees(op, i, cqeCnt)
}

// ownerAgrees reports whether the owner bit of op_own op is the one
// software expects at consumer index i: half of sw, without the opcode.
func ownerAgrees(op uint8, i, cqeCnt uint32) bool {
	// -owner is all ones for owner bit 1 and 0 for owner bit 0: XOR with
	// the index leaves the cqeCnt bit clear exactly when the two agree (no
	// booleans to materialise).
	return (-uint32(op&prm.CQEOwnerMask)^i)&cqeCnt == 0
}

// The fields of CQ.state.
const (
	statePending = 1<<24 - 1
	stateStopped = 1 << 31
	stateTaken   = 32 // shift of the count of CQEs taken and not released
)

// released is the consumer index last written to dbrec[0].
func (cq *CQ) released() uint32 { return cq.ci - uint32(cq.state>>stateTaken) }

// take moves the consumer index n CQEs on: they stop being pending and
// count as taken until the next Release. n is at most the pending count.
func (cq *CQ) take(n uint32) {
	cq.ci += n
	cq.state += uint64(n)<<stateTaken - uint64(n)
}

// Ready finds the CQEs the device has handed over, from the consumer index
// on, until it has max of them (counting those an earlier Ready found and
// Next has not yet returned), and returns how many are ready.
//
// A slot is software's, as in rdma-core's get_sw_cqe, when its opcode is not
// INVALID and its owner bit equals bit log2(CQECnt) of its index. Ready reads
// only the op_own bytes while it scans, each with an atomic load of the
// CQE's last word; one blueflame.OwnershipBarrier then orders those loads
// before every later load of the CQEs. A compressed session met on the way
// is expanded in place into ordinary CQEs first.
//
// Ready never goes past the slots the device could have written since the
// last Release, and stops before a corrupt slot (see Err).
func (cq *CQ) Ready(max int) int {
	n := uint32(cq.state) & statePending
	if max <= int(n) || cq.state&stateStopped != 0 {
		return int(n)
	}
	// The device writes at most CQECnt slots past the released index.
	window := cq.mask + 1 - uint32(cq.state>>stateTaken)
	limit := window
	if uint(max) < uint(limit) {
		limit = uint32(max)
	}
	ring, mask, shift := cq.ring, cq.mask, cq.shift&63
	pos, stop := cq.ci+n, cq.ci+limit
	for pos != stop {
		op := prm.LoadOpOwn(unsafe.Add(ring, uintptr(pos&mask)<<shift))
		if !sw(op, pos, mask+1) {
			break
		}
		if op&(prm.CQEFormatMask<<prm.CQEFormatShift) != 0 && !cq.checkFormat(pos, op) {
			break
		}
		pos++
	}
	if found := pos - cq.ci; found != n {
		blueflame.OwnershipBarrier()
		cq.state += uint64(found - n)
	}
	if !cq.overrunSeen {
		// The ring is full when the last slot the device may write before
		// the next Release is written already. If it is not yet, it still
		// holds the previous lap's owner bit (session slots included, which
		// expand rewrites with the owner bit of their own lap).
		last := cq.released() + mask
		if sw(cq.slot(last)[prm.CQEOpOwn], last, mask+1) {
			cq.overrun()
		}
	}
	return int(pos - cq.ci)
}

// overrun records that the ring was found full.
func (cq *CQ) overrun() {
	cq.overrunSeen = true
	cq.setErr(fmt.Errorf("monocq: poll CQ 0x%x: all %d slots from consumer index %d held unreleased CQEs: %w",
		cq.cqn, cq.mask+1, cq.released(), ErrOverrun))
}

// checkFormat handles a software-owned slot whose op_own has a format other
// than a plain CQE. It returns false when the slot must not be handed out.
func (cq *CQ) checkFormat(pos uint32, op uint8) bool {
	switch prm.OpOwnFormat(op) {
	case prm.CQEFormatScatter32:
		return true
	case prm.CQEFormatScatter64:
		if cq.shift == 7 {
			return true
		}
		cq.corrupt(pos, op, "scatter-64 CQE in a ring of 64-byte CQEs")
		return false
	default: // prm.CQEFormatCompressed
		blueflame.OwnershipBarrier() // the title's other bytes after its op_own
		if reason := cq.expand(pos, cq.released()+cq.mask+1-pos); reason != "" {
			cq.corrupt(pos, op, reason)
			return false
		}
		return true
	}
}

// corrupt stops the poller before slot pos.
func (cq *CQ) corrupt(pos uint32, op uint8, reason string) {
	cq.state |= stateStopped
	cq.setErr(fmt.Errorf("monocq: poll CQ 0x%x: slot %d (consumer index %d, op_own 0x%02x): %s: %w",
		cq.cqn, pos&cq.mask, pos, op, reason, ErrCorrupt))
}

func (cq *CQ) setErr(err error) {
	if cq.err == nil {
		cq.err = err
	}
}

// Next returns the next CQE that Ready found and moves the consumer index
// past it, or nil when they are used up. It is small enough to be inlined
// into the caller's loop and makes no call.
func (cq *CQ) Next() *CQE {
	st := cq.state
	if st&statePending == 0 {
		return nil
	}
	i := cq.ci
	cq.ci = i + 1
	cq.state = st + (1<<stateTaken - 1)
	return (*CQE)(unsafe.Add(cq.ring, uintptr(i&cq.mask)<<(cq.shift&63)))
}

// Release gives the slots of the CQEs Next returned back to the device:
// it writes the big-endian consumer index (24 bits) to doorbell record word
// 0, as rdma-core's update_cons_index does once per poll. A *CQE must not be
// used after Release.
func (cq *CQ) Release() {
	cq.state &= 1<<stateTaken - 1
	prm.Store32(unsafe.Add(cq.dbrec, prm.CQDoorbellRecordCI*4), cq.ci&prm.CQConsumerIndexMask)
}

// Poll hands up to max CQEs to fn and releases their slots; it returns the
// number handed over. An empty ring costs no call: Poll looks at the next
// slot's owner byte itself before calling Ready. Neither does one CQE with
// max 1: when nothing an earlier Ready found is pending, everything taken
// is released, the poller is not stopped, the slot is software's with a
// format that needs no check (plain or scatter-32) and the ring is not full
// (the test of Ready's overrun check), Poll issues the ownership barrier
// and hands the slot over itself; any other case goes through Ready. The
// batch counts as taken while fn runs (Next returns nil inside fn).
//
// fn must not call Poll, All, Release or Arm of the same CQ: the batch is
// taken whole before fn runs and released after it, so a nested poll hands
// CQEs over twice, and a Release or Arm inside gives the device slots fn
// has not seen yet. Discard does nothing inside a poll.
//
// fn must not be nil. Poll does not look: the test, though folded away
// for a function literal, changes how the caller's loop is compiled
// (BenchmarkPostPoll takes a cycle longer). A nil fn panics as a call of a
// nil function does, with the CQE it would have handed over taken and the
// CQ unusable. transport.Poller.Poll, the layer above, refuses a nil fn.
//
// Poll is inlined, and so is fn when it is a function literal at the call
// site. Its body is a closure that Poll calls at once; the compiler counts
// that call as an ordinary call when it sizes Poll (the closure is larger
// than twice the inlining budget), and inlines the closure at Poll's call
// site under its larger budget for closures called once. TestInlining
// checks that this still holds.
func (cq *CQ) Poll(max int, fn func(*CQE)) int {
	return func() int {
		if cq.state == 0 {
			// Nothing pending, taken or stopped: look at the slot of ci.
			// Nothing read here stays live past the call to Ready below,
			// so the compiler need not save it on the stack first.
			ring, mask, shift, i := cq.ring, cq.mask, cq.shift&63, cq.ci
			c := (*CQE)(unsafe.Add(ring, uintptr(i&mask)<<shift))
			op := prm.LoadOpOwn(unsafe.Pointer(c))
			if !sw(op, i, mask+1) {
				return 0
			}
			if max == 1 && op&(prm.CQEFormatScatter64<<prm.CQEFormatShift) == 0 &&
				!ownerAgrees(*(*uint8)(unsafe.Add(ring, uintptr((i+mask)&mask)<<shift+prm.CQEOpOwn)), i+mask, mask+1) {
				// One CQE: what Ready would find and check, without the
				// call. The ring-full test looks at the owner bit alone:
				// a slot whose owner bit says full but whose opcode is
				// INVALID (never written, as a ring can start) goes to
				// Ready, which tells the two apart. The state stays 0,
				// as if the CQE were taken and released already: that
				// changes nothing Next or Ready could do inside fn,
				// since the device cannot write the slot before the
				// doorbell record below says so.
				blueflame.OwnershipBarrier()
				i++
				cq.ci = i
				fn(c)
				prm.Store32(unsafe.Add(cq.dbrec, prm.CQDoorbellRecordCI*4), i&prm.CQConsumerIndexMask)
				return 1
			}
		}
		cq.Ready(max)
		ring, mask, shift, i := cq.ring, cq.mask, cq.shift&63, cq.ci
		n := uint32(cq.state) & statePending // CQEs an earlier Ready found count too
		if max < int(n) {
			n = uint32(max &^ (max >> 63)) // max, or 0 if negative
		}
		cq.take(n)
		for end := i + n; i != end; i++ {
			fn((*CQE)(unsafe.Add(ring, uintptr(i&mask)<<shift)))
		}
		cq.Release()
		return int(n)
	}()
}

// All returns an iterator over one batch: Ready(max), every CQE found, then
// Release, also when the loop body breaks early (the CQEs not reached stay
// ready for the next batch). An empty ring costs no call. Both the iterator
// and the loop body are inlined into the range statement. The batch counts
// as taken while the body runs (Next returns nil inside it); the body must
// not call Poll, All, Release or Arm of the same CQ (see Poll).
func (cq *CQ) All(max int) iter.Seq[*CQE] {
	return func(yield func(*CQE) bool) {
		if cq.state == 0 {
			i := cq.ci
			if !sw(prm.LoadOpOwn(unsafe.Add(cq.ring, uintptr(i&cq.mask)<<(cq.shift&63))), i, cq.mask+1) {
				return
			}
		}
		cq.Ready(max)
		ring, mask, shift, i := cq.ring, cq.mask, cq.shift&63, cq.ci
		n := uint32(cq.state) & statePending
		if max < int(n) {
			n = uint32(max &^ (max >> 63)) // max, or 0 if negative
		}
		cq.take(n)
		end := i + n
		for i != end {
			c := (*CQE)(unsafe.Add(ring, uintptr(i&mask)<<shift))
			i++
			if !yield(c) {
				break
			}
		}
		// The CQEs the body did not reach are pending again.
		cq.ci = i
		cq.state += uint64(end - i)
		cq.Release()
	}
}

// Discard removes from the ring the CQEs the device has handed over for
// which drop reports true, as rdma-core's mlx5_cq_clean does for a queue
// pair that goes to RESET or is destroyed: the CQEs kept move up over the
// slots of those removed, in their order, and the consumer index moves past
// as many slots as were removed (released to the device at once), so that
// the next poll hands over exactly the CQEs kept. It returns how many it
// removed. A compressed session in the ring is expanded first, as a poll
// would.
//
// Discard is for the control plane: it scans every ready slot. Call it on
// the owner's goroutine between polls; during a batch (InBatch: inside
// Poll's function, its one-CQE path's included, or an All loop, or after
// Next without Release) it removes nothing and returns 0, as it does for a
// nil drop and a zero CQ (not made by New). drop must not poll.
func (cq *CQ) Discard(drop func(*CQE) bool) int {
	if drop == nil || cq.dbrec == nil || cq.InBatch() {
		return 0
	}
	n := uint32(cq.Ready(int(cq.mask + 1)))
	size := uintptr(1) << (cq.shift & 63)
	pad := size - prm.CQE64Size // a 128-byte entry's first half
	entry := func(c *CQE) []byte {
		return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(c), -int(pad))), size)
	}
	removed := uint32(0)
	for pos := cq.ci + n; pos != cq.ci; {
		pos--
		c := cq.slot(pos)
		if drop(c) {
			removed++
			continue
		}
		if removed == 0 {
			continue
		}
		// The slot it moves to is software's too (it was ready): it keeps
		// the owner bit of its own lap.
		dst := cq.slot(pos + removed)
		own := dst[prm.CQEOpOwn] & prm.CQEOwnerMask
		copy(entry(dst), entry(c))
		dst[prm.CQEOpOwn] = dst[prm.CQEOpOwn]&^prm.CQEOwnerMask | own
	}
	if removed > 0 {
		// The moved CQEs must reach memory before any consumer index
		// that hands their slots back to the device: this one, or a
		// later Release after they are polled (rdma-core's
		// __mlx5_cq_clean issues udma_to_device_barrier before
		// update_cons_index). On arm64 stores to ordinary memory are
		// not kept in order without it.
		blueflame.StoreBarrier()
		cq.take(removed)
		cq.Release()
	}
	return int(removed)
}

// InBatch reports whether the CQ is inside a poll: CQEs are taken and not
// yet released (inside Poll's function or an All loop, or after Next
// without Release). Poll's one-CQE path takes none while its function
// runs; it writes the doorbell record after the function, which until then
// holds the consumer index before the CQE, and InBatch reads it for that
// case. Discard does nothing inside a poll. A zero CQ (not made by New) is
// in none.
func (cq *CQ) InBatch() bool {
	return cq.state>>stateTaken != 0 || cq.dbrec != nil &&
		prm.Load32(unsafe.Add(cq.dbrec, prm.CQDoorbellRecordCI*4)) != cq.ci&prm.CQConsumerIndexMask
}

// Arm asks the device for an event on the next completion (any, or only a
// solicited one) after the current consumer index. It releases the CQEs
// taken so far, writes the arm word sn<<28 | cmd | ci (sn the arm sequence
// number mod 4) to doorbell record word 1, and then, between the
// write-combining barriers of rdma-core's mlx5_arm_cq, stores the arm word
// and the CQN as one big-endian 64-bit value to the UAR doorbell.
func (cq *CQ) Arm(solicitedOnly bool) error {
	if cq.uar == nil {
		return fmt.Errorf("monocq: arm CQ 0x%x: %w", cq.cqn, ErrNoUAR)
	}
	cq.Release()
	cmd := uint32(prm.CQArmAny)
	if solicitedOnly {
		cmd = prm.CQArmSolicited
	}
	w := (cq.armSN&prm.CQArmSNMask)<<prm.CQArmSNShift | cmd | cq.ci&prm.CQConsumerIndexMask
	prm.Store32(unsafe.Add(cq.dbrec, prm.CQDoorbellRecordArm*4), w)
	blueflame.WCStart()
	prm.Store64(unsafe.Add(cq.uar, prm.CQDoorbellOffset), uint64(w)<<32|uint64(cq.cqn))
	blueflame.FlushWrites()
	return nil
}

// AcknowledgeEvent advances the arm sequence number; call it once for every
// completion event received for this CQ (rdma-core's mlx5_cq_event), before
// arming again.
func (cq *CQ) AcknowledgeEvent() { cq.armSN++ }

// Err returns the first error the poller met: ErrCorrupt (the poller stopped)
// or ErrOverrun (the ring was found full), wrapped with the slot and index.
func (cq *CQ) Err() error { return cq.err }

// ConsumerIndex returns the free-running consumer index: the number of CQEs
// Next has returned since the CQ was created.
func (cq *CQ) ConsumerIndex() uint32 { return cq.ci }

// CQN returns the completion queue number.
func (cq *CQ) CQN() uint32 { return cq.cqn }

// CQECnt returns the number of slots in the ring.
func (cq *CQ) CQECnt() uint32 { return cq.mask + 1 }

// cqStats counts the compressed sessions expanded and the CQEs they held.
type cqStats struct {
	CompressedSessions uint64
	MiniCQEs           uint64
}

// stats returns the compression counters.
func (cq *CQ) stats() cqStats {
	return cqStats{CompressedSessions: cq.sessions, MiniCQEs: cq.miniCQEs}
}
