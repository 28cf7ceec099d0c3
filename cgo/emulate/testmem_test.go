//go:build cgo && linux

package emulate

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// addrOf returns the address of b's first byte.
func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// rawMunmap unmaps memory the kernel mapped (unix.Munmap takes only the
// slices unix.Mmap returned).
func rawMunmap(addr, n uintptr) error {
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, addr, n, 0); e != 0 {
		return e
	}
	return nil
}
