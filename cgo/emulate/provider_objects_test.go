//go:build cgo && linux

package emulate_test

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// TestCgoProviderObjects allocates protection domains and registers memory
// through the kit's cgo provider (ibv_alloc_pd, ibv_reg_mr, ibv_dereg_mr,
// ibv_dealloc_pd of rdma-core unmodified) and checks the model has the
// regions under the keys rdma-core returned.
func TestCgoProviderObjects(t *testing.T) {
	f := emulate.Fabric()
	require.NotNil(t, f, "the emulation is on")
	d, err := verbs.Open("")
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
	info, ok := simadopt.LookupMR(f, mr.LKey())
	require.True(t, ok, "the model has the region under the lkey rdma-core got")
	require.Equal(t, mr.RKey(), info.Key)
	require.Equal(t, uint64(uintptr(buf.Pointer())), info.Addr)
	require.Equal(t, uint64(1<<16), info.Length)
	require.Equal(t, access, info.Access)

	mr2, err := pd2.RegisterMemory(buf.Pointer(), 4096, ctx.AccessLocalWrite)
	require.NoError(t, err)
	info2, ok := simadopt.LookupMR(f, mr2.LKey())
	require.True(t, ok)
	require.NotEqual(t, info.PDN, info2.PDN, "each PD has its own number")
	require.NotEqual(t, mr.LKey(), mr2.LKey())

	_, err = pd.RegisterMemory(buf.Pointer(), 4096, ctx.AccessRemoteWrite)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument, "remote write without local write: EINVAL from the kernel")
	_, err = pd.RegisterMemory(buf.Pointer(), 0, ctx.AccessLocalWrite)
	require.Error(t, err, "zero length")

	destroys := emulate.CallCount("ioctl MR_DESTROY")
	require.NoError(t, mr.Close(), "ibv_dereg_mr")
	if os.Getenv(emulate.EnvABI) != emulate.ABIWrite {
		require.Equal(t, destroys+1, emulate.CallCount("ioctl MR_DESTROY"), "the ioctl method libibverbs tries first")
	}
	_, ok = simadopt.LookupMR(f, info.Key)
	require.False(t, ok, "deregistered on the model")
	require.NoError(t, mr2.Close())
	require.NoError(t, pd.Close(), "ibv_dealloc_pd")
	require.NoError(t, pd2.Close())
}

// TestCgoProviderCompletionQueues creates completion queues through the
// kit's cgo provider (ibv_create_comp_channel, mlx5dv_create_cq,
// mlx5dv_init_obj, ibv_destroy_cq) and checks the model has each one over
// the ring and doorbell record libmlx5 allocated, under the CQN libmlx5
// reports, and that a CQE the model writes is in the ring the data plane
// reads.
func TestCgoProviderCompletionQueues(t *testing.T) {
	f := emulate.Fabric()
	require.NotNil(t, f, "the emulation is on")
	maps := emulate.MappingCount()
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer closeAndCollect(t, d, maps)
	attr, err := d.Query()
	require.NoError(t, err)

	for _, c := range []ctx.CompletionQueueConfig{
		{Depth: 1},
		{Depth: 100, EventChannel: true},
		{Depth: 255, CQESize: 128, CompVector: attr.CompVectors - 1},
	} {
		ioctls, writes := emulate.CallCount("ioctl CQ_CREATE"), emulate.CallCount("write CREATE_CQ")
		cq, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: c})
		require.NoError(t, err, "%+v", c)
		if os.Getenv(emulate.EnvABI) == emulate.ABIWrite {
			require.Equal(t, writes+1, emulate.CallCount("write CREATE_CQ"), "the write command, without the ioctl framework")
		} else {
			require.Equal(t, ioctls+1, emulate.CallCount("ioctl CQ_CREATE"), "the ioctl method libibverbs tries first")
			require.Equal(t, writes, emulate.CallCount("write CREATE_CQ"))
		}
		desc := cq.Descriptor()
		info, ok := simadopt.LookupCQ(f, desc.CQN)
		require.True(t, ok, "the model has CQN %#x", desc.CQN)
		require.Equal(t, desc.Buf, info.Ring, "the model adopted libmlx5's ring")
		require.Equal(t, desc.DBRec, info.DBRec, "and its doorbell record")
		require.Equal(t, desc.CQECnt, info.Count)
		require.Equal(t, desc.CQESize, info.CQESize)
		require.GreaterOrEqual(t, desc.CQECnt, c.Depth+1)
		if c.EventChannel {
			require.GreaterOrEqual(t, cq.EventFD(), 0)
		}

		var img [prm.CQE64Size]byte
		img[prm.CQEOpOwn] = prm.OpOwn(prm.CQEReqErr, prm.CQEFormatNone, false, 0)
		require.NoError(t, f.InjectCQE(desc.CQN, img))
		last := unsafe.Add(desc.Buf, desc.CQESize-prm.CQE64Size)
		require.Equal(t, prm.CQEReqErr, prm.OpOwnOpcode(*(*byte)(unsafe.Add(last, prm.CQEOpOwn))), "the CQE is where libmlx5 polls")

		destroys := emulate.CallCount("ioctl CQ_DESTROY") + emulate.CallCount("write DESTROY_CQ")
		require.NoError(t, cq.Close(), "ibv_destroy_cq")
		require.Equal(t, destroys+1, emulate.CallCount("ioctl CQ_DESTROY")+emulate.CallCount("write DESTROY_CQ"))
		_, ok = simadopt.LookupCQ(f, desc.CQN)
		require.False(t, ok, "destroyed on the model")
	}
}

// closeAndCollect closes a device whose queues handed out their memory:
// ibv_close_device runs once that memory is collected, which the test
// waits for (the UAR pages unmapped) so that no descriptor is left open.
func closeAndCollect(t *testing.T, d *verbs.Device, maps int) {
	require.NoError(t, d.Close())
	deadline := time.Now().Add(10 * time.Second)
	for emulate.MappingCount() != maps && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, maps, emulate.MappingCount(), "ibv_close_device ran once the queue memory was collected")
}

// TestContextObjects goes through the kit's own control plane, ctx.Open
// with the hardware provider (the cgo provider over rdma-core), as an
// application does: a PD, a registered buffer and a CQ, each checked on
// the model.
func TestContextObjects(t *testing.T) {
	f := emulate.Fabric()
	require.NotNil(t, f, "the emulation is on")
	maps := emulate.MappingCount()
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware})
	require.NoError(t, err)
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	buf, err := ctx.AllocBuffer(1<<14, ctx.BufferOptions{})
	require.NoError(t, err)
	defer buf.Close()
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteRead)
	require.NoError(t, err)
	info, ok := simadopt.LookupMR(f, mr.LKey())
	require.True(t, ok, "the model has the region under its lkey")
	require.Equal(t, uint64(mr.Addr()), info.Addr)
	require.Equal(t, mr.Len(), info.Length)
	require.Equal(t, mr.RKey(), info.Key)

	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 31})
	require.NoError(t, err)
	cqInfo, ok := simadopt.LookupCQ(f, cq.CQN())
	require.True(t, ok, "the model has CQN %#x", cq.CQN())
	require.Equal(t, provider.CQDescriptor(cq).Buf, cqInfo.Ring)
	require.Equal(t, uint32(32), cqInfo.Count)

	cqn, key := cq.CQN(), mr.LKey()
	require.NoError(t, c.Close())
	_, ok = simadopt.LookupCQ(f, cqn)
	require.False(t, ok, "closing the Context destroys the CQ on the model")
	_, ok = simadopt.LookupMR(f, key)
	require.False(t, ok, "and deregisters the memory")
	deadline := time.Now().Add(10 * time.Second)
	for emulate.MappingCount() != maps && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, maps, emulate.MappingCount(), "the device closed once the queue memory was collected")
}

// TestCgoProviderDMABufThroughRdmaCore registers a dma-buf through
// rdma-core's ibv_reg_dmabuf_mr (REG_DMABUF_MR, whose descriptor is a
// 4-byte input attribute) and checks the emulated kernel reaches the
// driver's descriptor lookup, as a kernel does: a descriptor that is not
// open is EBADF, a memfd EINVAL (dma_buf_get).
func TestCgoProviderDMABufThroughRdmaCore(t *testing.T) {
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	defer func() { require.NoError(t, pd.Close()) }()
	_, err = pd.RegisterDMABuf(1<<20, 0, 4096, 0, ctx.AccessLocalWrite)
	require.ErrorIs(t, err, syscall.EBADF, "a descriptor that is not open")
	fd, err := unix.MemfdCreate("not-a-dmabuf", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(fd)
	_, err = pd.RegisterDMABuf(fd, 0, 4096, 0, ctx.AccessLocalWrite)
	require.ErrorIs(t, err, syscall.EINVAL, "a memfd is not a dma-buf")
}
