//go:build linux

package emulate

import (
	"bytes"
	"errors"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The model copies to and from the memory a command names as the kernel's
// copy_from_user and copy_to_user do: through process_vm_readv and
// process_vm_writev on the process itself, so that an address that is not
// mapped, or not writable, gives EFAULT instead of a fault in the model.

// copyIn fills dst from the process's memory at src.
func copyIn(dst []byte, src uintptr) syscall.Errno {
	if len(dst) == 0 {
		return 0
	}
	local := []unix.Iovec{{Base: &dst[0]}}
	local[0].SetLen(len(dst))
	remote := []unix.RemoteIovec{{Base: src, Len: len(dst)}}
	n, err := unix.ProcessVMReadv(os.Getpid(), local, remote, 0)
	return transferErrno(n, len(dst), err)
}

// copyOut writes src into the process's memory at dst.
func copyOut(dst uintptr, src []byte) syscall.Errno {
	if len(src) == 0 {
		return 0
	}
	local := []unix.Iovec{{Base: &src[0]}}
	local[0].SetLen(len(src))
	remote := []unix.RemoteIovec{{Base: dst, Len: len(src)}}
	n, err := unix.ProcessVMWritev(os.Getpid(), local, remote, 0)
	return transferErrno(n, len(src), err)
}

// clearOut writes n zero bytes at dst.
func clearOut(dst uintptr, n int) syscall.Errno {
	if n <= 0 {
		return 0
	}
	return copyOut(dst, make([]byte, n))
}

// transferErrno maps a partial or failed transfer to EFAULT, as a
// copy_*_user that stops short does.
func transferErrno(n, want int, err error) syscall.Errno {
	if err != nil {
		var en syscall.Errno
		if errors.As(err, &en) && en != unix.EFAULT && en != unix.ENOMEM {
			return en
		}
		return unix.EFAULT
	}
	if n != want {
		return unix.EFAULT
	}
	return 0
}

// copyInPath reads a NUL-terminated name from the process's memory at src
// as the kernel's getname does: EFAULT where it is not readable up to its
// end, ENAMETOOLONG when it has PATH_MAX bytes or more. It reads page by
// page, so that a name that ends before an unreadable page is read whole.
func copyInPath(src uintptr) (string, syscall.Errno) {
	buf := make([]byte, unix.PathMax)
	page := uintptr(os.Getpagesize())
	for n := 0; n < len(buf); {
		at := src + uintptr(n)
		chunk := buf[n:min(len(buf), n+int(page-at%page))]
		if en := copyIn(chunk, at); en != 0 {
			return "", en
		}
		if i := bytes.IndexByte(chunk, 0); i >= 0 {
			return string(buf[:n+i]), 0
		}
		n += len(chunk)
	}
	return "", unix.ENAMETOOLONG
}

// bytesOf views a value's memory as bytes, for copying C structures in
// and out.
func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// checkUserMemory says whether the process may read its own memory through
// process_vm_readv (a seccomp filter can forbid it).
func checkUserMemory() error {
	var probe, got [8]byte
	probe[0] = 0x5a
	if en := copyIn(got[:], uintptr(unsafe.Pointer(&probe[0]))); en != 0 {
		return &os.SyscallError{Syscall: "process_vm_readv", Err: en}
	}
	if got != probe {
		return errors.New("process_vm_readv returned other bytes than it was given")
	}
	return nil
}
