package blueflame

import (
	"unsafe"

	"github.com/klauspost/cpuid/v2"
)

var availableModes = func() []Mode {
	if cpuid.CPU.Supports(cpuid.AVX512F) {
		return []Mode{ModeAVX512, ModeStore8, ModeGeneric}
	}
	return []Mode{ModeStore8, ModeGeneric}
}()

// post runs the copy of activeMode: ModeStore8 (doorbell record store,
// sfence, chunks × 8 ascending 8-byte stores or the 8-byte doorbell,
// sfence; a WQE of one basic block takes a straight path with no loop),
// ModeAVX512 (the same with one 64-byte store per chunk), or, for
// ModeGeneric, a jump to postGeneric.
//
//go:noescape
func post(d *SendDoorbell, pi uint32, src unsafe.Pointer, n int)
