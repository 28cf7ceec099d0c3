package sim

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// scanCQ reads the CQ's consumer index and arm doorbell and writes the
// delayed CQEs that fell due by the round's time (read only when there are
// any). It reports whether a CQE was written. It is small enough to be
// inlined into the round: what it finds to do is done out of line.
func (f *Fabric) scanCQ(c *cq) bool {
	if atomic.LoadUint32((*uint32)(c.db)) != c.lastCIRaw {
		f.checkConsumer(c)
	}
	f.takeArm(c)
	return len(c.pending) > 0 && f.releaseDue(c)
}

// checkConsumer checks a consumer index record that changed since the
// last look.
func (f *Fabric) checkConsumer(c *cq) {
	raw := atomic.LoadUint32((*uint32)(c.db))
	c.lastCIRaw = raw
	v := bits.ReverseBytes32(raw)
	if v > prm.CQConsumerIndexMask {
		f.violate(Violation{Kind: ViolationDoorbellEndian, CQN: c.cqn,
			Detail: fmt.Sprintf("consumer index record %#08x has bits above 24 set (little-endian store?)", v)})
	} else if ahead := (v - c.pi) & prm.CQConsumerIndexMask; ahead != 0 && ahead < 1<<23 {
		f.violate(Violation{Kind: ViolationCQDoorbell, CQN: c.cqn,
			Detail: fmt.Sprintf("consumer index %d is ahead of the %d CQEs written", v, c.pi&prm.CQConsumerIndexMask)})
	}
}

// releaseDue writes the delayed CQEs that fell due by the round's time.
func (f *Fabric) releaseDue(c *cq) bool {
	progressed := false
	for len(c.pending) > 0 && c.pending[0].due <= f.roundNow() {
		p := c.pending[0]
		c.pending[0] = pendingCQE{}
		c.pending = c.pending[1:]
		f.writeCQE(c, &p.img, p.scatter, p.q)
		progressed = true
	}
	return progressed
}

// takeArm processes an arm doorbell written to the CQ's UAR since the last
// look. A device sees that MMIO write as it lands, so the model takes it
// before every CQE it writes as well as on each scan: a CQE written right
// after an arm raises its event. The look is inlined; an arm is taken
// out of line.
func (f *Fabric) takeArm(c *cq) {
	if c.recordArm || atomic.LoadUint64((*uint64)(unsafe.Add(c.uar, prm.CQDoorbellOffset))) != 0 {
		f.takeArmWritten(c)
	}
}

// takeArmWritten takes the arm that takeArm saw written.
func (f *Fabric) takeArmWritten(c *cq) {
	if c.recordArm {
		f.takeRecordArm(c)
		return
	}
	armPtr := (*uint64)(unsafe.Add(c.uar, prm.CQDoorbellOffset))
	if rawArm := atomic.LoadUint64(armPtr); rawArm != 0 && atomic.CompareAndSwapUint64(armPtr, rawArm, 0) {
		f.arm(c, bits.ReverseBytes64(rawArm))
	}
}

// arm handles a write of the arm doorbell: v is (sn<<28 | cmd | ci) << 32
// | cqn, as the data plane stores it big-endian to the UAR.
func (f *Fabric) arm(c *cq, v uint64) {
	word := uint32(v >> 32)
	if cqn := uint32(v) & prm.CQEQPNMask; cqn != c.cqn {
		f.violate(Violation{Kind: ViolationCQDoorbell, CQN: c.cqn,
			Detail: fmt.Sprintf("arm doorbell names CQN %#x", cqn)})
	}
	if rec := prm.Load32(unsafe.Add(c.db, prm.DoorbellRecordSendB)); rec != word {
		f.violate(Violation{Kind: ViolationCQDoorbell, CQN: c.cqn,
			Detail: fmt.Sprintf("arm doorbell %#08x differs from the arm doorbell record %#08x", word, rec)})
	}
	// The arm sequence number counts the events consumed, as rdma-core's
	// arm_sn does: an arm that carries a stale one (an event read but not
	// acknowledged to the poller, or acknowledged twice) is a data-plane
	// bug the device would not report.
	if sn, want := word>>prm.CQArmSNShift&prm.CQArmSNMask, uint32(c.eventsRead.Load())&prm.CQArmSNMask; sn != want {
		f.violate(Violation{Kind: ViolationCQDoorbell, CQN: c.cqn,
			Detail: fmt.Sprintf("arm sequence number %d, want %d (%d events read)", sn, want, c.eventsRead.Load())})
	}
	c.armed = true
	c.armSolicited = word&prm.CQArmSolicited != 0
	c.lastArm = word
	c.armBehind(word)
}

// armBehind raises the event of an arm at once when a CQE the arm's
// consumer index has not passed was written after the last CQE an event
// reported: one written while the CQ was not armed, which no event has
// told the consumer of. A CQE that raised an event does not raise
// another: a program that arms after an event and before it polls (as
// perftest's latency tests and ibv_rc_pingpong do) gets its next event
// from the next CQE, as the ConnectX CQ context's last_notified_index
// suggests; docs/hardware.md, "Completion events". A solicited arm waits
// for the next solicited or error CQE.
func (c *cq) armBehind(word uint32) {
	if c.armSolicited {
		return
	}
	ci := word & prm.CQConsumerIndexMask
	if ci != c.pi&prm.CQConsumerIndexMask && c.pi != c.notified {
		c.fire()
	}
}

// fire raises the completion event of an armed CQ and disarms it; the
// CQEs written so far count as reported.
func (c *cq) fire() {
	if !c.armed {
		return
	}
	c.armed = false
	c.notified = c.pi
	if c.onEvent != nil {
		c.onEvent()
		return
	}
	if c.evfd < 0 {
		return
	}
	var b [8]byte
	*(*uint64)(unsafe.Pointer(&b)) = 1
	_, _ = unix.Write(c.evfd, b[:])
}

func (c *cq) nextDue() int64 {
	if len(c.pending) == 0 {
		return 0
	}
	return c.pending[0].due
}

func (c *cq) dropPendingFor(q *qp) {
	out := c.pending[:0]
	for _, p := range c.pending {
		if p.q != q {
			out = append(out, p)
		}
	}
	c.pending = out
}

// emitCQE queues or writes a CQE image. q is the QP the CQE belongs to (it
// goes to error with the CQ).
func (f *Fabric) emitCQE(c *cq, img *[prm.CQE64Size]byte, scatter []byte, q *qp) {
	if c == nil || c.closed {
		f.stats.LostCQEs++
		return
	}
	if c.delay > 0 || len(c.pending) > 0 {
		p := pendingCQE{due: f.now() + c.delay, img: *img, q: q}
		if scatter != nil {
			p.scatter = append([]byte(nil), scatter...)
		}
		if c.delay > 0 {
			f.stats.DelayedCQEs++
		}
		c.pending = append(c.pending, p)
		return
	}
	f.writeCQE(c, img, scatter, q)
}

// writeCQE copies the 60 bytes before the word with the owner bit in
// seven 8-byte words and a 4-byte one: it fails to compile unless that
// word starts at byte 60.
var (
	_ [prm.CQEWQECounter - 60]struct{}
	_ [60 - prm.CQEWQECounter]struct{}
)

// unconsumed returns how many CQEs the ring holds that the consumer has
// not released, and the consumer index its doorbell record holds.
func (c *cq) unconsumed() (used, ci uint32) {
	ci = bits.ReverseBytes32(atomic.LoadUint32((*uint32)(c.db))) & prm.CQConsumerIndexMask
	return (c.pi - ci) & prm.CQConsumerIndexMask, ci
}

// writeCQE writes one CQE into the ring unless the CQ is full or in error.
// The last four bytes (wqe_counter, signature, op_own) are stored last and
// atomically, so a poller that sees the new owner bit sees the whole CQE.
func (f *Fabric) writeCQE(c *cq, img *[prm.CQE64Size]byte, scatter []byte, q *qp) bool {
	if c.closed {
		f.stats.LostCQEs++
		return false
	}
	if c.errored {
		f.stats.LostCQEs++
		if q != nil && q.state != ctx.QPStateError {
			f.qpFatal(q, "completion queue in error")
		}
		return false
	}
	f.takeArm(c)
	if used, ci := c.unconsumed(); used >= c.cnt {
		c.errored = true
		c.errDetail = fmt.Sprintf("overrun: %d CQEs unconsumed in a ring of %d (consumer index %d)", used, c.cnt, ci)
		f.stats.CQOverruns++
		f.stats.LostCQEs++
		c.dev.postEvent(ctx.AsyncEvent{Type: ctx.EventCQError, CQN: c.cqn, Detail: c.errDetail})
		if q != nil {
			f.qpFatal(q, "completion queue overrun")
		}
		return false
	}
	slot := unsafe.Add(c.ring, (c.pi&(c.cnt-1))*c.size)
	cqe := unsafe.Add(slot, c.size-prm.CQE64Size)
	dst := unsafe.Slice((*byte)(cqe), prm.CQE64Size)
	// Everything before the word with the owner bit, word by word (an
	// array copy of 60 bytes is a call to memmove): seven 8-byte words
	// and a 4-byte one, each one load and one store (img need not be
	// aligned).
	le := binary.LittleEndian
	le.PutUint64(dst[0:], le.Uint64(img[0:]))
	le.PutUint64(dst[8:], le.Uint64(img[8:]))
	le.PutUint64(dst[16:], le.Uint64(img[16:]))
	le.PutUint64(dst[24:], le.Uint64(img[24:]))
	le.PutUint64(dst[32:], le.Uint64(img[32:]))
	le.PutUint64(dst[40:], le.Uint64(img[40:]))
	le.PutUint64(dst[48:], le.Uint64(img[48:]))
	le.PutUint32(dst[56:], le.Uint32(img[56:]))
	// An error CQE has no timestamp: its bytes 52..55 are the syndromes
	// (hw_err_synd, hw_synd_type, vendor_err_synd, syndrome).
	if c.timestamps && !prm.OpOwnOpcode(img[prm.CQEOpOwn]).IsError() {
		f.stamp(dst)
	}
	if scatter != nil {
		if c.size == prm.CQE128Size {
			copy(unsafe.Slice((*byte)(slot), prm.CQE64Size), scatter)
		} else {
			copy(dst[:32], scatter)
		}
	}
	// The owner bit is the lap's parity: bit log2(cnt) of pi (cnt is a
	// power of two).
	opOwn := img[prm.CQEOpOwn]&^prm.CQEOwnerMask | byte(boolBit(c.pi&c.cnt != 0, prm.CQEOwnerMask))
	// The last word from its fields (wqe_counter, signature, op_own), each
	// loaded with the width the CQE's builders store it with: one 4-byte
	// load of the three would wait for those stores to reach the cache
	// (no store-to-load forwarding across stores), about 2 ns a CQE.
	tail := uint32(le.Uint16(img[prm.CQEWQECounter:])) | uint32(img[prm.CQEWQECounter+2])<<16 | uint32(opOwn)<<24
	// The word with the owner bit last, with release order: a poller
	// that sees the bit sees the rest (no full fence, as a NIC's DMA
	// write has none for the CPU to wait on).
	storeRelease32((*uint32)(unsafe.Add(cqe, prm.CQEWQECounter)), tail)
	c.pi++
	if c.pi-c.notified > 1<<31 {
		// No event for 2^31 CQEs: keep the count of those unreported
		// exact (it is read modulo 2^32), the ring's worth.
		c.notified = c.pi - c.cnt
	}
	f.stats.CQEs++
	op := prm.OpOwnOpcode(opOwn)
	if op.IsError() {
		f.stats.ErrorCQEs++
		if prm.Syndrome(img[prm.ErrCQESyndrome]) == prm.SyndromeWRFlush {
			f.stats.Flushed++
		}
	}
	if c.armed && (!c.armSolicited || opOwn&prm.CQESolicitedMask != 0 || op.IsError()) {
		c.fire()
	}
	return true
}

// CQError returns nil while the CQ is healthy, and an error describing why
// it moved to error (an overrun) otherwise.
func (f *Fabric) CQError(cqn uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.cqs[cqn]
	if c == nil {
		return provider.Errorf("sim: CQ state", "CQN %#x: %w", cqn, ctx.ErrNotFound)
	}
	if c.errored {
		return provider.Errorf("sim: CQ state", "CQN %#x in error: %s", cqn, c.errDetail)
	}
	return nil
}

// InjectCQE writes a raw 64-byte CQE (its owner bit is set for the current
// lap) into the CQ as the next entry, for testing pollers against entries
// the model would not produce (an unknown QPN or syndrome). For 128-byte
// CQEs it fills the second half.
func (f *Fabric) InjectCQE(cqn uint32, img [prm.CQE64Size]byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.cqs[cqn]
	if c == nil {
		return provider.Errorf("sim: inject CQE", "CQN %#x: %w", cqn, ctx.ErrNotFound)
	}
	if !f.writeCQE(c, &img, nil, nil) {
		return provider.Errorf("sim: inject CQE", "CQN %#x: %w", cqn, ctx.ErrBusy)
	}
	return nil
}

// ---- CQE images ----

// reqCQE builds in b, zeroed, the requester completion of QP qpn's WQE of
// opcode op whose control segment's index is idx.
func reqCQE(b *[prm.CQE64Size]byte, qpn uint32, op prm.Opcode, idx uint16, byteCnt uint32) {
	p := unsafe.Pointer(b)
	prm.Store32(unsafe.Add(p, prm.CQEByteCnt), byteCnt)
	prm.Store32(unsafe.Add(p, prm.CQESopDropQPN), uint32(op)<<prm.CQESendOpShift|qpn)
	prm.Store16(unsafe.Add(p, prm.CQEWQECounter), idx)
	b[prm.CQEOpOwn] = prm.OpOwn(prm.CQEReq, prm.CQEFormatNone, false, 0)
}

// errCQE builds an error completion (struct mlx5_err_cqe), with the vendor
// syndrome a ConnectX writes beside synd where it is known
// (prm.VendorSyndromeOf).
func errCQE(op prm.CQEOpcode, qpn uint32, wqeOp prm.Opcode, counter uint16, synd prm.Syndrome, srqn uint32) [prm.CQE64Size]byte {
	var b [prm.CQE64Size]byte
	p := unsafe.Pointer(&b)
	prm.Store32(unsafe.Add(p, prm.ErrCQESRQN), srqn)
	b[prm.ErrCQEVendorSyndrome] = prm.VendorSyndromeOf(synd)
	b[prm.ErrCQESyndrome] = uint8(synd)
	prm.Store32(unsafe.Add(p, prm.ErrCQEWQEOpcodeQPN), uint32(wqeOp)<<prm.CQESendOpShift|qpn)
	prm.Store16(unsafe.Add(p, prm.CQEWQECounter), counter)
	b[prm.CQEOpOwn] = prm.OpOwn(op, prm.CQEFormatNone, false, 0)
	return b
}
