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

// postStore8 is the whole post in one call: doorbell record store, sfence,
// chunks × 8 ascending 8-byte stores (or the 8-byte doorbell), sfence.
//
//go:noescape
func postStore8(r *Register, dbrec unsafe.Pointer, pi uint32, src unsafe.Pointer, n int, ringBase, ringEnd unsafe.Pointer)

// postAVX512 is postStore8 with one 64-byte store per chunk.
//
//go:noescape
func postAVX512(r *Register, dbrec unsafe.Pointer, pi uint32, src unsafe.Pointer, n int, ringBase, ringEnd unsafe.Pointer)

func modePost(m Mode) postFunc {
	switch m {
	case ModeAVX512:
		return postAVX512
	case ModeStore8:
		return postStore8
	}
	return postGeneric
}
