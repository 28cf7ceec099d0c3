package sim

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// fdConn is a TCP connection of a link read and written with blocking
// system calls, not through Go's network poller. The engines and the
// programs on the software HCA poll in loops that keep every P busy; the
// scheduler then checks the poller only every few milliseconds, and a
// message would wait that long for its reader. A reader blocked in read(2)
// holds a thread of its own and is runnable as soon as the bytes arrive.
// Deadlines are the socket's receive and send timeouts.
type fdConn struct {
	fd            int
	local, remote net.Addr
	once          sync.Once
	released      sync.Once
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
		return nil, err
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
func (c *fdConn) CloseWrite() error { return unix.Shutdown(c.fd, unix.SHUT_WR) }

// ready ends the handshake: no more deadlines; from now on the engine
// reads and writes the socket without blocking.
func (c *fdConn) ready() error { return c.SetDeadline(time.Time{}) }

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
func (c *fdConn) SetReadDeadline(t time.Time) error  { return c.timeout(unix.SO_RCVTIMEO, t) }
func (c *fdConn) SetWriteDeadline(t time.Time) error { return c.timeout(unix.SO_SNDTIMEO, t) }

// timeout sets the socket's receive or send timeout to the time left
// until t (none for the zero time).
func (c *fdConn) timeout(opt int, t time.Time) error {
	var tv unix.Timeval
	if !t.IsZero() {
		tv = unix.NsecToTimeval(max(time.Until(t), time.Microsecond).Nanoseconds())
	}
	return unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, opt, &tv)
}
