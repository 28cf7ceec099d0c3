package blueflame

import (
	"unsafe"
)

var availableModes = []Mode{ModeNEON, ModeSTP, ModeGeneric}

// post runs the copy of activeMode: ModeNEON (dmb oshst, doorbell record
// store, dsb st, chunks × one 64-byte VST1 or the 8-byte doorbell, dsb st),
// ModeSTP (the same with four ascending STP pair stores per chunk), or, for
// ModeGeneric, a jump to postGeneric.
//
//go:noescape
func post(d *SendDoorbell, pi uint32, src unsafe.Pointer, n int)
