//go:build !amd64 && !arm64

package blueflame

import "unsafe"

var availableModes = []copyMode{modeGeneric}

// post is postGeneric: the only mode here.
func post(d *SendDoorbell, pi uint32, src unsafe.Pointer, n int) {
	postGeneric(d, pi, src, n)
}
