package ibpath

import (
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// AddressCache creates the address handle of a destination once and hands
// the same one back every later time, keyed by the address half of a path
// (AddressAttr): sending to the same destination twice builds the address
// vector once. The lookup of a cached destination allocates nothing.
//
// An AddressCache is used by one goroutine at a time, like the queues that
// send with its address vectors.
type AddressCache struct {
	pd      *ctx.ProtectionDomain
	entries map[ctx.AddressAttr]*cacheEntry
	hits    uint64
	misses  uint64
}

type cacheEntry struct {
	ah *ctx.AddressHandle
	av [prm.AVSize]byte
}

// NewAddressCache returns an empty cache creating its handles in pd.
func NewAddressCache(pd *ctx.ProtectionDomain) *AddressCache {
	return &AddressCache{pd: pd, entries: map[ctx.AddressAttr]*cacheEntry{}}
}

func (c *AddressCache) get(p Path) (*cacheEntry, error) {
	key := p.AddressAttr()
	if e := c.entries[key]; e != nil {
		c.hits++
		return e, nil
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	ah, err := c.pd.CreateAddressHandle(key)
	if err != nil {
		return nil, fmt.Errorf("ibpath: address cache: %w", err)
	}
	c.misses++
	e := &cacheEntry{ah: ah, av: ah.AV()}
	c.entries[key] = e
	return e, nil
}

// AddressHandle returns the address handle for p's destination, creating it
// on first use.
func (c *AddressCache) AddressHandle(p Path) (*ctx.AddressHandle, error) {
	e, err := c.get(p)
	if err != nil {
		return nil, err
	}
	return e.ah, nil
}

// AV returns the address vector for p's destination, ready for a UD or DC
// send WQE (wqebuilder's CtrlStage.UD and CtrlStage.DC take it). The
// pointer stays valid and unchanged until the entry is evicted or the cache
// closed.
func (c *AddressCache) AV(p Path) (*[prm.AVSize]byte, error) {
	e, err := c.get(p)
	if err != nil {
		return nil, err
	}
	return &e.av, nil
}

// Len returns the number of cached destinations.
func (c *AddressCache) Len() int { return len(c.entries) }

// Stats returns the lookups answered from the cache and those that created
// an address handle.
func (c *AddressCache) Stats() (hits, misses uint64) { return c.hits, c.misses }

// Evict destroys the handle of p's destination, if cached. An address
// vector obtained for it must no longer be used.
func (c *AddressCache) Evict(p Path) error {
	key := p.AddressAttr()
	e := c.entries[key]
	if e == nil {
		return nil
	}
	delete(c.entries, key)
	return e.ah.Close()
}

// Close destroys every cached handle and empties the cache.
func (c *AddressCache) Close() error {
	var errs []error
	for k, e := range c.entries {
		if err := e.ah.Close(); err != nil {
			errs = append(errs, err)
		}
		delete(c.entries, k)
	}
	return errors.Join(errs...)
}
