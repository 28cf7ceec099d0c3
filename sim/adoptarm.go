package sim

import (
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// Arming an adopted CQ. libmlx5 and the kit's poller arm a CQ by writing
// the arm word of its doorbell record (sn << 28 | command | consumer
// index) and then the same word, with the CQN, to the CQ doorbell of a
// UAR page. Every CQ of a context shares that doorbell, so a model that
// watched it would lose an arm overwritten by another CQ's before the
// engine looked; the record is the CQ's own. The engine takes a change of
// the record's arm word as an arm. A first arm with sequence number 0 and
// consumer index 0 writes all zeros, which is what the library
// initialises the record with, so the model marks the word when it adopts
// the CQ with a value no arm carries (bits 25-27 and 30-31 set).

// armRecordUnarmed is the arm word the model leaves in an adopted CQ's
// doorbell record: no arm has those bits.
const armRecordUnarmed = 0xffffffff

// markUnarmed writes armRecordUnarmed to the arm word of a doorbell
// record.
func markUnarmed(db unsafe.Pointer) {
	atomic.StoreUint32((*uint32)(unsafe.Add(db, prm.DoorbellRecordSendB)), armRecordUnarmed)
}

// takeRecordArm takes an arm written to an adopted CQ's doorbell record
// since the last look. An arm behind the producer raises the event at
// once as an arm through the UAR does (armBehind). The arm sequence number is not
// checked: the events are read outside the model (libibverbs reads the
// completion channel), so the model cannot count them.
func (f *Fabric) takeRecordArm(c *cq) {
	raw := atomic.LoadUint32((*uint32)(unsafe.Add(c.db, prm.DoorbellRecordSendB)))
	if raw == c.lastRecArm {
		return
	}
	c.lastRecArm = raw
	word := bits.ReverseBytes32(raw)
	c.armed = true
	c.armSolicited = word&prm.CQArmSolicited != 0
	c.lastArm = word
	c.armBehind(word)
}
