package connpeek

import "golang.org/x/sys/unix"

// failed reports whether the socket fd has ended with an error that waits
// to be read, with no bytes before it: poll says it is hung up with an
// error (POLLHUP and POLLERR) and SIOCINQ counts nothing unread. A recv
// would return the error once and clear it, so that the connection's
// reader got end of file in its place.
func failed(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 0); err != nil || n == 0 {
		return false
	}
	if fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != unix.POLLERR|unix.POLLHUP {
		return false
	}
	unread, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	return err == nil && unread == 0
}
