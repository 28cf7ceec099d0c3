//go:build cgo && linux

package emulate

import (
	"math/rand"
	"syscall"
	"testing"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// cqMemory is a ring and doorbell record as libmlx5 allocates them:
// page-aligned, mmap'd, every CQE invalid and owned by hardware.
func cqMemory(t *testing.T, entries, size int) (ring []byte, db []byte) {
	mem, err := unix.Mmap(-1, 0, entries*size+4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	ring = mem[:entries*size]
	for i := 0; i < entries; i++ {
		ring[i*size+size-1] = 0xf1
	}
	return ring, mem[entries*size:]
}

// mlx5CQReq is a struct mlx5_ib_create_cq.
func mlx5CQReq(ring, db uintptr, size uint32) []byte {
	b := make([]byte, mlx5CreateCQSize)
	ne.PutUint64(b[0:], uint64(ring))
	ne.PutUint64(b[8:], uint64(db))
	ne.PutUint32(b[16:], size)
	return b
}

// createCQCmd sends CREATE_CQ and returns the handle, cqe and CQN.
func createCQCmd(k *kernel, a *arena, fd int, cqe, vector uint32, channel int32, vendor []byte, vendorOut int) (h, gotCQE, cqn uint32, en syscall.Errno) {
	resp, respAddr := a.alloc(createCQRespSize + 8)
	core := respCore(respAddr, make([]byte, 24)...)
	ne.PutUint64(core[8:], cqUserHandle)
	ne.PutUint32(core[16:], cqe)
	ne.PutUint32(core[20:], vector)
	ne.PutUint32(core[24:], uint32(channel))
	core = append(core, vendor...)
	buf, n := a.writeCmd(cmdCreateCQ, core, (createCQRespSize+vendorOut)/4)
	if _, en = k.write(fd, buf, n); en != 0 {
		return 0, 0, 0, en
	}
	return ne.Uint32(resp), ne.Uint32(resp[4:]), ne.Uint32(resp[createCQRespSize:]), 0
}

func destroyCQCmd(k *kernel, a *arena, fd int, h uint32) (comp, async uint32, en syscall.Errno) {
	resp, respAddr := a.alloc(destroyCQRespSize)
	ne.PutUint64(resp, ^uint64(0))
	core := respCore(respAddr, make([]byte, 8)...)
	ne.PutUint32(core[8:], h)
	buf, n := a.writeCmd(cmdDestroyCQ, core, destroyCQRespSize/4)
	if _, en = k.write(fd, buf, n); en != 0 {
		return 0, 0, en
	}
	return ne.Uint32(resp), ne.Uint32(resp[4:]), 0
}

func createCompChannelCmd(k *kernel, a *arena, fd int) (int, syscall.Errno) {
	resp, respAddr := a.alloc(8)
	buf, n := a.writeCmd(cmdCreateCompChannel, respCore(respAddr), 1)
	if _, en := k.write(fd, buf, n); en != 0 {
		return -1, en
	}
	return int(ne.Uint32(resp)), 0
}

// TestKernelCompletionQueues creates CQs through the write commands over
// memory the test owns and checks the model adopted it, then every
// refusal with mlx5_ib's errno.
func TestKernelCompletionQueues(t *testing.T) {
	k, a, fd := objectKernel(t)
	ring, db := cqMemory(t, 64, 64)
	ringAddr, dbAddr := addrOf(ring), addrOf(db)

	ch, en := createCompChannelCmd(k, a, fd)
	require.Zero(t, en)
	require.True(t, k.events[ch].comp, "a completion channel descriptor")

	h, cqe, cqn, en := createCQCmd(k, a, fd, 63, 1, int32(ch), mlx5CQReq(ringAddr, dbAddr, 64), 8)
	require.Zero(t, en)
	require.Equal(t, uint32(63), cqe, "64 entries, less one")
	info, ok := simadopt.LookupCQ(k.fabric, cqn)
	require.True(t, ok, "the model has CQN %#x", cqn)
	require.Equal(t, unsafe.Pointer(&ring[0]), info.Ring)
	require.Equal(t, unsafe.Pointer(&db[0]), info.DBRec)
	require.Equal(t, uint32(64), info.Count)
	// The legacy command has no flags; libibverbs sends it for a CQ asked
	// to stamp its CQEs when libmlx5 says the kernel ignores the flag (a
	// ConnectX stamps every CQE).
	require.True(t, info.Timestamps, "a CQ from the write command stamps")

	// cqe is rounded up to a power of two above it.
	_, small := cqMemory(t, 64, 64)
	h2, cqe, _, en := createCQCmd(k, a, fd, 40, 0, -1, mlx5CQReq(ringAddr, addrOf(small), 64), 8)
	require.Zero(t, en)
	require.Equal(t, uint32(63), cqe)
	_, _, en = destroyCQCmd(k, a, fd, h2)
	require.Zero(t, en)

	objects := len(k.files[fd].uctx.objects)
	limit := uint32(cqLimit(k.devs[0].Attr.MaxCQE))
	good := func() []byte { return mlx5CQReq(ringAddr, dbAddr, 64) }
	with := func(off int, v ...byte) []byte { b := good(); copy(b[off:], v); return b }
	padded := func(b []byte) []byte { b[22] = mlx5CQFlagPad; return b }
	for name, c := range map[string]struct {
		cqe, vector uint32
		channel     int32
		vendor      []byte
		want        syscall.Errno
	}{
		"cqe above the limit":           {limit + 1, 0, -1, good(), unix.EINVAL},
		"cqe rounding above the limit":  {limit, 0, -1, good(), unix.EINVAL},
		"completion vector":             {63, uint32(k.devs[0].Attr.CompVectors), -1, good(), unix.EINVAL},
		"channel that is no descriptor": {63, 0, 1000, good(), unix.EBADF},
		"channel that is the node":      {63, 0, int32(fd), good(), unix.EBADF},
		"CQE size 32":                   {63, 0, -1, mlx5CQReq(ringAddr, dbAddr, 32), unix.EINVAL},
		"reserved0":                     {63, 0, -1, with(26, 1), unix.EINVAL},
		"reserved1":                     {63, 0, -1, with(28, 1), unix.EINVAL},
		"unknown flag":                  {63, 0, -1, with(22, 0x80), unix.EINVAL},
		"compression":                   {63, 0, -1, with(20, 1), unix.EOPNOTSUPP},
		"padding of 64-byte CQEs":       {63, 0, -1, padded(mlx5CQReq(ringAddr, dbAddr, 64)), unix.EOPNOTSUPP},
		"dynamic UAR index":             {63, 0, -1, with(22, mlx5CQFlagUARIndex), unix.EINVAL},
		"vendor data too short":         {63, 0, -1, good()[:21], unix.EINVAL},
		"no vendor data":                {63, 0, -1, nil, unix.EINVAL},
		"ring not mapped":               {63, 0, -1, mlx5CQReq(4096, dbAddr, 64), unix.EFAULT},
		"ring past the guard page":      {63, 0, -1, mlx5CQReq(a.guard-2048, dbAddr, 64), unix.EFAULT},
		"record not mapped":             {63, 0, -1, mlx5CQReq(ringAddr, 8, 64), unix.EFAULT},
		"record misaligned":             {63, 0, -1, mlx5CQReq(ringAddr, dbAddr+4, 64), unix.EINVAL},
		"ring misaligned":               {63, 0, -1, mlx5CQReq(ringAddr+8, dbAddr, 64), unix.EINVAL},
	} {
		vendorOut := 8
		_, _, _, en := createCQCmd(k, a, fd, c.cqe, c.vector, c.channel, c.vendor, vendorOut)
		require.Equal(t, c.want, en, name)
	}
	_, _, _, en = createCQCmd(k, a, fd, 63, 0, -1, good(), 0)
	// mlx5_ib_create_cq copies the 4 bytes whatever the driver buffer
	// (ib_copy_to_udata): none is a NULL one, EFAULT.
	require.Equal(t, unix.EFAULT, en, "no room for the CQN")
	require.Len(t, k.files[fd].uctx.objects, 1, "no CQ left beside the first")
	// 128-byte CQEs padded: the device reports cqe_128_always.
	require.True(t, k.devs[0].Attr.CQEPadding)
	ring128, _ := cqMemory(t, 64, 128)
	h3, _, _, en := createCQCmd(k, a, fd, 63, 0, -1, padded(mlx5CQReq(addrOf(ring128), dbAddr, 128)), 8)
	require.Zero(t, en, "128-byte CQEs padded")
	_, _, en = destroyCQCmd(k, a, fd, h3)
	require.Zero(t, en)
	require.Len(t, k.files[fd].uctx.objects, objects, "refusals create nothing")

	_, _, en = destroyCQCmd(k, a, fd, 0xbeef)
	require.Equal(t, unix.ENOENT, en, "destroy of an unknown handle")
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	_, _, en = destroyCQCmd(k, a, fd, pd)
	require.Equal(t, unix.EINVAL, en, "a PD handle is not a CQ")
	comp, async, en := destroyCQCmd(k, a, fd, h)
	require.Zero(t, en)
	require.Zero(t, comp, "no completion event reported")
	require.Zero(t, async, "no async event reported")
	_, ok = simadopt.LookupCQ(k.fabric, cqn)
	require.False(t, ok, "DESTROY_CQ removes it from the model")
	_, _, en = destroyCQCmd(k, a, fd, h)
	require.Equal(t, unix.ENOENT, en, "destroyed twice")

	// Closing the node destroys the CQs left.
	_, _, cqn, en = createCQCmd(k, a, fd, 63, 0, int32(ch), good(), 8)
	require.Zero(t, en)
	require.Zero(t, k.close(fd))
	_, ok = simadopt.LookupCQ(k.fabric, cqn)
	require.False(t, ok, "close destroys the CQs")
}

// TestKernelRandomCQCommands sends CQ commands with random fields and
// requires an errno of the kernel's and no crash.
func TestKernelRandomCQCommands(t *testing.T) {
	k, a, fd := objectKernel(t)
	ring, db := cqMemory(t, 256, 128)
	ch, en := createCompChannelCmd(k, a, fd)
	require.Zero(t, en)
	rng := rand.New(rand.NewSource(11))
	for i := 0; i < 2000; i++ {
		var en syscall.Errno
		switch rng.Intn(3) {
		case 0:
			addrs := []uintptr{addrOf(ring), addrOf(db), uintptr(a.sanitize(rng.Uint64()))}
			vendor := mlx5CQReq(addrs[rng.Intn(3)], addrs[rng.Intn(3)], []uint32{64, 128, rng.Uint32()}[rng.Intn(3)])
			if rng.Intn(4) == 0 {
				rng.Read(vendor[16:])
			}
			vendor = vendor[:rng.Intn(len(vendor)+1)]
			_, _, _, en = createCQCmd(k, a, fd, uint32(rng.Intn(512)), uint32(rng.Intn(6)),
				[]int32{-1, int32(ch), rng.Int31()}[rng.Intn(3)], vendor, 8*rng.Intn(2))
		case 1:
			_, _, en = destroyCQCmd(k, a, fd, uint32(rng.Intn(16)))
		case 2:
			core := make([]byte, 8+rng.Intn(48))
			rng.Read(core)
			ne.PutUint64(core, a.sanitize(ne.Uint64(core)))
			buf, n := a.writeCmd([]uint32{cmdCreateCompChannel, cmdCreateCQ, cmdDestroyCQ}[rng.Intn(3)], core, rng.Intn(6))
			_, en = k.write(fd, buf, n)
		}
		require.True(t, allowedErrnos[en], "errno %v", en)
	}
}
