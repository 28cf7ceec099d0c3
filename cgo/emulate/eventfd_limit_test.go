//go:build cgo && linux

package emulate

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestEventFileBothEndsUnderLimit: an event file (a completion channel
// here) is a pipe whose write end the interposer must be able to mark, so
// both ends must be below the interposer's table of maxFD descriptors.
// With the lowest free descriptor at maxFD-1 the read end fits and the
// write end does not: CREATE_COMP_CHANNEL is EMFILE, as where a kernel has
// no descriptor left, and nothing is left open. It needs a descriptor
// limit above maxFD (else it is skipped); make test runs it in a build
// with the table lowered to 4096 (CGO_CFLAGS=-DMK_EMU_MAX_FDS=4096).
func TestEventFileBothEndsUnderLimit(t *testing.T) {
	var lim unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &lim))
	if lim.Cur < maxFD+64 {
		raised := unix.Rlimit{Cur: maxFD + 64, Max: max(lim.Max, maxFD+64)}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &raised); err != nil {
			t.Skipf("the test needs %d descriptors (limit %d/%d): %v", maxFD+64, lim.Cur, lim.Max, err)
		}
		t.Cleanup(func() { _ = unix.Setrlimit(unix.RLIMIT_NOFILE, &lim) })
	}
	k, a, fd := objectKernel(t)
	// Fill every descriptor below maxFD-1.
	var fill []int
	t.Cleanup(func() {
		for _, d := range fill {
			_ = unix.Close(d)
		}
	})
	for {
		d, err := unix.Dup(fd)
		require.NoError(t, err)
		if d >= maxFD-1 {
			require.NoError(t, unix.Close(d))
			break
		}
		fill = append(fill, d)
	}
	ch, en := createCompChannelCmd(k, a, fd)
	require.Equal(t, unix.EMFILE, en, "a channel whose write end would be descriptor %d (read end %d)", maxFD, ch)
	d, err := unix.Dup(fd)
	require.NoError(t, err)
	require.Equal(t, maxFD-1, d, "nothing left open")
	require.NoError(t, unix.Close(d))
}
