package ctx

import (
	"errors"
	"fmt"
	"syscall"
)

// Sentinel errors. Every error returned by ctx and by a provider wraps one of
// these (or an errno from the hardware provider) so callers can test with
// errors.Is.
var (
	// ErrClosed is returned when an object (or one of its parents) has been
	// closed.
	ErrClosed = errors.New("object is closed")
	// ErrNotSupported is returned when the provider or device cannot do what
	// was asked (an unsupported QP type, a CQE size, a missing cgo build).
	ErrNotSupported = errors.New("not supported")
	// ErrNoDevice is returned by Open when no provider offers a device.
	ErrNoDevice = errors.New("no device")
	// ErrInvalidArgument is returned for a configuration or attribute that
	// is out of range or inconsistent. Nothing is changed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrInvalidState is returned for a QP state transition that is not
	// allowed from the current state.
	ErrInvalidState = errors.New("invalid state transition")
	// ErrBusy is returned when an object is still in use by another that
	// must be destroyed first and the caller asked not to cascade.
	ErrBusy = errors.New("resource busy")
	// ErrNoMemory is returned when memory (mmap, rings) cannot be obtained.
	ErrNoMemory = errors.New("out of memory")
	// ErrNotFound is returned when a named device, provider or GID does not
	// exist.
	ErrNotFound = errors.New("not found")
	// ErrPortNotActive is returned when a port must be ACTIVE and is not,
	// as when a GID is to be chosen on an Ethernet port (ChooseGID).
	ErrPortNotActive = errors.New("port not active")
)

// OpError is the error of a control-plane verb, in ctx, its providers and
// the transports above it: the package that reports it, the verb that
// failed and the reason, which wraps a sentinel (and, where the kernel or a
// provider standing in for it gave one, the error number: see Errno).
type OpError struct {
	// Package names the reporter: "" (read as "ctx") for ctx and its
	// providers, "rc", "dc", "ud" for the transports ("transport" for what
	// they share, as an SRQ).
	Package string
	// Op is the verb, e.g. "create QP" or "modify QP to RTR".
	Op string
	// Err is the cause; errors.Is(err, ErrClosed) and the like see through
	// OpError to it.
	Err error
}

var _ error = (*OpError)(nil)

// Error formats as "<package>: <op>: <cause>", e.g. "ctx: create QP:
// invalid argument" or "rc: connect: QP 0x105: object is closed".
func (e *OpError) Error() string {
	pkg := e.Package
	if pkg == "" {
		pkg = "ctx"
	}
	return pkg + ": " + e.Op + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// Errno returns the error number of the cause (a syscall.Errno anywhere in
// its chain, as the hardware provider and the software HCA wrap it), or 0 when
// the failure had none.
func (e *OpError) Errno() syscall.Errno {
	var errno syscall.Errno
	if errors.As(e.Err, &errno) {
		return errno
	}
	return 0
}

// errorf builds an *OpError for op whose cause is fmt.Errorf(format, args...);
// use %w in format to wrap a sentinel.
func errorf(op, format string, args ...any) error {
	return &OpError{Op: op, Err: fmt.Errorf(format, args...)}
}

func opErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var oe *OpError
	if errors.As(err, &oe) {
		return err
	}
	return &OpError{Op: op, Err: err}
}
