//go:build cgo && linux

// Command preload is the emulated uverbs kernel as a library for programs
// that are not written in Go: built with
//
//	go build -buildmode=c-shared -o libmlx5kit-emulate.so ./cgo/emulate/preload
//
// and loaded with
//
//	MLX5KIT_EMULATE=1 LD_PRELOAD=./libmlx5kit-emulate.so ibv_devinfo -v
//
// it interposes the C library calls libibverbs and libmlx5 make on the
// uverbs device nodes, as package emulate does inside a Go binary. Its
// constructor waits until the Go runtime, and with it the emulation, has
// started, so that SYSFS_PATH is set before the program's main runs.
package main

import "C"

import (
	"github.com/mlx5kit/mlx5kit/cgo/emulate"
)

// mk_emu_preload_wait returns once the Go runtime has run the package
// initialisers, emulate's among them: a call into Go from C waits for
// that. It reports whether the emulation is on.
//
//export mk_emu_preload_wait
func mk_emu_preload_wait() C.int {
	if emulate.Enabled() {
		return 1
	}
	return 0
}

func main() {}
