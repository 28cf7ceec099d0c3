package ctx

import "slices"

// BufferMapped reports whether b's memory is still mapped (it is until
// Close and the close of the last region on it have both run).
func BufferMapped(b *Buffer) bool {
	liveBuffers.mu.Lock()
	defer liveBuffers.mu.Unlock()
	return slices.Contains(liveBuffers.byAt, b)
}

// Children returns how many objects depend directly on o (a
// *ProtectionDomain, *CompletionQueue, *SharedReceiveQueue or *Context).
func Children(o interface{ Closed() bool }) int {
	var n *node
	switch x := o.(type) {
	case *ProtectionDomain:
		n = &x.node
	case *CompletionQueue:
		n = &x.node
	case *SharedReceiveQueue:
		n = &x.node
	case *Context:
		n = &x.node
	default:
		panic("ctx.Children: no children")
	}
	n.t.mu.Lock()
	defer n.t.mu.Unlock()
	return len(n.children)
}

// CloseHooks returns how many close hooks o (a *CompletionQueue,
// *QueuePair or *SharedReceiveQueue) holds.
func CloseHooks(o any) int {
	var n *node
	switch x := o.(type) {
	case *CompletionQueue:
		n = &x.node
	case *QueuePair:
		n = &x.node
	case *SharedReceiveQueue:
		n = &x.node
	default:
		panic("ctx.CloseHooks: no close hooks")
	}
	n.t.mu.Lock()
	defer n.t.mu.Unlock()
	return len(n.onClose)
}
