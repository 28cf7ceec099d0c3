// Package connpeek looks at what a connection's peer has sent, or whether
// it has closed the connection, without reading anything from it.
package connpeek

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// State is what a look at a connection found.
type State int

const (
	// Open: the peer keeps the connection open and has sent nothing
	// unread, or the connection cannot be looked at (see Peek).
	Open State = iota
	// Data: bytes from the peer wait to be read; First is the first.
	Data
	// Closed: the peer closed the connection (end of file) with nothing
	// unread before the end.
	Closed
	// Reset: the peer reset the connection. On Linux also a connection
	// that failed otherwise (a timeout) with nothing unread before the
	// error; the error stays for the connection's reader.
	Reset
)

// Peek looks at conn without reading from it or waiting: it peeks at one
// byte (recv with MSG_PEEK|MSG_DONTWAIT) through the socket's descriptor,
// as RawConn.Control runs it, so a read deadline that has passed does not
// stop it. Where the connection has ended with an error and nothing
// unread (Linux: poll and SIOCINQ), it is Reset without the recv, which
// would take the error from the connection's reader. A conn that is not a
// socket of this process (a net.Pipe, a tls.Conn), or one closed here, is
// Open: nothing can be told.
func Peek(conn net.Conn) (s State, first byte) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return Open, 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return Open, 0
	}
	var b [1]byte
	var n int
	var rerr error
	var ended bool
	if err := raw.Control(func(fd uintptr) {
		if ended = failed(int(fd)); ended {
			return
		}
		n, _, rerr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	}); err != nil {
		return Open, 0
	}
	switch {
	case ended:
		return Reset, 0
	case rerr == nil && n == 0:
		return Closed, 0
	case rerr == nil:
		return Data, b[0]
	case errors.Is(rerr, unix.ECONNRESET):
		return Reset, 0
	}
	return Open, 0
}
