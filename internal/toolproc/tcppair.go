package toolproc

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// TCPPair returns the two ends of a loopback TCP connection: the one that
// dialed and the one the listener accepted. Both close when the test ends.
func TCPPair(t testing.TB) (dialed, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	dialed, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	// The kernel completes the handshake before Accept: it returns at once.
	accepted, err = ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { _ = dialed.Close(); _ = accepted.Close() })
	return dialed, accepted
}

// ServeOne listens on a loopback port, hands the first connection to serve
// on a goroutine of its own (closing it once serve returns) and returns
// the address to dial. The listener closes when the test ends.
func ServeOne(t testing.TB, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	return ln.Addr().String()
}
