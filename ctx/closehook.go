package ctx

// addOnClose arranges for f to run when n closes, or runs it now when n is
// closed already; either way with t.mu held.
func (n *node) addOnClose(f func()) {
	n.t.mu.Lock()
	defer n.t.mu.Unlock()
	if n.closed.Load() {
		f()
		return
	}
	n.onClose = append(n.onClose, f)
}

// runOnClose runs and forgets the functions given to addOnClose; t.mu is
// held.
func (n *node) runOnClose() {
	hooks := n.onClose
	n.onClose = nil
	for _, f := range hooks {
		f()
	}
}

// OnClose arranges for f to run when the QP closes, directly or with a
// parent (a CQ, its SRQ, its PD, the Context), on the goroutine that
// closes it: after Closed starts to report true and before the provider
// destroys the QP. A QP closed already runs f at once. f runs with the
// Context's lock held and must not call into this Context; it is meant to
// stop the data plane built on the QP, from whichever goroutine closes it
// (the transports close their send queue, wqebuilder.SendQueue.Close, with
// it).
func (qp *QueuePair) OnClose(f func()) { qp.addOnClose(f) }

// OnClose arranges for f to run when the SRQ closes, directly or with a
// parent, as QueuePair.OnClose.
func (s *SharedReceiveQueue) OnClose(f func()) { s.addOnClose(f) }
