//go:build !amd64 && !arm64

package sim

import (
	"sync/atomic"
	"unsafe"
)

// storeRelease64 stores v at p with release order (a sequentially
// consistent store where no release store is written in assembly).
func storeRelease64(p *uint64, v uint64) { atomic.StoreUint64(p, v) }

// storeRelease32 is storeRelease64 for a 32-bit word.
func storeRelease32(p *uint32, v uint32) { atomic.StoreUint32(p, v) }

// prefetch does nothing where no prefetch is written in assembly.
func prefetch(unsafe.Pointer) {}
