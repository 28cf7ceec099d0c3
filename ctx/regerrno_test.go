package ctx_test

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestRegisterMemoryEmptyErrno: an empty registration is refused as
// ib_umem_get refuses a region of no pages, EINVAL, after the access
// flags are checked (ib_check_mr_access runs first: on-demand paging is
// EOPNOTSUPP), and the error names ibv_reg_mr, as RegisterDMABuf's of
// length 0 names ibv_reg_dmabuf_mr.
func TestRegisterMemoryEmptyErrno(t *testing.T) {
	_, c := openFake(t)
	defer c.Close()
	w := build(t, c)
	_, err := w.pd.RegisterMemory(nil, ctx.AccessLocalWrite)
	require.ErrorIs(t, err, syscall.EINVAL)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "register MR: ibv_reg_mr")
	var oe *ctx.OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, syscall.EINVAL, oe.Errno())
	_, err = w.pd.RegisterMemory(w.buf.Bytes()[:0], ctx.AccessOnDemand)
	require.ErrorIs(t, err, syscall.EOPNOTSUPP)
	require.ErrorIs(t, err, ctx.ErrNotSupported)
}

// TestRegisterMemoryOptionalAccess: the flags of the optional range
// (IBV_ACCESS_RELAXED_ORDERING, 1<<20, to 1<<29) are accepted, as
// ib_check_mr_access accepts them and a device that cannot honour them
// ignores them; a flag past the range is still unknown (EINVAL), and
// remote write without local write is still refused with one of them.
func TestRegisterMemoryOptionalAccess(t *testing.T) {
	_, c := openFake(t)
	defer c.Close()
	w := build(t, c)
	const relaxedOrdering = ctx.Access(1 << 20)
	for _, a := range []ctx.Access{relaxedOrdering, ctx.AccessLocalWrite | relaxedOrdering, ctx.AccessLocalWrite | 1<<29} {
		mr, err := w.pd.RegisterBuffer(w.buf, a)
		require.NoError(t, err, "%v", a)
		require.NoError(t, mr.Close())
	}
	for _, a := range []ctx.Access{ctx.AccessLocalWrite | 1<<30, ctx.AccessRemoteWrite | relaxedOrdering} {
		_, err := w.pd.RegisterBuffer(w.buf, a)
		require.ErrorIs(t, err, syscall.EINVAL, "%v", a)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%v", a)
	}
}

// TestRegisterMemoryFlushAccess: IB_ACCESS_FLUSH_GLOBAL and
// IB_ACCESS_FLUSH_PERSISTENT (1<<8, 1<<9) are known to the kernel, which
// refuses them on a device without the flush capabilities, as every
// mlx5 device is, with EOPNOTSUPP after the EINVAL checks; they were
// refused as unknown flags (EINVAL).
func TestRegisterMemoryFlushAccess(t *testing.T) {
	_, c := openFake(t)
	defer c.Close()
	w := build(t, c)
	for _, a := range []ctx.Access{ctx.AccessLocalWrite | 1<<8, ctx.AccessLocalWrite | 1<<9} {
		_, err := w.pd.RegisterBuffer(w.buf, a)
		require.ErrorIs(t, err, syscall.EOPNOTSUPP, "%v", a)
		require.ErrorIs(t, err, ctx.ErrNotSupported, "%v", a)
		require.ErrorContains(t, err, "ibv_reg_mr", "%v", a)
	}
	_, err := w.pd.RegisterBuffer(w.buf, ctx.AccessRemoteWrite|1<<8)
	require.ErrorIs(t, err, syscall.EINVAL, "remote write without local write comes first")
}
