package ctx

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"
)

// Close order of object kinds: lower ranks close first when a parent takes
// its descendants down (QPs before SRQs before CQs before address handles
// before MRs before PDs before the Context).
const (
	rankQueuePair = iota
	rankSRQ
	rankCompletionQueue
	rankAddressHandle
	rankMemoryRegion
	rankProtectionDomain
	rankContext
)

// tree is the lock and sequence shared by every object of one Context.
type tree struct {
	mu  sync.Mutex
	seq uint64
}

// node is the lifetime bookkeeping embedded in every ctx object. An object
// depends on its parents (a QP on its PD, CQs and SRQ); closing an object
// first closes everything that depends on it, transitively, in rank order.
type node struct {
	t        *tree
	rank     int
	seq      uint64
	closed   atomic.Bool
	parents  []*node
	children map[*node]struct{}
	release  func() error // provider close; called with t.mu held
	// onClose runs when the object closes, before release (see
	// seam.OnClose); guarded by t.mu.
	onClose []*func()
}

func (n *node) init(t *tree, rank int, release func() error, parents ...*node) {
	n.t = t
	n.rank = rank
	t.seq++
	n.seq = t.seq
	n.release = release
	n.parents = parents
	for _, p := range parents {
		if p.children == nil {
			p.children = map[*node]struct{}{}
		}
		p.children[n] = struct{}{}
	}
}

// isClosed reports whether Close ran (lock-free; safe from any goroutine).
func (n *node) isClosed() bool { return n.closed.Load() }

// closeLocked closes n and everything below it. t.mu must be held. It is
// idempotent and returns the joined provider errors.
func (n *node) closeLocked() error {
	if n.closed.Load() {
		return nil
	}
	var all []*node
	seen := map[*node]bool{}
	var walk func(*node)
	walk = func(x *node) {
		if seen[x] || x.closed.Load() {
			return
		}
		seen[x] = true
		all = append(all, x)
		for c := range x.children {
			walk(c)
		}
	}
	walk(n)
	sort.Slice(all, func(i, j int) bool {
		if all[i].rank != all[j].rank {
			return all[i].rank < all[j].rank
		}
		return all[i].seq > all[j].seq
	})
	var errs []error
	for _, x := range all {
		x.closed.Store(true)
		x.runOnClose()
		if x.release != nil {
			if err := x.release(); err != nil {
				errs = append(errs, err)
			}
		}
		for _, p := range x.parents {
			delete(p.children, x)
		}
	}
	return errors.Join(errs...)
}
