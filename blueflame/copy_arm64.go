package blueflame

import (
	"unsafe"
)

var availableModes = []Mode{ModeNEON, ModeSTP, ModeGeneric}

// postNEON is the whole post in one call: dmb oshst, doorbell record store,
// dsb st, chunks × one 64-byte VST1 (or the 8-byte doorbell), dsb st.
//
//go:noescape
func postNEON(r *Register, dbrec unsafe.Pointer, pi uint32, src unsafe.Pointer, n int, ringBase, ringEnd unsafe.Pointer)

// postSTP is postNEON with four ascending STP pair stores per chunk.
//
//go:noescape
func postSTP(r *Register, dbrec unsafe.Pointer, pi uint32, src unsafe.Pointer, n int, ringBase, ringEnd unsafe.Pointer)

func modePost(m Mode) postFunc {
	switch m {
	case ModeNEON:
		return postNEON
	case ModeSTP:
		return postSTP
	}
	return postGeneric
}
