package ctx

import "fmt"

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

// onCloseOf registers f as a close hook of a *QueuePair, a
// *SharedReceiveQueue or a *CompletionQueue (seam.OnClose).
func onCloseOf(obj any, f func()) {
	switch x := obj.(type) {
	case *QueuePair:
		x.addOnClose(f)
	case *SharedReceiveQueue:
		x.addOnClose(f)
	case *CompletionQueue:
		x.addOnClose(f)
	default:
		panic(fmt.Sprintf("ctx: close hook for %T", obj))
	}
}
