package ctx_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestRegisterDMABufAccess: the kernel's REG_DMABUF_MR takes only local
// write, remote read, write and atomic and relaxed ordering
// (uverbs_get_flags32 refuses any other flag with EINVAL before
// ib_check_mr_access runs), so on-demand paging, the flush flags and the
// rest of the optional range are EINVAL there, where ibv_reg_mr says
// EOPNOTSUPP or accepts them. It checks the page offsets of offset and
// iova first, and a wrapping range before it looks the fd up.
func TestRegisterDMABufAccess(t *testing.T) {
	_, c := openFake(t)
	defer c.Close()
	w := build(t, c)
	page := uint64(os.Getpagesize())
	for _, a := range []ctx.Access{
		ctx.AccessLocalWrite | ctx.AccessOnDemand,
		ctx.AccessLocalWrite | 1<<8,
		ctx.AccessLocalWrite | 1<<21,
		ctx.AccessLocalWrite | ctx.AccessZeroBased,
	} {
		_, err := w.pd.RegisterDMABuf(0, 0, page, 0, a)
		require.ErrorIs(t, err, unix.EINVAL, "%v", a)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%v", a)
		require.ErrorContains(t, err, "ibv_reg_dmabuf_mr", "%v", a)
	}
	// Relaxed ordering passes the checks: the fake provider has no
	// dma-buf support.
	_, err := w.pd.RegisterDMABuf(0, 0, page, 0, ctx.AccessLocalWrite|1<<20)
	require.ErrorIs(t, err, ctx.ErrNotSupported)
	require.NotErrorIs(t, err, unix.EINVAL)
	// The kernel's order: page offsets, access, a wrapping range, then
	// the fd.
	_, err = w.pd.RegisterDMABuf(-1, 1, page, 2, ctx.AccessLocalWrite)
	require.ErrorIs(t, err, unix.EINVAL, "page offsets before the fd")
	_, err = w.pd.RegisterDMABuf(-1, 0, page, 0, ctx.AccessLocalWrite|ctx.AccessOnDemand)
	require.ErrorIs(t, err, unix.EINVAL, "access before the fd")
	_, err = w.pd.RegisterDMABuf(-1, page, ^uint64(0), page, ctx.AccessLocalWrite)
	require.ErrorIs(t, err, unix.EINVAL, "a wrapping range before the fd")
}
