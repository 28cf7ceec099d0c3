//go:build amd64 || arm64

package sim

// storeRelease64 stores v at p with release order: every store before it
// is visible to another processor that sees v. Unlike atomic.StoreUint64
// it does not wait for those stores to reach the cache (no full fence).
//
//go:noescape
func storeRelease64(p *uint64, v uint64)
