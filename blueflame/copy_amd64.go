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
// chunks × 8 ascending 8-byte stores, sfence.
//
//go:noescape
func postStore8(dbrecSend unsafe.Pointer, dbval uint32, dst, src unsafe.Pointer, chunks uint, ringBase, ringEnd unsafe.Pointer)

// postAVX512 is postStore8 with one 64-byte store per chunk.
//
//go:noescape
func postAVX512(dbrecSend unsafe.Pointer, dbval uint32, dst, src unsafe.Pointer, chunks uint, ringBase, ringEnd unsafe.Pointer)

// ringAsm is the whole doorbell in one call: doorbell record store, sfence,
// one 8-byte store, sfence.
//
//go:noescape
func ringAsm(dbrecSend unsafe.Pointer, dbval uint32, dst unsafe.Pointer, val uint64)

func post(dbrecSend unsafe.Pointer, dbval uint32, dst, src unsafe.Pointer, chunks uint, ringBase, ringEnd unsafe.Pointer) {
	switch activeMode {
	case ModeAVX512:
		postAVX512(dbrecSend, dbval, dst, src, chunks, ringBase, ringEnd)
	case ModeStore8:
		postStore8(dbrecSend, dbval, dst, src, chunks, ringBase, ringEnd)
	default:
		postGeneric(dbrecSend, dbval, dst, src, chunks, ringBase, ringEnd)
	}
}

func ring(dbrecSend unsafe.Pointer, dbval uint32, dst unsafe.Pointer, val uint64) {
	if activeMode == ModeGeneric {
		ringGeneric(dbrecSend, dbval, dst, val)
		return
	}
	ringAsm(dbrecSend, dbval, dst, val)
}
