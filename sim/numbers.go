package sim

import (
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// The model's object numbers. QPNs (DCT numbers included: a DCT is named by
// a QPN), CQNs and SRQNs are 24-bit fields of the WQE, CQE and address
// vector; a memory key is a 24-bit index and an 8-bit variant, as an mlx5
// mkey is (index<<8 | variant).
const (
	// numberLimit bounds every 24-bit number space (exclusive).
	numberLimit = 1 << 24
	// firstQPN is the first QPN the model hands out. QPN 0 and 1 are QP0
	// and QP1; the low numbers are left unused as the firmware reserves
	// them for its own QPs.
	firstQPN = 0x100
	// qpnLimit excludes QPN 0xffffff, the multicast QPN of InfiniBand.
	qpnLimit = numberLimit - 1
	firstCQN = 0x40
	// firstSRQN is the first SRQ number.
	firstSRQN = 0x20
	// firstKeyIndex is the first memory key index: index 0 is never a
	// user key, and index 1 would give the InvalidLKey terminator 0x100.
	firstKeyIndex = 2
	// keyVariantMask selects the variant byte of a memory key.
	keyVariantMask = 0xff
)

// numberSpace hands out the numbers of [next, limit) in order, then reuses
// freed numbers oldest first. A number is reissued only after it was freed,
// and as late as possible, so that a stale number held by a peer (a remote
// QPN of a destroyed QP) names nothing for as long as the space allows.
// Both operations are O(1) amortised; the queue of freed numbers holds at
// most one entry per number ever issued.
type numberSpace struct {
	first uint32 // the lowest number of the space
	next  uint32 // the next never-issued number
	limit uint32 // numbers at or above limit are never issued
	freed []uint32
	head  int // freed[head:] is the queue, oldest first
}

func newNumberSpace(first, limit uint32) numberSpace {
	return numberSpace{first: first, next: first, limit: limit}
}

// take returns a number that is not live: a fresh one while any remain,
// then the oldest freed one. fresh tells which; ok is false when every
// number is live.
func (s *numberSpace) take() (n uint32, fresh, ok bool) {
	if s.next < s.limit {
		n = s.next
		s.next++
		return n, true, true
	}
	if s.head == len(s.freed) {
		return 0, false, false
	}
	n = s.freed[s.head]
	s.head++
	if s.head == len(s.freed) {
		s.freed, s.head = s.freed[:0], 0
	}
	return n, false, true
}

// give queues a freed value for reuse. The caller gives each issued number
// back exactly once.
func (s *numberSpace) give(n uint32) {
	if len(s.freed) == cap(s.freed) && s.head > 0 && 2*s.head >= len(s.freed) {
		// Slide the queue down rather than grow: the copy is no longer
		// than the pops that made the room.
		k := copy(s.freed, s.freed[s.head:])
		s.freed, s.head = s.freed[:k], 0
	}
	s.freed = append(s.freed, n)
}

// exhausted is the error of a create or register that finds every number of
// its space live; what names the numbers (plural). The firmware answers a
// command beyond its limits with "limits exceeded" (status 0x8), which the
// kernel returns as ENOMEM.
func exhausted(op, what string, s *numberSpace) error {
	return provider.Errorf(op, "all %d %s are live: %w (%w)", s.next-s.first, what, ctx.ErrNoMemory, unix.ENOMEM)
}

// allocKeyLocked returns an unused memory key (f.mu held): a fresh index
// with a variant derived from it, or a freed index with the variant after
// the one it last carried. A key is never issued while a region holds it.
func (f *Fabric) allocKeyLocked() (uint32, bool) {
	v, fresh, ok := f.keys.take()
	if !ok {
		return 0, false
	}
	if fresh {
		// A variant that is not simply 0 makes a key that was never
		// issued (an index alone, a small integer) unlikely to match.
		return v<<8 | uint32(uint8(v*37)), true
	}
	// The queue holds the key to issue next for that index.
	return v, true
}

// freeKeyLocked frees a region's key (f.mu held). The index comes back with
// the next variant, so the freed key itself names nothing until the variant
// of its index has wrapped (256 reuses).
func (f *Fabric) freeKeyLocked(key uint32) {
	f.keys.give(key&^keyVariantMask | (key+1)&keyVariantMask)
}
