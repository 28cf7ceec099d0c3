//go:build !amd64 && !arm64

package blueflame

import "unsafe"

var availableModes = []Mode{ModeGeneric}

// post is postGeneric: the only mode here.
func post(r *Register, dbrec unsafe.Pointer, pi uint32, src unsafe.Pointer, n int, ringBase, ringEnd unsafe.Pointer) {
	postGeneric(r, dbrec, pi, src, n, ringBase, ringEnd)
}
