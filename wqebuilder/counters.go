package wqebuilder

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
// on. Counting costs a few instructions per post; a queue that never
// enables it pays one predictable branch. Like posting, it is the owner's
// call.
func (q *SendQueue) EnableCounters() {
	if q.counters == nil {
		q.counters = new(SendCounters)
	}
	q.counting = 1
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

// count records one finished WQE; post says it was FinishBlueFlame, n the
// bytes it asked to copy to the register (0: the 8-byte doorbell). The
// register's own size rule decides whether a copy happened.
//
//go:noinline
func (q *SendQueue) count(post bool, n int) {
	c := q.counters
	c.Posts++
	if !post {
		return
	}
	if n > 0 && uint32(n) <= q.db.Size() {
		c.BlueFlameCopies++
	} else {
		c.Doorbells++
	}
}
