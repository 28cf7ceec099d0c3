package transport

import (
	"fmt"
	"strconv"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// ErrorCounts counts error completions by their syndrome.
type ErrorCounts struct {
	// Total is the number of error completions.
	Total uint64
	// bySyndrome[s] counts syndrome s; a syndrome past the array counts in
	// [0], which no syndrome uses.
	bySyndrome [prm.SyndromeRemoteAborted + 1]uint64
}

// add counts one error completion of syndrome s.
func (e *ErrorCounts) add(s prm.Syndrome) {
	e.Total++
	if int(s) < len(e.bySyndrome) {
		e.bySyndrome[s]++
	} else {
		e.bySyndrome[0]++
	}
}

// Syndrome returns the number of error completions with syndrome s (0 for
// a syndrome the kit does not know: see Other).
func (e *ErrorCounts) Syndrome(s prm.Syndrome) uint64 {
	if s == 0 || int(s) >= len(e.bySyndrome) {
		return 0
	}
	return e.bySyndrome[s]
}

// Other returns the number of error completions whose syndrome is none of
// the kit's (above REMOTE_ABORTED_ERR).
func (e *ErrorCounts) Other() uint64 { return e.bySyndrome[0] }

// All yields the syndromes counted at least once with their counts, in
// syndrome order (the unknown ones are in Other). It does not allocate.
func (e *ErrorCounts) All(yield func(prm.Syndrome, uint64) bool) {
	for s := 1; s < len(e.bySyndrome); s++ {
		if n := e.bySyndrome[s]; n != 0 && !yield(prm.Syndrome(s), n) {
			return
		}
	}
}

// MarshalJSON writes the counts as an object: "total", one member per
// syndrome counted, named as prm.Syndrome.String does
// ("REMOTE_ACCESS_ERR"), and "other" when some syndrome was unknown.
func (e ErrorCounts) MarshalJSON() ([]byte, error) {
	b := append([]byte(`{"total":`), strconv.FormatUint(e.Total, 10)...)
	for s, n := range e.All {
		b = append(b, ',')
		b = strconv.AppendQuote(b, s.String())
		b = append(b, ':')
		b = strconv.AppendUint(b, n, 10)
	}
	if e.Other() != 0 {
		b = append(b, `,"other":`...)
		b = strconv.AppendUint(b, e.Other(), 10)
	}
	return append(b, '}'), nil
}

// QueueCounters is a snapshot of what one queue pair counted since
// Queue.EnableCounters.
type QueueCounters struct {
	// Posts, BlueFlameCopies and Doorbells count the send queue's posts
	// (see wqebuilder.SendCounters).
	wqebuilder.SendCounters
	// SendCompletions and RecvCompletions count the queue's completions,
	// successful or not, as the Pollers it was added to handed them over.
	SendCompletions uint64
	RecvCompletions uint64
	// Errors counts its error completions by syndrome (flushes included).
	Errors ErrorCounts
	// RetriesCounted says whether the provider counts the queue pair's
	// retries: the software HCA does; the hardware provider does not read
	// the NIC's counters (rdma statistic, hw_counters), so RNRRetries and
	// TransportRetries stay 0 there.
	RetriesCounted bool
	// RNRRetries counts the requests sent again after an RNR NAK;
	// TransportRetries the ones sent again after the local ACK timeout.
	RNRRetries       uint64
	TransportRetries uint64
}

// queueCounts is what a counting Queue keeps of its own.
type queueCounts struct {
	sendCompletions, recvCompletions uint64
	errors                           ErrorCounts
	// sendBefore is what the send queues before the last Reset counted.
	sendBefore wqebuilder.SendCounters
}

// addSend adds a retired send queue's counts to sendBefore.
func (q *queueCounts) addSend(c wqebuilder.SendCounters) {
	q.sendBefore.Posts += c.Posts
	q.sendBefore.BlueFlameCopies += c.BlueFlameCopies
	q.sendBefore.Doorbells += c.Doorbells
}

// EnableCounters makes the queue pair count from now on: its posts and
// doorbells (in its send queue), and its completions and errors in every
// Poller it is or will be added to, which then calls Poller.count for each
// completion (a call off the inlined path). A queue pair that never
// enables counting costs nothing: the post checks the word it checks
// anyway for a closed queue, the poll the flag word it loads anyway.
// Counting outlives a Reset. It is the owner's call.
func (q *Queue) EnableCounters() {
	if q.counts == nil {
		q.counts = new(queueCounts)
	}
	if q.sq != nil {
		q.sq.EnableCounters()
	}
	if q.closer != nil {
		q.closer.mu.Lock()
		for _, p := range q.closer.pollers {
			p.reapFlag.Or(slowBit)
		}
		q.closer.mu.Unlock()
	}
}

// Counting reports whether EnableCounters was called.
func (q *Queue) Counting() bool { return q.counts != nil }

// Counters returns a snapshot of the queue pair's counters; all zero unless
// EnableCounters was called. It does not allocate; the retry counts are
// read from the provider (the software HCA takes its lock). It is the
// owner's call: read from another goroutine the numbers may be torn.
func (q *Queue) Counters() QueueCounters {
	var c QueueCounters
	if q.counts == nil {
		return c
	}
	c.SendCounters = q.counts.sendBefore
	if q.sq != nil {
		s := q.sq.Counters()
		c.Posts += s.Posts
		c.BlueFlameCopies += s.BlueFlameCopies
		c.Doorbells += s.Doorbells
	}
	c.SendCompletions, c.RecvCompletions = q.counts.sendCompletions, q.counts.recvCompletions
	c.Errors = q.counts.errors
	if q.qp != nil {
		c.RNRRetries, c.TransportRetries, c.RetriesCounted = q.qp.Retries()
	}
	return c
}

// count records completion wc of q.
func (q *queueCounts) count(wc *Completion) {
	if wc.IsSend() {
		q.sendCompletions++
	} else {
		q.recvCompletions++
	}
	if wc.Match == MatchError {
		q.errors.add(wc.Syndrome)
	}
}

// CQCounters is a snapshot of what one Poller counted since
// Poller.EnableCounters.
type CQCounters struct {
	// Polls counts the Poll calls, Completions the completions handed
	// over, EmptyPolls the Poll calls that found none.
	Polls, Completions, EmptyPolls uint64
	// UnknownQPN counts completions of a QPN no queue pair was added for.
	UnknownQPN uint64
	// Errors counts error completions by syndrome.
	Errors ErrorCounts
}

// String summarises the counters on one line.
func (c CQCounters) String() string {
	return fmt.Sprintf("%d completions in %d polls (%d empty), %d errors, %d of unknown QPNs",
		c.Completions, c.Polls, c.EmptyPolls, c.Errors.Total, c.UnknownQPN)
}

// EnableCounters makes the Poller count its polls, completions and errors
// (CQCounters) from now on (see Queue.EnableCounters). It is the owner's
// call.
func (p *Poller) EnableCounters() {
	if p.counts == nil {
		p.counts = new(CQCounters)
	}
	p.reapFlag.Or(slowBit)
}

// Counters returns a snapshot of the Poller's counters; all zero unless
// EnableCounters was called. It does not allocate. It is the owner's call.
func (p *Poller) Counters() CQCounters {
	if p.counts == nil {
		return CQCounters{}
	}
	return *p.counts
}

// Timestamps reports whether the Poller fills Completion.Timestamp: its
// CQ was created with ctx.CompletionQueueConfig.Timestamps.
func (p *Poller) Timestamps() bool { return p.stamps }

// Add adds the counts of o to e.
func (e *ErrorCounts) Add(o ErrorCounts) {
	e.Total += o.Total
	for i := range e.bySyndrome {
		e.bySyndrome[i] += o.bySyndrome[i]
	}
}

// Add adds the counts of o to c (for totals over several queue pairs);
// RetriesCounted stays true only if both counted.
func (c *QueueCounters) Add(o QueueCounters) {
	c.Posts += o.Posts
	c.BlueFlameCopies += o.BlueFlameCopies
	c.Doorbells += o.Doorbells
	c.SendCompletions += o.SendCompletions
	c.RecvCompletions += o.RecvCompletions
	c.Errors.Add(o.Errors)
	c.RNRRetries += o.RNRRetries
	c.TransportRetries += o.TransportRetries
	c.RetriesCounted = c.RetriesCounted && o.RetriesCounted
}
