package sim

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// fdConn is a TCP connection of a link read and written with blocking
// system calls, not through Go's network poller. The engines and the
// programs on the software HCA poll in loops that keep every P busy; the
// scheduler then checks the poller only every few milliseconds, and a
// message would wait that long for its reader. A reader blocked in read(2)
// holds a thread of its own and is runnable as soon as the bytes arrive.
// Deadlines are points in time, as net.Conn's: before each read or write
// the socket's receive or send timeout is set to the time left until them,
// so a peer that trickles bytes cannot make a loop of reads outlast one.
type fdConn struct {
	fd            int
	local, remote net.Addr
	once          sync.Once
	released      sync.Once
	// The read and write deadlines, in Unix nanoseconds (0: none).
	rdl, wdl atomic.Int64
}

// newFDConn takes over c (a *net.TCPConn): its socket moves to a blocking
// descriptor of its own and c is closed.
func newFDConn(c net.Conn) (*fdConn, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("a link needs a TCP connection, not %T", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("the connection's socket: %w", err)
	}
	fd, derr := -1, error(nil)
	if err := raw.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		derr = err
	}
	local, remote := c.LocalAddr(), c.RemoteAddr()
	_ = c.Close()
	if derr != nil {
		return nil, fmt.Errorf("duplicate the socket: %w", derr)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("make the socket blocking: %w", err)
	}
	return &fdConn{fd: fd, local: local, remote: remote}, nil
}

func (c *fdConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		if err := c.arm(unix.SO_RCVTIMEO, &c.rdl); err != nil {
			return 0, err
		}
		n, err := unix.Read(c.fd, b)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return 0, os.ErrDeadlineExceeded
		case err != nil:
			return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.local, Addr: c.remote, Err: err}
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (c *fdConn) Write(b []byte) (int, error) {
	done := 0
	for done < len(b) {
		if err := c.arm(unix.SO_SNDTIMEO, &c.wdl); err != nil {
			return done, err
		}
		n, err := unix.SendmsgN(c.fd, b[done:], nil, nil, unix.MSG_NOSIGNAL)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return done, os.ErrDeadlineExceeded
		case err != nil:
			return done, &net.OpError{Op: "write", Net: "tcp", Source: c.local, Addr: c.remote, Err: err}
		}
		done += n
	}
	return done, nil
}

// Close shuts the connection down, which ends a read or write blocked on
// it; the descriptor stays until release.
func (c *fdConn) Close() error {
	c.once.Do(func() { _ = unix.Shutdown(c.fd, unix.SHUT_RDWR) })
	return nil
}

// CloseWrite shuts down the sending side only.
func (c *fdConn) CloseWrite() error {
	if err := unix.Shutdown(c.fd, unix.SHUT_WR); err != nil {
		return os.NewSyscallError("shutdown", err)
	}
	return nil
}

// ready ends the handshake: no more deadlines; from now on the engine
// reads and writes the socket without blocking.
func (c *fdConn) ready() error {
	if err := c.SetDeadline(time.Time{}); err != nil {
		return fmt.Errorf("clear the handshake's deadline: %w", err)
	}
	return nil
}

// release closes the descriptor, once no read or write can be running.
func (c *fdConn) release() {
	_ = c.Close()
	c.released.Do(func() { _ = unix.Close(c.fd) })
}

func (c *fdConn) LocalAddr() net.Addr  { return c.local }
func (c *fdConn) RemoteAddr() net.Addr { return c.remote }

func (c *fdConn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.SetWriteDeadline(t))
}
func (c *fdConn) SetReadDeadline(t time.Time) error  { return c.deadline(unix.SO_RCVTIMEO, &c.rdl, t) }
func (c *fdConn) SetWriteDeadline(t time.Time) error { return c.deadline(unix.SO_SNDTIMEO, &c.wdl, t) }

// deadline records t as the deadline of the reads or writes (none for the
// zero time) and sets the socket's timeout to the time left until it.
func (c *fdConn) deadline(opt int, dl *atomic.Int64, t time.Time) error {
	var ns int64
	if !t.IsZero() {
		ns = max(t.UnixNano(), 1)
	}
	dl.Store(ns)
	return c.timeout(opt, ns)
}

// arm sets the socket's receive or send timeout to the time left until
// the deadline dl before a read or write, and reports
// os.ErrDeadlineExceeded once it has passed.
func (c *fdConn) arm(opt int, dl *atomic.Int64) error {
	ns := dl.Load()
	if ns == 0 {
		return nil
	}
	if time.Until(time.Unix(0, ns)) <= 0 {
		return os.ErrDeadlineExceeded
	}
	return c.timeout(opt, ns)
}

// timeout sets the socket's receive or send timeout to the time left
// until the deadline ns, in Unix nanoseconds (none for 0).
func (c *fdConn) timeout(opt int, ns int64) error {
	var tv unix.Timeval
	if ns != 0 {
		tv = unix.NsecToTimeval(max(time.Until(time.Unix(0, ns)), time.Microsecond).Nanoseconds())
	}
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, opt, &tv); err != nil {
		name := "SO_RCVTIMEO"
		if opt == unix.SO_SNDTIMEO {
			name = "SO_SNDTIMEO"
		}
		return os.NewSyscallError("setsockopt "+name, err)
	}
	return nil
}
