package blueflame

import (
	"encoding/binary"
	"reflect"
	"testing"
	"unsafe"
)

// rvFences returns the pred and succ sets of the fence instructions of fn up
// to its return, following a jal that leaves it (a Go func value of an
// assembly function is a wrapper that jumps to it). Compressed (16-bit)
// instructions are stepped over.
func rvFences(fn any) (fences [][2]uint32) {
	pc := unsafe.Pointer(reflect.ValueOf(fn).Pointer())
	for depth := 0; depth < 2 && pc != nil; depth++ {
		var next unsafe.Pointer
		for off := 0; off < 256; {
			at := unsafe.Add(pc, off)
			lo := binary.LittleEndian.Uint16((*[2]byte)(at)[:])
			if lo&3 != 3 {
				off += 2
				if lo == 0x8082 { // c.jr ra: ret
					break
				}
				continue
			}
			w := binary.LittleEndian.Uint32((*[4]byte)(at)[:])
			off += 4
			switch {
			case w&0x707f == 0x000f: // fence
				fences = append(fences, [2]uint32{w >> 24 & 0xf, w >> 20 & 0xf})
			case w&0x7f == 0x6f && next == nil: // jal
				imm := int32(w&0x80000000)>>11 | int32(w>>20&0x7fe) | int32(w>>9&0x800) | int32(w&0xff000)
				next = unsafe.Add(at, imm)
			}
			if w == 0x00008067 || (w&0x7f == 0x6f && w>>7&0x1f == 0) { // ret, or a jump that does not return
				break
			}
		}
		pc = next
	}
	return fences
}

// TestRISCVBarriersFenceDevice checks the barriers against rdma-core's
// util/udma_barrier.h for __riscv: "fence ow,ow" to the device and for
// the write-combining flush, "fence ir,ir" from it. An atomic memory
// operation with aq and rl, all a sync/atomic operation issues on RISC-V,
// orders only accesses to memory, not device input and output.
func TestRISCVBarriersFenceDevice(t *testing.T) {
	const i, o, r, w = 8, 4, 2, 1 // fence set bits
	for _, b := range []struct {
		name string
		fn   func()
		need uint32
	}{
		{"StoreBarrier", StoreBarrier, o | w},
		{"WCStart", WCStart, o | w},
		{"FlushWrites", FlushWrites, o | w},
		{"ReadBarrier", ReadBarrier, i | r},
	} {
		ok := false
		for _, f := range rvFences(b.fn) {
			ok = ok || f[0]&b.need == b.need && f[1]&b.need == b.need
		}
		if !ok {
			t.Errorf("%s: no fence covering %#x on both sides: %v", b.name, b.need, rvFences(b.fn))
		}
		b.fn()
	}
}
