package sim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/names"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// ViolationKind classifies a strict-mode violation.
type ViolationKind uint8

// Violation kinds.
const (
	// ViolationDS: the ds count of a control segment disagrees with the
	// segments that follow (too small for the opcode, an inline segment
	// running past it, a zero data segment where the builder would have
	// ended the WQE, or a WQE larger than the QP was created for).
	ViolationDS ViolationKind = iota + 1
	// ViolationDoorbellEndian: a doorbell record holds a value only a
	// little-endian store would produce (bits above the index are set).
	ViolationDoorbellEndian
	// ViolationDoorbellBackwards: a producer index moved backwards.
	ViolationDoorbellBackwards
	// ViolationDoorbellPastRing: a producer index moved more than the ring
	// holds past what the model has consumed.
	ViolationDoorbellPastRing
	// ViolationWQEIndex: the WQE index in the control segment is not the
	// producer index the WQE sits at.
	ViolationWQEIndex
	// ViolationQPN: the QPN in the control segment is not the QP's.
	ViolationQPN
	// ViolationOpcode: an opcode the QP's transport does not allow, or one
	// the model does not know, or a bad opcode modifier.
	ViolationOpcode
	// ViolationWQEBeyondProducer: the WQE's size runs past the producer
	// index the doorbell record announced.
	ViolationWQEBeyondProducer
	// ViolationCQDoorbell: a CQ consumer index or arm doorbell that cannot be
	// right (ahead of the producer, wrong CQN, disagreeing arm words, an arm
	// sequence number that is not the count of events read modulo 4).
	ViolationCQDoorbell
	// ViolationReceive: a receive WQE entry with a zero byte count that is
	// not the InvalidLKey terminator (the device reads it as 2 GiB; posting
	// code skips empty entries), or with bit 31 of its byte count set (the
	// count has 31 bits; the model reads the low 31).
	ViolationReceive
	// ViolationBlueFlame: bytes written to a BlueFlame buffer differ from
	// the WQE in the ring that their control segment names (checked in
	// Manual mode, where every post is complete when the model looks).
	ViolationBlueFlame
	// ViolationDoorbellRecordOnly: a send queue's producer index advanced
	// in its doorbell record with no write to its doorbell register (the
	// 8-byte doorbell or BlueFlame copy to the UAR page) since. A ConnectX
	// fetches send WQEs when the register is written; the record alone
	// leaves them in the ring until the next doorbell. Receive queues and
	// SRQs have only a record and are not checked (see checkRung).
	ViolationDoorbellRecordOnly
)

var violationNames = [...]string{"", "ds", "doorbell-endian", "doorbell-backwards", "doorbell-past-ring",
	"wqe-index", "qpn", "opcode", "wqe-beyond-producer", "cq-doorbell", "receive", "blueflame",
	"doorbell-record-only"}

// String returns a short name of the kind.
func (k ViolationKind) String() string { return names.Of(k, violationNames[:], "ViolationKind") }

// Violation is one recorded format violation.
type Violation struct {
	Kind ViolationKind
	// QPN, CQN and SRQN name the queue (0 when not applicable).
	QPN, CQN, SRQN uint32
	// WQEIndex is the producer index of the offending WQE, when there is one.
	WQEIndex uint16
	// Detail says what was seen and what was expected.
	Detail string
}

// Error formats the violation; a Violation is usable as an error.
func (v Violation) Error() string {
	s := "sim: strict: " + v.Kind.String()
	switch {
	case v.QPN != 0:
		s += fmt.Sprintf(" qpn=%#x wqe=%d", v.QPN, v.WQEIndex)
	case v.CQN != 0:
		s += fmt.Sprintf(" cqn=%#x", v.CQN)
	case v.SRQN != 0:
		s += fmt.Sprintf(" srqn=%#x", v.SRQN)
	}
	return s + ": " + v.Detail
}

// violate records a violation (f.mu held). It reports whether the model
// should treat it as fatal for the WQE at hand.
func (f *Fabric) violate(v Violation) bool {
	if !f.opts.Strict {
		return false
	}
	if len(f.violations) < maxViolations {
		f.violations = append(f.violations, v)
	}
	f.stats.Violations++
	if f.opts.StrictFatal {
		f.fatal = true
		return true
	}
	return false
}

// maxViolations bounds the violations kept; Stats.Violations counts all.
const maxViolations = 1024

// Violations returns the violations recorded so far (the first 1024; Stats
// counts every one).
func (f *Fabric) Violations() []Violation {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Violation(nil), f.violations...)
}

// clearViolations forgets the recorded violations (and the fatal state of
// StrictFatal).
func (f *Fabric) clearViolations() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.violations = nil
	f.fatal = false
}

// CheckViolations returns nil when no violation has been recorded, and
// otherwise an error joining them (tests call it at the end, the way a
// device's error counters would be read).
func (f *Fabric) CheckViolations() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stats.Violations == 0 {
		return nil
	}
	errs := make([]error, 0, len(f.violations)+1)
	for _, v := range f.violations {
		errs = append(errs, v)
	}
	if n := f.stats.Violations - uint64(len(f.violations)); n > 0 {
		errs = append(errs, fmt.Errorf("sim: strict: %d more violations", n))
	}
	return errors.Join(errs...)
}

// checkBlueFlame compares what was written to the QP's BlueFlame buffers
// since the last look with the WQEs in the ring: each changed buffer must
// hold the first bytes (8 for a doorbell-only write, the whole WQE up to the
// buffer size for a BlueFlame copy) of the WQE its control segment names,
// taken from the ring with wrap-around.
//
// Only the first 8 bytes are sure to come from the last write: when several
// WQEs were posted since the last look, a doorbell-only write may have
// landed on a buffer that an earlier BlueFlame copy filled, and the bytes
// after the first 8 are then that earlier WQE's. The whole WQE is compared
// only when the one WQE the buffer names is all that was posted since.
//
// The guard is a function of its own, small enough to be inlined in
// scanQP: an engine's rounds (not Manual) skip the check without a call.
func (f *Fabric) checkBlueFlame(q *qp) {
	if f.opts.Strict && f.opts.Mode == Manual && q.bf != nil {
		f.compareBlueFlame(q)
	}
}

// compareBlueFlame is checkBlueFlame's comparison.
func (f *Fabric) compareBlueFlame(q *qp) {
	if q.sharedBF {
		f.checkSharedBlueFlame(q)
		return
	}
	cur := unsafe.Slice((*byte)(q.bf), 2*bfSize)
	if q.bfSnap == nil {
		q.bfSnap = make([]byte, 2*bfSize)
	}
	// Both buffers at once: in the rounds without a post (most of
	// them) one comparison says so.
	if bytes.Equal(cur, q.bfSnap) {
		return
	}
	var want [bfSize]byte
	for half := 0; half < 2; half++ {
		now := cur[half*bfSize : (half+1)*bfSize]
		old := q.bfSnap[half*bfSize : (half+1)*bfSize]
		if bytes.Equal(now, old) {
			continue
		}
		// Whether a byte after the first 8 changed: a write longer
		// than a doorbell.
		long := !bytes.Equal(now[8:], old[8:])
		copy(old, now)
		idx := uint16(prm.Load32(unsafe.Pointer(&now[0])) >> prm.CtrlWQEIndexShift)
		r := q.sqWQE(idx)
		n := 8
		if long {
			ds := int(prm.Load32(unsafe.Pointer(&now[prm.CtrlQPNDS])) & prm.CtrlDSMask)
			// The doorbell record names the producer index after the
			// WQEs posted since the last look.
			pi := uint16(bits.ReverseBytes32(atomic.LoadUint32((*uint32)(unsafe.Add(q.db, prm.DoorbellRecordSendB)))))
			if idx == q.sqPI && pi-q.sqPI == uint16(prm.WQEBBs(ds)) {
				n = min(align(ds*prm.SegmentSize, prm.WQEBBSize), bfSize)
			}
		}
		r.copyOut(want[:n], 0)
		if !bytes.Equal(now[:n], want[:n]) {
			f.violate(Violation{Kind: ViolationBlueFlame, QPN: q.qpn, WQEIndex: idx,
				Detail: fmt.Sprintf("BlueFlame buffer %d holds %d bytes that differ from WQE %d in the ring", half, n, idx)})
		}
	}
}

// doorbellGrace is how long, in Engine mode, a send doorbell record may be
// ahead of the doorbell register before checkRung reports it. A correct
// post writes the record and then the register a few instructions later,
// and the engine may read the record between the two stores; a poster
// preempted there keeps the register unwritten for as long as it waits
// for a processor. In Manual mode every post is complete when the model
// looks, and the report is made at once.
const doorbellGrace = time.Second

// watchRegister makes the model watch the doorbell register at reg, whose
// two buffers start at reg and reg+size (size 0: one 8-byte doorbell
// location), for q's send queue (f.mu held): what it holds now is taken as
// seen. A nil reg stops the watch, and releases what StrictFatal held back.
func (q *qp) watchRegister(reg unsafe.Pointer, size uint32) {
	q.reg, q.regSize, q.unrung = reg, uintptr(size), false
	if reg != nil {
		q.regSeen = q.registerWords()
	}
	// The next scan reads the record again (scanQP).
	q.lastSQRaw = ^q.lastSQRaw
}

// registerWords returns the first 8 bytes of each of the register's
// buffers: every register write, an 8-byte doorbell or a BlueFlame copy,
// stores the first 8 bytes of a WQE's control segment (the WQE index,
// opcode, QPN and ds) there, so a write changes them.
func (q *qp) registerWords() [2]uint64 {
	return [2]uint64{atomic.LoadUint64((*uint64)(q.reg)), atomic.LoadUint64((*uint64)(unsafe.Add(q.reg, q.regSize)))}
}

// announces reports whether one of the register words w names q and a WQE
// that ends at the producer index the record holds: what a write for the
// post that moved the record stores. A write leaves the words unchanged
// when it stores what they held, which takes a WQE index used before: the
// same post again after the QP went through RESET (its producer index
// starts at 0 again), where a kit that also starts its buffer toggle again
// writes the very bytes of its first post before the reset.
func (q *qp) announces(w [2]uint64) bool {
	for _, x := range w {
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], x)
		idx := uint16(binary.BigEndian.Uint32(b[:]) >> prm.CtrlWQEIndexShift)
		qpnDS := binary.BigEndian.Uint32(b[prm.CtrlQPNDS:])
		if qpnDS>>prm.CtrlQPNShift == q.qpn && idx+uint16(prm.WQEBBs(int(qpnDS&prm.CtrlDSMask))) == q.sqPI {
			return true
		}
	}
	return false
}

// checkRung is strict mode's look at the doorbell register of q's send
// queue (f.mu held), called by scanQP when the doorbell record moved the
// producer index from old to q.sqPI, or moved it earlier with no register
// write seen since (q.unrung). raw is the record as read.
//
// A register write since the last look (its words changed, or one of them
// names the WQE that ends at the record: announces) announces whatever
// the record holds: q.sqPI stands and q.unrung clears. Without
// one, the record moved on its own: a ConnectX would not fetch the WQEs
// (rdma-core's post_send_db and the kit's blueflame post write the record
// and then the register; the device starts on the register write). The
// model reports ViolationDoorbellRecordOnly, in Manual mode at once and
// in Engine mode once the record has been ahead for doorbellGrace (see
// there), and each later advance again. In Strict mode it executes the
// WQEs all the same, as it executes a WQE with a wrong index or QPN, so a
// run goes on to report everything it finds; in StrictFatal mode it holds
// them back, as a ConnectX leaves them in the ring, until a register
// write is seen (then it executes them), and RunUntilIdle and Step
// return ErrViolation once the report is made. Until a register write
// is seen, every scan looks again: scanQP compares the record with a
// value it cannot equal.
//
// With a register that several QPs share (the model's doorbell-only one
// beyond Options.BlueFlameRegisters, or a bfreg libmlx5 shares), another
// QP's write counts as one for q: only the last write stays visible, so
// the model cannot tell whose it was, and it reports nothing rather than
// blame a QP whose doorbell was overwritten.
func (f *Fabric) checkRung(q *qp, raw uint32, old uint16) {
	if w := q.registerWords(); w != q.regSeen || q.announces(w) {
		q.regSeen, q.unrung = w, false
		return
	}
	if !q.unrung {
		q.unrung, q.rungPI, q.reportedPI, q.unrungAt = true, old, old, f.now()
	}
	if q.sqPI != q.reportedPI && (f.opts.Mode == Manual || f.now()-q.unrungAt >= int64(doorbellGrace)) {
		f.violate(Violation{Kind: ViolationDoorbellRecordOnly, QPN: q.qpn, WQEIndex: q.reportedPI,
			Detail: fmt.Sprintf("send doorbell record moved from %d to %d with no doorbell register write since (a ConnectX fetches send WQEs on the register write)",
				q.reportedPI, q.sqPI)})
		q.reportedPI, q.unrungAt = q.sqPI, f.now()
	}
	if f.opts.StrictFatal {
		q.sqPI = q.rungPI
	}
	q.lastSQRaw = ^raw
}
