//go:build !amd64 && !arm64

package blueflame

import "unsafe"

var availableModes = []Mode{ModeGeneric}

func post(dbrecSend unsafe.Pointer, dbval uint32, dst, src unsafe.Pointer, chunks uint, ringBase, ringEnd unsafe.Pointer) {
	postGeneric(dbrecSend, dbval, dst, src, chunks, ringBase, ringEnd)
}

func ring(dbrecSend unsafe.Pointer, dbval uint32, dst unsafe.Pointer, val uint64) {
	ringGeneric(dbrecSend, dbval, dst, val)
}
