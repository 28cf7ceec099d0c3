package connpeek

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/internal/toolproc"
)

// failedAfterData reports whether the socket fd has an error waiting
// behind bytes not yet read, without reading either.
func failedAfterData(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, 0); err != nil || fds[0].Revents&unix.POLLERR == 0 {
		return false
	}
	unread, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	return err == nil && unread > 0
}

// TestPeekDataBeforeReset: bytes that came before a reset are Data, and
// stay readable.
func TestPeekDataBeforeReset(t *testing.T) {
	a, b := toolproc.TCPPair(t)
	_, err := b.Write([]byte{9})
	require.NoError(t, err)
	require.NoError(t, b.(*net.TCPConn).SetLinger(0))
	require.NoError(t, b.Close())
	raw, err := a.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var reset bool
		require.NoError(t, raw.Control(func(fd uintptr) { reset = failedAfterData(int(fd)) }))
		return reset
	}, 5*time.Second, time.Millisecond, "the reset arrives")
	s, first := Peek(a)
	require.Equal(t, Data, s)
	require.Equal(t, byte(9), first)
}
