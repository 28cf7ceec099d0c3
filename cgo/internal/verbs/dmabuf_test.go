//go:build cgo && linux

package verbs_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	. "github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestHardwareDMABufRefused checks that ibv_reg_dmabuf_mr's refusals come
// back as a *VerbError naming the verb and the errno. A memfd is not a
// dma-buf to the kernel (only the software HCA takes one in its place).
func TestHardwareDMABufRefused(t *testing.T) {
	d := hwDevice(t)
	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	defer pd.Close()
	fd, err := unix.MemfdCreate("cgo-dmabuf", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(fd)
	require.NoError(t, unix.Ftruncate(fd, 1<<16))
	rw := ctx.AccessLocalWrite | ctx.AccessRemoteWrite
	for _, tc := range []struct {
		name  string
		fd    int
		len   uint64
		errno syscall.Errno
	}{
		{"negative fd", -1, 4096, syscall.EBADF},
		{"memfd is not a dma-buf", fd, 4096, syscall.EINVAL},
	} {
		mr, err := pd.RegisterDMABuf(tc.fd, 0, tc.len, 0, rw)
		require.Nil(t, mr, tc.name)
		if tc.fd >= 0 && (errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOTTY)) {
			// A kernel without dma-buf MRs (before Linux 5.12:
			// EOPNOTSUPP, or one without the ioctl interface: ENOTTY)
			// refuses every fd so.
			require.ErrorIs(t, err, ctx.ErrNotSupported, tc.name)
			require.Contains(t, err.Error(), "ibv_reg_dmabuf_mr", tc.name)
			t.Logf("%s: the kernel has no dma-buf MRs: %v", tc.name, err)
			continue
		}
		require.ErrorIs(t, err, tc.errno, tc.name)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, tc.name)
		require.Contains(t, err.Error(), "ibv_reg_dmabuf_mr", tc.name)
		require.Contains(t, err.Error(), unix.ErrnoName(tc.errno), tc.name)
	}
}

// A negative fd is refused before rdma-core is called, with the errno the
// kernel would give, and without a device.
func TestRegisterDMABufNegativeFD(t *testing.T) {
	mr, err := new(ProtectionDomain).RegisterDMABuf(-1, 0, 4096, 0, ctx.AccessLocalWrite)
	require.Nil(t, mr)
	var ve *VerbError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "ibv_reg_dmabuf_mr", ve.Verb)
	require.ErrorIs(t, err, syscall.EBADF)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Contains(t, err.Error(), "EBADF")
}
