//go:build cgo && linux

package verbs

// The Go ends of the allocator callbacks in extalloc.h. A file with
// //export may declare C, not define it: the callbacks themselves are in
// the header, included by extalloc.go.

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"sync/atomic"
	"unsafe"
)

// failAlloc makes every allocation of the parent domains fail while set
// (FailAllocations).
var failAlloc atomic.Bool

// FailAllocations makes every ring and doorbell-record allocation of the
// parent domains fail while on is set, as an exhausted address space
// would: for tests of a creation that runs out of memory.
func FailAllocations(on bool) { failAlloc.Store(on) }

// mkExtAlloc is the parent domain's alloc: size bytes aligned to alignment
// from the arena numbered arena, or NULL.
//
//export mkExtAlloc
func mkExtAlloc(arena C.uintptr_t, size C.size_t, alignment C.size_t, resourceType C.uint64_t) unsafe.Pointer {
	a := arenaNamed(uintptr(arena))
	if a == nil || failAlloc.Load() {
		return nil
	}
	p, err := a.alloc(uintptr(size), uintptr(alignment), uint64(resourceType))
	if err != nil {
		return nil
	}
	return p
}

// mkExtFree is the parent domain's free: the memory stays mapped until the
// arena is released (see extArena).
//
//export mkExtFree
func mkExtFree(arena C.uintptr_t, ptr unsafe.Pointer, resourceType C.uint64_t) {
	if a := arenaNamed(uintptr(arena)); a != nil {
		a.free(ptr)
	}
}
