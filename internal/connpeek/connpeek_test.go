package connpeek

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	done := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		done <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	b = <-done
	require.NotNil(t, b)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a, b
}

func TestPeek(t *testing.T) {
	a, b := tcpPair(t)
	s, _ := Peek(a)
	require.Equal(t, Open, s)

	_, err := b.Write([]byte{7, 8})
	require.NoError(t, err)
	require.Eventually(t, func() bool { s, _ := Peek(a); return s == Data }, 5*time.Second, time.Millisecond)
	s, first := Peek(a)
	require.Equal(t, Data, s)
	require.Equal(t, byte(7), first)
	buf := make([]byte, 2)
	_, err = a.Read(buf)
	require.NoError(t, err)
	require.Equal(t, []byte{7, 8}, buf, "Peek read nothing")

	require.NoError(t, b.Close())
	require.Eventually(t, func() bool { s, _ := Peek(a); return s == Closed }, 5*time.Second, time.Millisecond)
}

func TestPeekReset(t *testing.T) {
	a, b := tcpPair(t)
	// A close with unread data, or with SO_LINGER 0, resets.
	require.NoError(t, b.(*net.TCPConn).SetLinger(0))
	require.NoError(t, b.Close())
	require.Eventually(t, func() bool { s, _ := Peek(a); return s == Reset }, 5*time.Second, time.Millisecond)
}

func TestPeekNotASocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	require.NoError(t, b.Close())
	s, _ := Peek(a)
	require.Equal(t, Open, s, "a pipe cannot be looked at")
	c, _ := tcpPair(t)
	require.NoError(t, c.Close())
	s, _ = Peek(c)
	require.Equal(t, Open, s, "closed here")
}
