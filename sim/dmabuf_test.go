package sim

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// memfd returns a memfd of size bytes named name and a separate shared
// mapping of all of it, through which the test checks what RDMA did.
func memfd(t *testing.T, name string, size int) (int, []byte) {
	t.Helper()
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Close(fd) })
	require.NoError(t, unix.Ftruncate(fd, int64(size)))
	view, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(view) })
	return fd, view
}

// mappingsOf counts this process's mappings of the memfd named name.
func mappingsOf(t *testing.T, name string) int {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return strings.Count(string(maps), "/memfd:"+name+" ")
}

// TestDMABufRDMA registers part of a memfd as a dma-buf region on the
// responder and runs RDMA WRITE and READ against it from a normal buffer,
// then uses it as the local side of both (lkey SGEs at iova addresses).
// Every byte is checked through the test's own mapping of the memfd.
func TestDMABufRDMA(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{})
	page := os.Getpagesize()
	const name = "sim-dmabuf-rdma"
	fd, view := memfd(t, name, 4*page)
	// Register pages 1..2 plus 100 bytes into the buffer: offset and iova
	// share their offset within the page, as the kernel requires.
	offset := uint64(page + 100)
	length := uint64(2 * page)
	iova := uint64(0x7700_0000_0000) + offset%uint64(page)
	require.Equal(t, 1, mappingsOf(t, name))
	dm, err := e.pd2.RegisterDMABuf(fd, offset, length, iova, allAccess)
	require.NoError(t, err)
	require.Equal(t, 2, mappingsOf(t, name), "the model maps the dma-buf")
	// Closing the fd does not end the registration: the mapping holds the file.
	require.NoError(t, unix.Close(fd))
	require.True(t, dm.DMABuf())
	require.Equal(t, uintptr(iova), dm.Addr(), "peers and local SGEs address a dma-buf region by its iova")
	require.Equal(t, length, dm.Len())
	require.Nil(t, dm.Bytes(), "a dma-buf region is not Go-addressable")
	require.Nil(t, dm.Pointer())

	// RDMA WRITE from a's normal buffer into the dma-buf region at iova+300.
	fill(e.mem(0, 1000), 11)
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(iova+300, dm.RKey()), dataSeg(1000, e.mr.LKey(), e.addr(0)))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	require.Equal(t, e.mem(0, 1000), view[offset+300:offset+1300], "the write lands in the memfd's pages")

	// RDMA READ of bytes the host put in the memfd into a's buffer.
	fill(view[offset+length-500:offset+length], 12)
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(iova+length-500, dm.RKey()), dataSeg(500, e.mr.LKey(), e.addr(4096)))
	e.run()
	c := a.scq.one(t)
	require.Equal(t, prm.OpRdmaRead, c.sendOp)
	require.Equal(t, view[offset+length-500:offset+length], e.mem(4096, 500))

	// Past the end of the region: a remote access error, nothing written.
	before := append([]byte(nil), view...)
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(iova+length-10, dm.RKey()), dataSeg(20, e.mr.LKey(), e.addr(0)))
	e.run()
	require.Equal(t, prm.CQEReqErr, a.scq.one(t).op)
	require.Equal(t, before, view)

	// The dma-buf region as the local side, on b: its SGEs name iova.
	b2 := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	a2 := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	e.connectRC(b2, a2, 7, 1)
	fill(view[offset:offset+700], 13)
	b2.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr(20000), e.mr.RKey()), dataSeg(700, dm.LKey(), iova))
	b2.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr(30000), e.mr.RKey()), dataSeg(64, dm.LKey(), iova+1000))
	fill(e.mem(30000, 64), 14)
	e.run()
	got := b2.scq.drain()
	require.Len(t, got, 2)
	require.Equal(t, prm.CQEReq, got[0].op)
	require.Equal(t, view[offset:offset+700], e.mem(20000, 700))
	require.Equal(t, e.mem(30000, 64), view[offset+1000:offset+1064], "the read lands in the memfd")

	// A host address in an SGE of the dma-buf region's lkey is refused.
	b2.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr(20000), e.mr.RKey()), dataSeg(8, dm.LKey(), uint64(uintptr(unsafe.Pointer(&view[offset])))))
	e.run()
	require.Equal(t, prm.CQEReqErr, b2.scq.one(t).op)

	require.NoError(t, dm.Close())
	require.Equal(t, 1, mappingsOf(t, name), "deregistration unmaps the model's mapping")
}

// TestDMABufReadOnly checks that a region without write access is mapped
// read-only and refuses a remote write.
func TestDMABufReadOnly(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{})
	fd, view := memfd(t, "sim-dmabuf-ro", os.Getpagesize())
	dm, err := e.pd2.RegisterDMABuf(fd, 0, 256, 0x1000, ctx.AccessRemoteRead)
	require.NoError(t, err)
	copy(view, "readable")
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(0x1000, dm.RKey()), dataSeg(8, e.mr.LKey(), e.addr(0)))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	require.Equal(t, "readable", string(e.mem(0, 8)))
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(0x1000, dm.RKey()), inlineSeg([]byte("written")))
	e.run()
	require.Equal(t, prm.CQEReqErr, a.scq.one(t).op)
	require.Equal(t, "readable", string(view[:8]))
}

func TestDMABufRefused(t *testing.T) {
	e := newEnv(t, Options{})
	page := uint64(os.Getpagesize())
	fd, _ := memfd(t, "sim-dmabuf-bad", int(4*page))
	// A descriptor number no file is open under (above any fd limit).
	const closedFD = 1 << 30
	pipe := make([]int, 2)
	require.NoError(t, unix.Pipe(pipe))
	defer unix.Close(pipe[0])
	defer unix.Close(pipe[1])
	rw := ctx.AccessLocalWrite | ctx.AccessRemoteWrite
	for _, tc := range []struct {
		name                 string
		fd                   int
		offset, length, iova uint64
		access               ctx.Access
		errno                syscall.Errno
		sentinel             error
	}{
		{"negative fd", -1, 0, page, 0, rw, unix.EBADF, ctx.ErrInvalidArgument},
		{"fd not open", closedFD, 0, page, 0, rw, unix.EBADF, ctx.ErrInvalidArgument},
		{"not a dma-buf", pipe[0], 0, page, 0, rw, unix.EINVAL, ctx.ErrInvalidArgument},
		{"length 0", fd, 0, 0, 0, rw, unix.EINVAL, ctx.ErrInvalidArgument},
		{"offset and iova at different page offsets", fd, 8, page, 0x1000, rw, unix.EINVAL, ctx.ErrInvalidArgument},
		{"beyond the file", fd, 3 * page, 2 * page, 0, rw, unix.EINVAL, ctx.ErrInvalidArgument},
		{"offset beyond the file", fd, 8 * page, 1, 0, rw, unix.EINVAL, ctx.ErrInvalidArgument},
		{"offset overflows", fd, ^uint64(0) - 10, 100, ^uint64(0) - 10, rw, unix.EINVAL, ctx.ErrInvalidArgument},
		{"remote write without local write", fd, 0, page, 0, ctx.AccessRemoteWrite, unix.EINVAL, ctx.ErrInvalidArgument},
		{"remote atomic without local write", fd, 0, page, 0, ctx.AccessRemoteAtomic, unix.EINVAL, ctx.ErrInvalidArgument},
		{"unknown access flag", fd, 0, page, 0, rw | 1<<9, unix.EINVAL, ctx.ErrInvalidArgument},
		{"on-demand paging, not a REG_DMABUF_MR flag", fd, 0, page, 0, rw | ctx.AccessOnDemand, unix.EINVAL, ctx.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.f.mu.Lock()
			before := len(e.f.mrs)
			e.f.mu.Unlock()
			mr, err := e.pd.RegisterDMABuf(tc.fd, tc.offset, tc.length, tc.iova, tc.access)
			require.Error(t, err)
			require.Nil(t, mr)
			require.ErrorIs(t, err, tc.errno)
			require.ErrorIs(t, err, tc.sentinel)
			require.Contains(t, err.Error(), "ibv_reg_dmabuf_mr")
			require.Contains(t, err.Error(), unix.ErrnoName(tc.errno))
			var oe *ctx.OpError
			require.True(t, errors.As(err, &oe))
			e.f.mu.Lock()
			require.Equal(t, before, len(e.f.mrs), "a refused registration changes nothing")
			e.f.mu.Unlock()
		})
	}
	// A closed PD refuses it too.
	pd, err := e.c.AllocProtectionDomain()
	require.NoError(t, err)
	require.NoError(t, pd.Close())
	_, err = pd.RegisterDMABuf(fd, 0, page, 0, rw)
	require.ErrorIs(t, err, ctx.ErrClosed)
}

// TestDMABufAfterDeviceFatal: after a fatal device error a dma-buf
// registration fails with EIO, as every other registration does (the
// kernel's create mkey command fails), and leaves no mapping of the file.
func TestDMABufAfterDeviceFatal(t *testing.T) {
	e := newEnv(t, Options{})
	const name = "sim-dmabuf-fatal"
	fd, _ := memfd(t, name, os.Getpagesize())
	require.NoError(t, e.f.FailDevice("sim0"))
	dm, err := e.pd.RegisterDMABuf(fd, 0, uint64(os.Getpagesize()), 0, allAccess)
	require.Nil(t, dm)
	require.ErrorIs(t, err, syscall.EIO)
	require.Contains(t, err.Error(), "fatal device error")
	require.Equal(t, 1, mappingsOf(t, name), "the refused registration left a mapping")
}
