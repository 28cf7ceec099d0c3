package sim

import (
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestExternalDMABuf registers a dma-buf exported by a kernel driver (GPU
// memory from CUDA, udmabuf), handed to the test as descriptor
// MLX5KIT_TEST_DMABUF_FD of MLX5KIT_TEST_DMABUF_SIZE bytes, every byte
// holding MLX5KIT_TEST_DMABUF_FILL. Without them it is skipped. An exporter
// that lets the CPU map the buffer gets RDMA READ of the fill and RDMA
// WRITE then READ of a pattern; one that does not (GPU memory) gets
// EOPNOTSUPP and ctx.ErrNotSupported naming the verb, and no region.
func TestExternalDMABuf(t *testing.T) {
	fdEnv := os.Getenv("MLX5KIT_TEST_DMABUF_FD")
	if fdEnv == "" {
		t.Skip("MLX5KIT_TEST_DMABUF_FD names no exported dma-buf")
	}
	fd, err := strconv.Atoi(fdEnv)
	require.NoError(t, err)
	size, err := strconv.ParseUint(os.Getenv("MLX5KIT_TEST_DMABUF_SIZE"), 10, 64)
	require.NoError(t, err)
	fillByte, err := strconv.ParseUint(os.Getenv("MLX5KIT_TEST_DMABUF_FILL"), 10, 8)
	require.NoError(t, err)
	require.True(t, isDMABuf(fd), "fd %d is a dma-buf", fd)

	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{})
	const iova = 0x5500_0000_0000
	length := min(size, 8192)
	e.f.mu.Lock()
	before := len(e.f.mrs)
	e.f.mu.Unlock()
	dm, err := e.pd2.RegisterDMABuf(fd, 0, length, iova, allAccess)
	if err != nil {
		t.Logf("refused: %v", err)
		require.Nil(t, dm)
		require.ErrorIs(t, err, unix.EOPNOTSUPP)
		require.ErrorIs(t, err, ctx.ErrNotSupported)
		require.Contains(t, err.Error(), "ibv_reg_dmabuf_mr")
		require.Contains(t, err.Error(), "does not let the CPU map it")
		e.f.mu.Lock()
		require.Equal(t, before, len(e.f.mrs), "a refused registration changes nothing")
		e.f.mu.Unlock()
		return
	}
	t.Logf("registered %d bytes of the exported buffer", length)
	defer dm.Close()
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(iova, dm.RKey()), dataSeg(uint32(length), e.mr.LKey(), e.addr(0)))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	for i, b := range e.mem(0, int(length)) {
		require.Equal(t, byte(fillByte), b, "byte %d of the exported buffer", i)
	}
	fill(e.mem(0, 1000), 21)
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(iova+64, dm.RKey()), dataSeg(1000, e.mr.LKey(), e.addr(0)))
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(iova+64, dm.RKey()), dataSeg(1000, e.mr.LKey(), e.addr(16384)))
	e.run()
	done := a.scq.drain()
	require.Len(t, done, 2)
	for _, c := range done {
		require.Equal(t, prm.CQEReq, c.op)
	}
	require.Equal(t, e.mem(0, 1000), e.mem(16384, 1000))
}
