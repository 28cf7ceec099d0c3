//go:build cgo && linux

package emulate

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestKernelEventFileWriteRefused: the event files (the async event
// descriptor, a completion channel) are opened read-only
// (anon_inode_getfile with O_RDONLY), so a write to one is vfs_write's
// EBADF.
func TestKernelEventFileWriteRefused(t *testing.T) {
	k, a, fd := objectKernel(t)
	ch, en := createCompChannelCmd(k, a, fd)
	require.Zero(t, en)
	buf, n := a.writeCmd(cmdQueryDevice, respCore(a.base), queryDevRespSize/4)
	_, en = k.write(ch, buf, n)
	require.Equal(t, unix.EBADF, en, "a write to a completion channel")
}
