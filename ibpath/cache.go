package ibpath

import (
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/ud"
)

// AddressCache creates the address handle of a destination once and hands
// the same one back every later time, keyed by the address half of a path
// (AddressAttr): sending to the same destination twice builds the address
// vector once. Remote gives the ud.Remote a ud.QP posts to, AV the address
// vector of a DC or raw send WQE. The lookup of a cached destination
// allocates nothing.
//
// An AddressCache is used by one goroutine at a time, like the queues that
// send with its address vectors.
type AddressCache struct {
	pd      *ctx.ProtectionDomain
	entries map[ctx.AddressAttr]*cacheEntry
	hits    uint64
	misses  uint64
	// remotes counts the Remotes in the entries (at most: Evict and
	// Close do not count down), sweepAt is the count at which Remote
	// drops those of closed QPs.
	remotes int
	sweepAt int
}

type cacheEntry struct {
	ah *ctx.AddressHandle
	// remotes are the ud.Remotes made on ah, by remote QPN and qkey.
	remotes map[remoteKey]*ud.Remote
}

// remoteKey is what a ud.Remote adds to an address: the remote QPN and
// qkey, and the QP it was made for.
type remoteKey struct {
	qp        *ud.QP
	qpn, qkey uint32
}

// NewAddressCache returns an empty cache creating its handles in pd.
func NewAddressCache(pd *ctx.ProtectionDomain) *AddressCache {
	return &AddressCache{pd: pd, entries: map[ctx.AddressAttr]*cacheEntry{}, sweepAt: minSweep}
}

func (c *AddressCache) get(p Path) (*cacheEntry, error) {
	key := p.addressAttr()
	if e := c.entries[key]; e != nil {
		if !e.ah.Closed() {
			c.hits++
			return e, nil
		}
		// Closed under the cache, with its PD or Context: make it
		// again (which fails with ErrClosed when the PD is closed).
		delete(c.entries, key)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if c.pd == nil {
		return nil, fmt.Errorf("ibpath: address cache: nil protection domain: %w", ctx.ErrInvalidArgument)
	}
	ah, err := c.pd.CreateAddressHandle(key)
	if err != nil {
		return nil, fmt.Errorf("ibpath: address cache: %w", err)
	}
	c.misses++
	e := &cacheEntry{ah: ah}
	c.entries[key] = e
	return e, nil
}

// AddressHandle returns the address handle for p's destination, creating it
// on first use, and again when the cached one was closed under the cache
// (with its PD or Context: the error then wraps ctx.ErrClosed).
func (c *AddressCache) AddressHandle(p Path) (*ctx.AddressHandle, error) {
	e, err := c.get(p)
	if err != nil {
		return nil, err
	}
	return e.ah, nil
}

// Remote returns the ud.Remote that sends from q to p's destination (its
// address, p.DQPN and p.QKey), creating the address handle on first use of
// the address and the Remote on first use with q, p.DQPN and p.QKey; a
// later call for the same returns the same Remote and allocates nothing.
// Pass it to q.Post. q must have been created in the cache's protection
// domain. The Remote belongs to the cache: Evict or Close the cache, not
// the Remote. The Remotes of QPs closed since are dropped from the cache
// as it makes new ones, so that closing a QP lets it be collected.
func (c *AddressCache) Remote(q *ud.QP, p Path) (*ud.Remote, error) {
	if q == nil {
		return nil, fmt.Errorf("ibpath: address cache: nil UD QP: %w", ctx.ErrInvalidArgument)
	}
	h := q.Handle()
	if h == nil {
		return nil, fmt.Errorf("ibpath: address cache: UD QP not made by ud.New: %w", ctx.ErrInvalidArgument)
	}
	if pd := h.ProtectionDomain(); pd != c.pd {
		return nil, fmt.Errorf("ibpath: address cache: UD QP %#x is in another protection domain than the cache: %w", q.QPN(), ctx.ErrInvalidArgument)
	}
	e, err := c.get(p)
	if err != nil {
		return nil, err
	}
	k := remoteKey{qp: q, qpn: p.DQPN, qkey: p.QKey}
	if r := e.remotes[k]; r != nil {
		return r, nil
	}
	r, err := q.RemoteVia(e.ah, p.DQPN, p.QKey)
	if err != nil {
		return nil, fmt.Errorf("ibpath: address cache: %w", err)
	}
	if e.remotes == nil {
		e.remotes = map[remoteKey]*ud.Remote{}
	}
	e.remotes[k] = r
	if c.remotes++; c.remotes > c.sweepAt {
		c.dropClosed()
	}
	return r, nil
}

// Len returns the number of cached destinations.
func (c *AddressCache) Len() int { return len(c.entries) }

// Stats returns the lookups answered from the cache and those that created
// an address handle.
func (c *AddressCache) Stats() (hits, misses uint64) { return c.hits, c.misses }

// Evict destroys the handle of p's destination, if cached. An address
// vector or ud.Remote obtained for it must no longer be used.
func (c *AddressCache) Evict(p Path) error {
	key := p.addressAttr()
	e := c.entries[key]
	if e == nil {
		return nil
	}
	delete(c.entries, key)
	return e.ah.Close()
}

// Close destroys every cached handle and empties the cache.
//
// Close of a nil *AddressCache returns nil.
func (c *AddressCache) Close() error {
	if c == nil {
		return nil
	}
	var errs []error
	for k, e := range c.entries {
		if err := e.ah.Close(); err != nil {
			errs = append(errs, err)
		}
		delete(c.entries, k)
	}
	return errors.Join(errs...)
}

// dropClosed removes the Remotes of QPs closed since they were made, so
// that a long-lived cache does not keep closed QPs reachable. Remote calls
// it when the number of Remotes has doubled since the last time, which
// keeps its cost amortized constant per Remote made; a cached lookup does
// not call it.
func (c *AddressCache) dropClosed() {
	n := 0
	for _, e := range c.entries {
		for k := range e.remotes {
			if k.qp.Handle().Closed() {
				delete(e.remotes, k)
			}
		}
		n += len(e.remotes)
	}
	c.remotes = n
	c.sweepAt = 2*n + minSweep
}

// minSweep is the number of Remotes a cache makes before it first looks
// for those of closed QPs.
const minSweep = 16
