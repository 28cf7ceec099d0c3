package blueflame

import (
	"unsafe"

	"github.com/klauspost/cpuid/v2"
)

var availableModes = func() []copyMode {
	if cpuid.CPU.Supports(cpuid.AVX512F) {
		return []copyMode{modeAVX512, modeStore8, modeGeneric}
	}
	return []copyMode{modeStore8, modeGeneric}
}()

// post runs the copy of activeMode: modeStore8 (doorbell record store,
// sfence, chunks × 8 ascending 8-byte stores or the 8-byte doorbell,
// sfence; a WQE of one basic block takes a straight path with no loop),
// modeAVX512 (the same with one 64-byte store per chunk), or, for
// modeGeneric, a jump to postGeneric.
//
//go:noescape
func post(d *SendDoorbell, pi uint32, src unsafe.Pointer, n int)
