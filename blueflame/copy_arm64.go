package blueflame

import (
	"unsafe"
)

var availableModes = []copyMode{modeNEON, modeSTP, modeGeneric}

// post runs the copy of activeMode: modeNEON (dmb oshst, doorbell record
// store, dsb st, chunks × one 64-byte VST1 or the 8-byte doorbell, dsb st),
// modeSTP (the same with four ascending STP pair stores per chunk), or, for
// modeGeneric, a jump to postGeneric.
//
//go:noescape
func post(d *SendDoorbell, pi uint32, src unsafe.Pointer, n int)
