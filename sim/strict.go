package sim

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
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
)

var violationNames = [...]string{"", "ds", "doorbell-endian", "doorbell-backwards", "doorbell-past-ring",
	"wqe-index", "qpn", "opcode", "wqe-beyond-producer", "cq-doorbell", "receive", "blueflame"}

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
