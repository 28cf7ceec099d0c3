package main

import (
	"errors"
	"testing"
)

// FuzzPerftestRecord feeds arbitrary bytes, as a peer of perftest's
// exchange sends them, to the queue pair record's decoder, with and
// without GIDs: it must never panic, every failure must match
// errPerftestPeer, and a record it accepts must come out of encode and
// decode again unchanged (no field read wider than it is written).
func FuzzPerftestRecord(f *testing.F) {
	d := perftestDest{LID: 0x41, OutReads: 16, QPN: 0x20100, PSN: 0xa2cf67, RKey: 0x24a, VAddr: 0x7f0a6c51e000, SRQN: 7}
	for i := range d.GID {
		d.GID[i] = byte(0xf0 + i)
	}
	f.Add(d.encode(false), false)
	f.Add(d.encode(true), true)
	f.Add([]byte("0000:0010:100000100:000001:0000024a:7f0a6c51e000:00000000"), false)
	f.Add([]byte("0:0:0:0:0:0:0:"), false)
	f.Add([]byte(":::::::::::::::::::::::\x00"), true)
	f.Fuzz(func(t *testing.T, b []byte, gid bool) {
		got, err := decodePerftestDest(b, gid)
		if err != nil {
			if !errors.Is(err, errPerftestPeer) {
				t.Fatalf("%q: error %v does not match errPerftestPeer", b, err)
			}
			return
		}
		again, err := decodePerftestDest(got.encode(gid), gid)
		if err != nil {
			t.Fatalf("%q read as %+v, whose encoding is refused: %v", b, got, err)
		}
		if again != got {
			t.Fatalf("%q read as %+v, its encoding as %+v", b, got, again)
		}
	})
}
