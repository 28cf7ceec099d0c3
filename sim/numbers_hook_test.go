package sim

// The number spaces hold 2^24 numbers; the tests reach their end without
// issuing millions of objects by moving a space's never-issued numbers up
// to its last n, as if every number below had been issued and were still
// live.

func leaveNumbers(f *Fabric, s *numberSpace, n uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s.next = s.limit - n
}

// leaveKeys leaves n never-issued memory key indices.
func leaveKeys(f *Fabric, n uint32) { leaveNumbers(f, &f.keys, n) }

// leaveQPNs leaves n never-issued QPNs.
func leaveQPNs(f *Fabric, n uint32) { leaveNumbers(f, &f.qpns, n) }

// leaveCQNs leaves n never-issued CQNs.
func leaveCQNs(f *Fabric, n uint32) { leaveNumbers(f, &f.cqns, n) }

// leaveSRQNs leaves n never-issued SRQNs.
func leaveSRQNs(f *Fabric, n uint32) { leaveNumbers(f, &f.srqns, n) }
