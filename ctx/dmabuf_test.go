package ctx_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// The fake provider has no dma-buf support: RegisterDMABuf says so after
// the provider-independent checks, and leaves the PD as it was.
func TestRegisterDMABufNotSupported(t *testing.T) {
	f, c := openFake(t)
	defer c.Close()
	w := build(t, c)
	n := len(f.log)
	mr, err := w.pd.RegisterDMABuf(0, 0, 4096, 0, ctx.AccessLocalWrite)
	require.Nil(t, mr)
	require.ErrorIs(t, err, ctx.ErrNotSupported)
	require.Contains(t, err.Error(), "ibv_reg_dmabuf_mr")
	require.Len(t, f.log, n)
	// Arguments the kernel would refuse are refused before the provider
	// is asked, with the errno the kernel gives.
	_, err = w.pd.RegisterDMABuf(-1, 0, 4096, 0, ctx.AccessLocalWrite)
	require.ErrorIs(t, err, unix.EBADF)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Contains(t, err.Error(), "ctx: register dma-buf MR: ibv_reg_dmabuf_mr fd -1: EBADF")
	_, err = w.pd.RegisterDMABuf(0, 0, 0, 0, ctx.AccessLocalWrite)
	require.ErrorIs(t, err, unix.EINVAL)
	page := uint64(os.Getpagesize())
	_, err = w.pd.RegisterDMABuf(0, 1, page, 2, ctx.AccessLocalWrite)
	require.ErrorIs(t, err, unix.EINVAL, "offset and iova at different page offsets")
	_, err = w.pd.RegisterDMABuf(0, 0, page, 0, ctx.AccessLocalWrite|ctx.AccessOnDemand)
	require.ErrorIs(t, err, unix.EINVAL, "REG_DMABUF_MR takes no on-demand paging flag")
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.NoError(t, w.pd.Close())
	_, err = w.pd.RegisterDMABuf(0, 0, page, 0, ctx.AccessLocalWrite)
	require.ErrorIs(t, err, ctx.ErrClosed)
}

// On-demand paging is refused for ordinary registrations too, as
// not supported rather than as an unknown flag.
func TestRegisterOnDemandNotSupported(t *testing.T) {
	_, c := openFake(t)
	defer c.Close()
	w := build(t, c)
	_, err := w.pd.RegisterBuffer(w.buf, ctx.AccessLocalWrite|ctx.AccessOnDemand)
	require.ErrorIs(t, err, ctx.ErrNotSupported)
	require.ErrorIs(t, err, unix.EOPNOTSUPP)
	require.Contains(t, err.Error(), "ibv_reg_mr access LocalWrite|OnDemand")
	require.Equal(t, "RemoteRead|OnDemand|0x100", (ctx.AccessRemoteRead | ctx.AccessOnDemand | 1<<8).String())
}

// A normal region's Addr is its host address and its Bytes are its memory;
// it is not a dma-buf region.
func TestRegisterMemoryNotDMABuf(t *testing.T) {
	_, c := openFake(t)
	defer c.Close()
	w := build(t, c)
	require.False(t, w.mr.DMABuf())
	require.Equal(t, uintptr(w.buf.Pointer()), w.mr.Addr())
	require.Len(t, w.mr.Bytes(), w.buf.Len())
}

// The access flags are checked in the kernel's order (ib_check_mr_access):
// remote write or atomic without local write, then unknown flags, both
// EINVAL, before on-demand paging (EOPNOTSUPP); a request that is wrong
// both ways is an invalid argument, not an unsupported one.
func TestRegisterAccessCheckOrder(t *testing.T) {
	_, c := openFake(t)
	defer c.Close()
	w := build(t, c)
	for _, access := range []ctx.Access{
		ctx.AccessRemoteWrite | ctx.AccessOnDemand,
		ctx.AccessRemoteAtomic | ctx.AccessOnDemand,
		ctx.AccessLocalWrite | ctx.AccessOnDemand | 1<<10, // a bit the kernel does not know either
	} {
		_, err := w.pd.RegisterBuffer(w.buf, access)
		require.ErrorIs(t, err, unix.EINVAL, "ibv_reg_mr %v", access)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "ibv_reg_mr %v", access)
		_, err = w.pd.RegisterDMABuf(0, 0, uint64(os.Getpagesize()), 0, access)
		require.ErrorIs(t, err, unix.EINVAL, "ibv_reg_dmabuf_mr %v", access)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "ibv_reg_dmabuf_mr %v", access)
	}
}
