package blueflame

import "unsafe"

var availableModes = []Mode{ModeNEON, ModeSTP, ModeGeneric}

// postNEON is the whole post in one call: dmb oshst, doorbell record store,
// dsb st, chunks × one 64-byte VST1, dsb st.
//
//go:noescape
func postNEON(dbrecSend unsafe.Pointer, dbval uint32, dst, src unsafe.Pointer, chunks uint, ringBase, ringEnd unsafe.Pointer)

// postSTP is postNEON with four ascending STP pair stores per chunk.
//
//go:noescape
func postSTP(dbrecSend unsafe.Pointer, dbval uint32, dst, src unsafe.Pointer, chunks uint, ringBase, ringEnd unsafe.Pointer)

// ringAsm is the whole doorbell in one call: dmb oshst, doorbell record
// store, dsb st, one 8-byte store, dsb st.
//
//go:noescape
func ringAsm(dbrecSend unsafe.Pointer, dbval uint32, dst unsafe.Pointer, val uint64)

func post(dbrecSend unsafe.Pointer, dbval uint32, dst, src unsafe.Pointer, chunks uint, ringBase, ringEnd unsafe.Pointer) {
	switch activeMode {
	case ModeNEON:
		postNEON(dbrecSend, dbval, dst, src, chunks, ringBase, ringEnd)
	case ModeSTP:
		postSTP(dbrecSend, dbval, dst, src, chunks, ringBase, ringEnd)
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
