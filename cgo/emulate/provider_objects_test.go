//go:build cgo && linux

package emulate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo"
	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestCgoProviderObjects allocates protection domains and registers memory
// through the kit's cgo provider (ibv_alloc_pd, ibv_reg_mr, ibv_dereg_mr,
// ibv_dealloc_pd of rdma-core unmodified) and checks the model has the
// regions under the keys rdma-core returned.
func TestCgoProviderObjects(t *testing.T) {
	f := emulate.Fabric()
	require.NotNil(t, f, "the emulation is on")
	d, err := cgo.Open("")
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()

	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err, "ibv_alloc_pd")
	pd2, err := d.AllocProtectionDomain()
	require.NoError(t, err)

	buf, err := ctx.AllocBuffer(1<<16, ctx.BufferOptions{})
	require.NoError(t, err)
	defer buf.Close()
	access := ctx.AccessLocalWrite | ctx.AccessRemoteWrite | ctx.AccessRemoteRead | ctx.AccessRemoteAtomic
	mr, err := pd.RegisterMemory(buf.Pointer(), 1<<16, access)
	require.NoError(t, err, "ibv_reg_mr")
	info, ok := f.MemoryRegion(mr.LKey())
	require.True(t, ok, "the model has the region under the lkey rdma-core got")
	require.Equal(t, mr.RKey(), info.Key)
	require.Equal(t, uint64(uintptr(buf.Pointer())), info.Addr)
	require.Equal(t, uint64(1<<16), info.Length)
	require.Equal(t, access, info.Access)

	mr2, err := pd2.RegisterMemory(buf.Pointer(), 4096, ctx.AccessLocalWrite)
	require.NoError(t, err)
	info2, ok := f.MemoryRegion(mr2.LKey())
	require.True(t, ok)
	require.NotEqual(t, info.PDN, info2.PDN, "each PD has its own number")
	require.NotEqual(t, mr.LKey(), mr2.LKey())

	_, err = pd.RegisterMemory(buf.Pointer(), 4096, ctx.AccessRemoteWrite)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument, "remote write without local write: EINVAL from the kernel")
	_, err = pd.RegisterMemory(buf.Pointer(), 0, ctx.AccessLocalWrite)
	require.Error(t, err, "zero length")

	require.NoError(t, mr.Close(), "ibv_dereg_mr")
	_, ok = f.MemoryRegion(info.Key)
	require.False(t, ok, "deregistered on the model")
	require.NoError(t, mr2.Close())
	require.NoError(t, pd.Close(), "ibv_dealloc_pd")
	require.NoError(t, pd2.Close())
}
