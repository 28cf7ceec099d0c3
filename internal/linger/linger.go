// Package linger closes a connection without resetting it, so that what
// this end wrote last (a refusal, say) reaches the peer.
package linger

import (
	"io"
	"net"
	"time"
)

// Close closes conn's sending side, reads and drops what the peer has
// sent or sends for up to d (at most n bytes, until the peer closes its
// side), then closes conn. A connection closed with bytes unread is reset,
// and a reset can destroy what this end wrote last before the peer reads
// it. A connection without a sending side to close on its own (neither TCP
// nor Unix) is closed at once. It returns Close's error.
func Close(conn net.Conn, d time.Duration, n int64) error {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = conn.SetReadDeadline(time.Now().Add(d))
		_, _ = io.CopyN(io.Discard, conn, n)
	}
	return conn.Close()
}
