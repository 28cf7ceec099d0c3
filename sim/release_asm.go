//go:build amd64 || arm64

package sim

import "unsafe"

// storeRelease64 stores v at p with release order: every store before it
// is visible to another processor that sees v. Unlike atomic.StoreUint64
// it does not wait for those stores to reach the cache (no full fence).
//
//go:noescape
func storeRelease64(p *uint64, v uint64)

// storeRelease32 is storeRelease64 for a 32-bit word.
//
//go:noescape
func storeRelease32(p *uint32, v uint32)

// prefetch asks for the cache line at p without waiting for it.
//
//go:noescape
func prefetch(p unsafe.Pointer)
