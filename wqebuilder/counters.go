package wqebuilder

import "unsafe"

// SendCounters counts what a SendQueue posted since EnableCounters.
type SendCounters struct {
	// Posts is the number of WQEs finished (Finish and FinishBlueFlame).
	Posts uint64
	// BlueFlameCopies is the number of FinishBlueFlame calls that copied
	// their WQE to the BlueFlame register.
	BlueFlameCopies uint64
	// Doorbells is the number of doorbell-only rings: FinishBlueFlame
	// calls that stored only the WQE's first 8 bytes (a batch, a WQE larger
	// than the BlueFlame buffer, a queue without one) and RingDoorbell calls
	// that published something.
	Doorbells uint64
}

// EnableCounters makes the queue count its posts and doorbells from now
// on. It sets a bit in the word the post already checks for a closed
// queue, so a queue that never counts pays nothing; a counting queue's
// Finish and RingDoorbell take a path that is a call away (a few
// nanoseconds). Like posting, it is the owner's call.
func (q *SendQueue) EnableCounters() {
	if q.counters == nil {
		q.counters = new(SendCounters)
	}
	q.closed.Or(countingBit)
}

// Counters returns what the queue counted; all zero when counting was
// never enabled. It does not allocate. Like posting, it is the owner's
// call (read from another goroutine, the numbers may be torn).
func (q *SendQueue) Counters() SendCounters {
	if q.counters == nil {
		return SendCounters{}
	}
	return *q.counters
}

// finishFlagged is finish for a WQE that refused turned down: it returns
// the failure of one that must not be finished, and otherwise (the queue
// only counts) finishes it as finish does and counts it.
//
//go:noinline
func (w wqe) finishFlagged(post bool) error {
	q := w.q
	if w.st&stErrMask != 0 || uintptr(w.ctrl) != q.open || q.closed.Load()&closedBit != 0 || q.counters == nil {
		return w.failure()
	}
	alone := q.rung == q.pi
	pi := w.commit()
	q.open = 0
	c := q.counters
	c.Posts++
	if !post {
		return nil
	}
	q.rung = pi
	n := w.blueFlameBytes(alone)
	q.db.Post(uint32(pi), w.ctrl, n)
	if n > 0 && uint32(n) <= q.db.Size() {
		c.BlueFlameCopies++
	} else {
		c.Doorbells++
	}
	return nil
}

// ringFlagged is RingDoorbell for a queue whose closed word is set: a
// closed queue rings nothing, a counting one rings and counts.
//
//go:noinline
func (q *SendQueue) ringFlagged() {
	if q.closed.Load()&closedBit != 0 {
		return
	}
	q.db.Ring(uint32(q.pi), unsafe.Pointer(&q.lastDB))
	q.rung = q.pi
	if q.counters != nil {
		q.counters.Doorbells++
	}
}
