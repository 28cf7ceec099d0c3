//go:build ppc64 || ppc64le

package blueflame

import (
	"encoding/binary"
	"reflect"
	"slices"
	"testing"
	"unsafe"
)

// Power instruction words (big-endian field order, as the processor reads
// them in either byte order).
const (
	ppcHWSync = 0x7c0004ac // sync 0 (hwsync)
	ppcLWSync = 0x7c2004ac // sync 1 (lwsync)
	ppcBLR    = 0x4e800020 // blr
)

// ppcInstructions returns the instruction words of fn up to its first blr
// or tail branch, and those of the function its first relative b or bl
// reaches (a Go func value of an assembly function is a wrapper that
// branches to it).
func ppcInstructions(fn any) []uint32 {
	var out []uint32
	pc := unsafe.Pointer(reflect.ValueOf(fn).Pointer())
	for depth := 0; depth < 2 && pc != nil; depth++ {
		var next unsafe.Pointer
		for i := 0; i < 64; i++ {
			at := unsafe.Add(pc, 4*i)
			w := binary.NativeEndian.Uint32((*[4]byte)(at)[:])
			out = append(out, w)
			if w>>26 == 18 && w&2 == 0 && next == nil { // b or bl, relative
				next = unsafe.Add(at, int32(w&0x03fffffc<<6)>>6)
				if w&1 == 0 {
					break // b: a tail branch
				}
			}
			if w == ppcBLR {
				break
			}
		}
		pc = next
	}
	return out
}

// TestPowerBarriersAreHeavyweightSync checks the barriers against
// rdma-core's util/udma_barrier.h for __PPC64__: udma_to_device_barrier
// and mmio_flush_writes (and so mmio_wc_start) are "sync", which orders
// stores to memory before stores to caching-inhibited (device) memory;
// lwsync, all a sync/atomic operation issues on Power, does not.
// udma_from_device_barrier is "lwsync".
func TestPowerBarriersAreHeavyweightSync(t *testing.T) {
	for _, b := range []struct {
		name string
		fn   func()
		want uint32
	}{
		{"StoreBarrier", StoreBarrier, ppcHWSync},
		{"WCStart", WCStart, ppcHWSync},
		{"FlushWrites", FlushWrites, ppcHWSync},
		{"ReadBarrier", ReadBarrier, ppcLWSync},
	} {
		if !slices.Contains(ppcInstructions(b.fn), b.want) {
			t.Errorf("%s: no %#08x instruction: %x", b.name, b.want, ppcInstructions(b.fn))
		}
		b.fn()
	}
}
