// Package kerrno builds the cause of an error that the kernel would report
// with an error number, for ctx and the providers that stand in for the
// kernel (the software HCA): errors.Is matches both the errno and the ctx
// sentinel it maps to, and ctx.OpError.Errno finds the errno.
package kerrno

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// Cause is the cause of an error that the kernel would report with an
// error number: errors.Is matches both Errno and Sentinel.
type Cause struct {
	// What names the call or argument, e.g. "ibv_reg_dmabuf_mr fd -1".
	What string
	// Errno is the error number, e.g. syscall.EBADF.
	Errno syscall.Errno
	// Sentinel is the ctx sentinel the error maps to.
	Sentinel error
}

// New builds a *Cause from the verb, what the call was for (may be
// empty), the error number and the sentinel (nil for an errno the hardware
// provider maps to none, as EPERM).
func New(verb, detail string, errno syscall.Errno, sentinel error) error {
	what := verb
	if detail != "" {
		what += " " + detail
	}
	return &Cause{What: what, Errno: errno, Sentinel: sentinel}
}

// Error formats as "<what>: <ERRNO> (<message>)", e.g.
// "ibv_reg_dmabuf_mr length 0: EINVAL (invalid argument)", or without
// "<what>: " when What is empty (a cause wrapped in a message that names
// the call).
func (e *Cause) Error() string {
	s := unix.ErrnoName(e.Errno) + " (" + e.Errno.Error() + ")"
	if e.What == "" {
		return s
	}
	return e.What + ": " + s
}

// Unwrap returns the errno and the sentinel.
func (e *Cause) Unwrap() []error {
	if e.Sentinel == nil {
		return []error{e.Errno}
	}
	return []error{e.Errno, e.Sentinel}
}
