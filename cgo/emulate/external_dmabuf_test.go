//go:build cgo && linux

package emulate_test

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestCgoProviderExternalDMABuf registers a dma-buf exported by a kernel
// driver through rdma-core's ibv_reg_dmabuf_mr on the emulated kernel: the
// descriptor MLX5KIT_TEST_DMABUF_FD of MLX5KIT_TEST_DMABUF_SIZE bytes, each
// holding MLX5KIT_TEST_DMABUF_FILL (scripts/dmabuf-export.py hands one
// over; without it the test is skipped). A buffer the CPU can map
// (udmabuf) is registered at an IOVA of its own: an RDMA READ brings its
// fill, an RDMA WRITE of a pattern lands in it and a second READ brings the
// pattern back. One the CPU cannot map (GPU memory from CUDA) is refused
// with EOPNOTSUPP naming the verb, and nothing is registered.
func TestCgoProviderExternalDMABuf(t *testing.T) {
	fdEnv := os.Getenv("MLX5KIT_TEST_DMABUF_FD")
	if fdEnv == "" {
		t.Skip("MLX5KIT_TEST_DMABUF_FD names no exported dma-buf (scripts/dmabuf-export.py)")
	}
	fd, err := strconv.Atoi(fdEnv)
	require.NoError(t, err)
	size, err := strconv.ParseUint(os.Getenv("MLX5KIT_TEST_DMABUF_SIZE"), 10, 64)
	require.NoError(t, err)
	fill, err := strconv.ParseUint(os.Getenv("MLX5KIT_TEST_DMABUF_FILL"), 10, 8)
	require.NoError(t, err)
	const length = 8192
	require.GreaterOrEqual(t, size, uint64(length))
	mappable := true
	if m, err := unix.Mmap(fd, 0, length, unix.PROT_READ, unix.MAP_SHARED); err != nil {
		mappable = false
		t.Logf("the exporter does not let the CPU map the buffer: %v", err)
	} else {
		require.NoError(t, unix.Munmap(m))
	}

	d, pd := dmabufDevice(t)
	dm, err := pd.RegisterDMABuf(fd, 0, length, dmabufIOVA, dmabufAccess)
	if !mappable {
		require.Nil(t, dm)
		require.ErrorIs(t, err, syscall.EOPNOTSUPP)
		require.ErrorIs(t, err, ctx.ErrNotSupported)
		require.Contains(t, err.Error(), "ibv_reg_dmabuf_mr")
		// The PD has no region left behind: it closes (deferred) without EBUSY.
		return
	}
	require.NoError(t, err, "ibv_reg_dmabuf_mr of a buffer the CPU can map")
	defer func() { require.NoError(t, dm.Close()) }()
	checkDMABufData(t, d, pd, dm, dmabufIOVA, byte(fill))
}

// TestCgoProviderDMABufMemfdStandIn registers, through rdma-core's
// ibv_reg_dmabuf_mr, a memfd the emulated kernel takes as a dma-buf the
// CPU can map (a test cannot count on an exporter of such buffers, such
// as /dev/udmabuf, being there): the region is registered at
// an IOVA of its own with the model's keys, RDMA READ and WRITE reach the
// file's pages, and ibv_dereg_mr gives it back. A range past the file's
// end is EINVAL, as ib_umem_dmabuf_get answers.
func TestCgoProviderDMABufMemfdStandIn(t *testing.T) {
	const name = "dmabuf-stand-in"
	defer emulate.TakeMemfdAsDMABuf(name)()
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(fd)
	const size, fill = 16384, 0xA5
	_, err = unix.Pwrite(fd, bytes.Repeat([]byte{fill}, size), 0)
	require.NoError(t, err)

	d, pd := dmabufDevice(t)
	_, err = pd.RegisterDMABuf(fd, 4096, size, dmabufIOVA+4096, dmabufAccess)
	require.ErrorIs(t, err, syscall.EINVAL, "a range past the buffer's end")
	dm, err := pd.RegisterDMABuf(fd, 0, size, dmabufIOVA, dmabufAccess)
	require.NoError(t, err, "ibv_reg_dmabuf_mr")
	require.NotZero(t, dm.RKey())
	checkDMABufData(t, d, pd, dm, dmabufIOVA, fill)
	got := make([]byte, 8192)
	_, err = unix.Pread(fd, got, 0)
	require.NoError(t, err)
	require.NotEqual(t, bytes.Repeat([]byte{fill}, 8192), got, "the WRITE reached the file's pages")
	require.NoError(t, dm.Close(), "ibv_dereg_mr")
}

// The IOVA and access of the dma-buf regions of the tests.
const (
	dmabufIOVA   = 0x7700_0000_0000
	dmabufAccess = ctx.AccessLocalWrite | ctx.AccessRemoteWrite | ctx.AccessRemoteRead
)

// dmabufDevice opens the emulated device and a PD on it, both closed when
// the test ends (the device once its queues' memory is collected).
func dmabufDevice(t *testing.T) (*verbs.Device, *verbs.ProtectionDomain) {
	maps := emulate.MappingCount()
	d, err := verbs.Open("")
	require.NoError(t, err)
	t.Cleanup(func() { closeAndCollect(t, d, maps) })
	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pd.Close()) })
	return d, pd
}

// checkDMABufData reads a registered dma-buf region of 8 KiB at iova
// through an RC loopback of d: an RDMA READ brings fill, an RDMA WRITE of a
// pattern lands in it and a second READ brings the pattern back.
func checkDMABufData(t *testing.T, d *verbs.Device, pd *verbs.ProtectionDomain, dm *verbs.MemoryRegion, iova uint64, fill byte) {
	t.Helper()
	const length = 8192
	cq, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 16}})
	require.NoError(t, err)
	defer func() { require.NoError(t, cq.Close()) }()
	var qps [2]*verbs.QueuePair
	for i := range qps {
		qps[i], err = pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Caps: ctx.QueuePairCaps{SendDepth: 16, RecvDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		defer func(q *verbs.QueuePair) { require.NoError(t, q.Close()) }(qps[i])
	}
	connectLoopback(t, d, qps, ctx.AccessLocalWrite|ctx.AccessRemoteWrite|ctx.AccessRemoteRead)
	sq, poll := loopbackQueues(t, qps[0], cq)

	buf, err := ctx.AllocBuffer(2*length, ctx.BufferOptions{})
	require.NoError(t, err)
	defer buf.Close()
	mr, err := pd.RegisterMemory(buf.Pointer(), 2*length, ctx.AccessLocalWrite)
	require.NoError(t, err)
	defer func() { require.NoError(t, mr.Close()) }()
	b := buf.Bytes()
	base := uint64(uintptr(buf.Pointer()))
	complete := func(what string) {
		t.Helper()
		sq.RingDoorbell()
		waitCQEs(t, poll, 1, func(c *monocq.CQE) {
			require.Equal(t, prm.CQEReq, c.Opcode(), "%s: syndrome %#x", what, c.Syndrome())
		})
	}

	require.NoError(t, sq.Begin(1, wqebuilder.Signaled).RdmaRead(iova, dm.RKey()).SGE(base, length, mr.LKey()).Finish())
	complete("READ of the fill")
	require.Equal(t, bytes.Repeat([]byte{fill}, length), b[:length], "the READ brought the exporter's bytes")

	for i := range length {
		b[length+i] = byte(i*7 + 3)
	}
	require.NoError(t, sq.Begin(2, wqebuilder.Signaled).RdmaWrite(iova, dm.RKey()).SGE(base+length, length, mr.LKey()).Finish())
	complete("WRITE of the pattern")
	clear(b[:length])
	require.NoError(t, sq.Begin(3, wqebuilder.Signaled).RdmaRead(iova, dm.RKey()).SGE(base, length, mr.LKey()).Finish())
	complete("READ of the pattern")
	require.Equal(t, b[length:2*length], b[:length], "the WRITE landed in the dma-buf")
}
