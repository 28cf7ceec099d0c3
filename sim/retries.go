package sim

// Retries returns the resends the QP scheduled after RNR NAKs and after
// ACK timeouts (ctx.QueuePair.Retries).
func (q *qp) Retries() (rnr, transport uint64) {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	return q.rnrRetries, q.transportRetries
}
