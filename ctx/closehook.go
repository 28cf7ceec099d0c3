package ctx

import (
	"fmt"
	"slices"
)

// addOnClose arranges for f to run when n closes, or runs it now when n is
// closed already; either way with t.mu held. The function it returns
// forgets f if it has not run (a hook of an object that outlives its
// user: a CQ's Notifier closed before the CQ).
func (n *node) addOnClose(f func()) (remove func()) {
	n.t.mu.Lock()
	defer n.t.mu.Unlock()
	if n.closed.Load() {
		f()
		return func() {}
	}
	h := &f
	n.onClose = append(n.onClose, h)
	return func() {
		n.t.mu.Lock()
		defer n.t.mu.Unlock()
		for i, g := range n.onClose {
			if g == h {
				// slices.Delete clears the vacated slot, which would
				// keep f (and what it holds) reachable.
				n.onClose = slices.Delete(n.onClose, i, i+1)
				return
			}
		}
	}
}

// runOnClose runs and forgets the functions given to addOnClose; t.mu is
// held.
func (n *node) runOnClose() {
	hooks := n.onClose
	n.onClose = nil
	for _, f := range hooks {
		(*f)()
	}
}

// onCloseOf registers f as a close hook of a *QueuePair, a
// *SharedReceiveQueue or a *CompletionQueue (seam.OnClose).
func onCloseOf(obj any, f func()) (remove func()) {
	switch x := obj.(type) {
	case *QueuePair:
		return x.addOnClose(f)
	case *SharedReceiveQueue:
		return x.addOnClose(f)
	case *CompletionQueue:
		return x.addOnClose(f)
	default:
		panic(fmt.Sprintf("ctx: close hook for %T", obj))
	}
}
