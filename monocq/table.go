package monocq

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// QPN table geometry: a 24-bit QPN splits into a 12-bit page index and a
// 12-bit index inside the page, the shape of rdma-core's qp_table.
const (
	tablePageShift = 12
	tablePageSize  = 1 << tablePageShift
	tablePageMask  = tablePageSize - 1
	tablePages     = (prm.CQEQPNMask + 1) >> tablePageShift
)

// Table maps QPNs (24-bit) to the caller's queues, for a CQ that several
// queue pairs share. Lookup is two array loads, with no hashing, no
// allocation and no collision: the page of 4096 QPNs is found by the high
// 12 bits, the entry by the low 12. A page (32 KiB) is allocated when the
// first QPN in it is registered and freed with the last. The zero Table is
// empty and ready to use; it is 32 KiB itself, so keep it behind a pointer.
//
// Register and Unregister are for setup and teardown and must not run
// concurrently with Lookup.
type Table[T any] struct {
	pages [tablePages]*tablePage[T]
	count int
}

type tablePage[T any] struct {
	entries [tablePageSize]*T
	used    int
}

// Lookup returns the queue registered for qpn, or nil. It is inlined and
// allocates nothing.
func (t *Table[T]) Lookup(qpn uint32) *T {
	if qpn > prm.CQEQPNMask {
		return nil // no QPN: it would alias qpn & 0xffffff
	}
	p := t.pages[qpn>>tablePageShift]
	if p == nil {
		return nil
	}
	return p.entries[qpn&tablePageMask]
}

// get is Lookup that reports an unknown QPN with an error that names it and
// wraps ErrUnknownQPN. The error path allocates; the found path does not.
func (t *Table[T]) get(qpn uint32) (*T, error) {
	if v := t.Lookup(qpn); v != nil && qpn <= prm.CQEQPNMask {
		return v, nil
	}
	return nil, fmt.Errorf("monocq: lookup QPN %#x: %w", qpn, ErrUnknownQPN)
}

// Register maps qpn to v. A QPN wider than 24 bits, a nil v or a QPN already
// mapped is refused and changes nothing.
func (t *Table[T]) Register(qpn uint32, v *T) error {
	switch {
	case qpn > prm.CQEQPNMask:
		return fmt.Errorf("monocq: register QPN 0x%x: wider than 24 bits: %w", qpn, ctx.ErrInvalidArgument)
	case v == nil:
		return fmt.Errorf("monocq: register QPN 0x%x: nil queue: %w", qpn, ctx.ErrInvalidArgument)
	case t.Lookup(qpn) != nil:
		return fmt.Errorf("monocq: register QPN 0x%x: %w", qpn, ErrDuplicateQPN)
	}
	pi := qpn >> tablePageShift
	p := t.pages[pi]
	if p == nil {
		p = new(tablePage[T])
		t.pages[pi] = p
	}
	p.entries[qpn&tablePageMask] = v
	p.used++
	t.count++
	return nil
}

// Unregister removes qpn and returns the queue it mapped to, or an error
// wrapping ErrUnknownQPN.
func (t *Table[T]) Unregister(qpn uint32) (*T, error) {
	v, err := t.get(qpn)
	if err != nil {
		return nil, fmt.Errorf("monocq: unregister: %w", err)
	}
	pi := qpn >> tablePageShift
	p := t.pages[pi]
	p.entries[qpn&tablePageMask] = nil
	p.used--
	if p.used == 0 {
		t.pages[pi] = nil
	}
	t.count--
	return v, nil
}

// Len returns the number of registered QPNs.
func (t *Table[T]) Len() int { return t.count }
