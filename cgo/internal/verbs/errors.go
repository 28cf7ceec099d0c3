package verbs

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/mlx5kit/mlx5kit/ctx"
	"golang.org/x/sys/unix"
)

// ErrNotMLX5 is returned when a device exists but is not driven by the mlx5
// provider of rdma-core (mlx5dv_is_supported is false), so none of the
// direct-verbs calls the data plane depends on can work on it.
var ErrNotMLX5 = errors.New("not an mlx5 device")

// ErrUnavailable is returned by every entry point of a build without cgo
// or for an OS other than Linux (Enabled is false); a build with the
// hardware provider never returns it.
var ErrUnavailable = fmt.Errorf("cgo: the mlx5 hardware provider needs cgo and Linux with rdma-core; this binary was built with CGO_ENABLED=0 or for %s/%s: %w",
	runtime.GOOS, runtime.GOARCH, ctx.ErrNotSupported)

// VerbError is the error of a failed rdma-core call: the verb, what it was
// called for, and the error number. errors.Is sees through it to the errno
// (syscall.EINVAL, …) and to the ctx sentinel the errno maps to
// (ctx.ErrInvalidArgument, ctx.ErrNotSupported, ctx.ErrNoMemory, ctx.ErrBusy,
// …), or to the sentinel the call site names (ctx.ErrNotFound,
// ctx.ErrNoDevice, ErrNotMLX5).
type VerbError struct {
	// Verb is the rdma-core function, e.g. "ibv_modify_qp".
	Verb string
	// Detail says what the call was for, e.g. "RC QP 0x1a1 INIT→RTR".
	Detail string
	// Errno is the error number (0 when the failure is not an errno, e.g.
	// a device that is not mlx5).
	Errno syscall.Errno
	// Sentinel is the ctx or package sentinel the failure maps to (nil when
	// the errno has none).
	Sentinel error
}

var _ error = (*VerbError)(nil)

// Error formats as "cgo: <verb> <detail>: <ERRNO> (<message>)", e.g.
// "cgo: ibv_modify_qp RC QP 0x1a1 INIT→RTR: EINVAL (invalid argument)".
func (e *VerbError) Error() string {
	var b strings.Builder
	b.WriteString("cgo: ")
	b.WriteString(e.Verb)
	if e.Detail != "" {
		b.WriteByte(' ')
		b.WriteString(e.Detail)
	}
	b.WriteString(": ")
	switch {
	case e.Errno != 0:
		name := unix.ErrnoName(e.Errno)
		if name == "" {
			name = "errno " + strconv.Itoa(int(e.Errno))
		}
		b.WriteString(name)
		b.WriteString(" (")
		b.WriteString(e.Errno.Error())
		b.WriteByte(')')
		if e.Sentinel != nil && e.Sentinel != errnoSentinel(e.Errno) {
			b.WriteString(": ")
			b.WriteString(e.Sentinel.Error())
		}
	case e.Sentinel != nil:
		b.WriteString(e.Sentinel.Error())
	default:
		b.WriteString("failed")
	}
	return b.String()
}

// Unwrap returns the errno and the sentinel, so that errors.Is matches
// either.
func (e *VerbError) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.Errno != 0 {
		errs = append(errs, e.Errno)
	}
	if e.Sentinel != nil {
		errs = append(errs, e.Sentinel)
	}
	return errs
}

// errnoSentinel maps an error number to the ctx sentinel callers test for.
func errnoSentinel(errno syscall.Errno) error {
	switch errno {
	case syscall.EINVAL, syscall.ERANGE, syscall.EFAULT:
		// EFAULT: an address the kernel could not read or pin (a
		// region not mapped), the caller's argument as the software
		// HCA reports it.
		return ctx.ErrInvalidArgument
	case syscall.EOPNOTSUPP, syscall.ENOSYS, syscall.EPROTONOSUPPORT, syscall.ENOTTY:
		// ENOTTY: a kernel without the uverbs ioctl interface, to which
		// libibverbs passes an ioctl-only verb (ibv_reg_dmabuf_mr).
		return ctx.ErrNotSupported
	case syscall.ENOMEM, syscall.ENOSPC:
		return ctx.ErrNoMemory
	case syscall.EBUSY:
		return ctx.ErrBusy
	case syscall.ENODEV:
		return ctx.ErrNoDevice
	case syscall.ENOENT, syscall.ENODATA:
		return ctx.ErrNotFound
	}
	return nil
}

// errnoError builds the error of a verb that failed with errno.
func errnoError(verb, detail string, errno syscall.Errno) *VerbError {
	if errno == 0 {
		// A verb said it failed without saying why; EIO is what rdma-core
		// itself reports for an unexplained command failure.
		errno = syscall.EIO
	}
	return &VerbError{Verb: verb, Detail: detail, Errno: errno, Sentinel: errnoSentinel(errno)}
}

// retError interprets the int result of an ibv_* or mlx5dv_* call that
// returns the error number itself (0 on success). rdma-core documents these
// verbs as "returns 0 on success, or the value of errno on failure" and does
// not promise to set errno, so the return value is authoritative. A negative
// value (some legacy paths return -1 and set errno, a few return -errno) is
// resolved from errno when errno is set and from -ret otherwise.
func retError(verb, detail string, ret int, errno error) error {
	if ret == 0 {
		return nil
	}
	if ret > 0 {
		return errnoError(verb, detail, syscall.Errno(ret))
	}
	var en syscall.Errno
	if errors.As(errno, &en) && en != 0 {
		return errnoError(verb, detail, en)
	}
	return errnoError(verb, detail, syscall.Errno(-ret))
}

// ptrError interprets the errno of a call that returned NULL (pointer
// results: ibv_open_device, ibv_alloc_pd, ibv_reg_mr, ibv_create_*,
// mlx5dv_create_*) or -1 (ibv_get_cq_event, ibv_get_async_event).
func ptrError(verb, detail string, errno error) error {
	var en syscall.Errno
	if errors.As(errno, &en) {
		return errnoError(verb, detail, en)
	}
	return errnoError(verb, detail, 0)
}
