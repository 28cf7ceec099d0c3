//go:build cgo && linux

package emulate

import (
	"math/rand"
	"syscall"
	"testing"

	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// handleAttr is an object attribute (UVERBS_ATTR_IDR or _FD): the handle
// or descriptor in data, no length.
func handleAttr(id uint16, v uint64) testAttr {
	return testAttr{id: id, flags: attrFlagMandatory, data: v}
}

func u32Attr(id uint16, v uint32) testAttr {
	return testAttr{id: id, length: 4, flags: attrFlagMandatory, data: uint64(v)}
}

// ioctlCreateCQ runs CQ_CREATE with the given extra attributes and returns
// the errno, the handle written back, the cqe and the CQN.
func ioctlCreateCQ(k *kernel, a *arena, fd int, cqe uint32, vendor []byte, extra ...testAttr) (en syscall.Errno, h uint64, gotCQE, cqn uint32) {
	cqeOut, cqeAddr := a.alloc(4)
	drv, drvAddr := a.alloc(8)
	attrs := append([]testAttr{
		handleAttr(attrCreateCQHandle, 0),
		u32Attr(attrCreateCQCQE, cqe),
		inline(attrCreateCQUser, 0x55),
		u32Attr(attrCreateCQVector, 0),
		out(attrCreateCQRespCQE, cqeAddr, 4),
		{id: attrUHWIn, length: uint16(len(vendor)), flags: attrFlagMandatory, data: uint64(a.put(vendor))},
		out(attrUHWOut, drvAddr, 8),
	}, extra...)
	hdr, back := a.ioctlCmd(objectCQ, methodCQCreate, attrs...)
	en = k.ioctl(fd, rdmaVerbsIoctl, hdr)
	return en, attrData(back, 0), ne.Uint32(cqeOut), ne.Uint32(drv)
}

// TestKernelObjectIoctls runs the object methods libibverbs tries before
// the write commands: PD_DESTROY, MR_DESTROY, CQ_CREATE, CQ_DESTROY.
func TestKernelObjectIoctls(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	_, addr := a.alloc(4096)
	mr, _, _, en := regMRCmd(k, a, fd, pd, uint64(addr), 4096, uint64(addr), accessLocalWrite)
	require.Zero(t, en)

	destroy := func(object, method, attr uint16, h uint64) syscall.Errno {
		hdr, _ := a.ioctlCmd(object, method, handleAttr(attr, h))
		return k.ioctl(fd, rdmaVerbsIoctl, hdr)
	}
	require.Equal(t, unix.EBUSY, destroy(objectPD, methodPDDestroy, attrDestroyPDHandle, uint64(pd)), "PD with an MR")
	require.Equal(t, unix.EINVAL, destroy(objectMR, methodMRDestroy, attrDestroyMRHandle, uint64(pd)), "a PD handle is not an MR")
	require.Equal(t, unix.EINVAL, destroy(objectMR, methodMRDestroy, attrDestroyMRHandle, 1<<63), "a negative handle")
	require.Equal(t, unix.ENOENT, destroy(objectMR, methodMRDestroy, attrDestroyMRHandle, 1<<40), "a handle past 32 bits")
	hdr, _ := a.ioctlCmd(objectMR, methodMRDestroy, testAttr{id: attrDestroyMRHandle, length: 8, flags: attrFlagMandatory, data: uint64(mr)})
	require.Equal(t, unix.EINVAL, k.ioctl(fd, rdmaVerbsIoctl, hdr), "an object attribute with a length")
	hdr, _ = a.ioctlCmd(objectMR, methodMRDestroy)
	require.Equal(t, unix.EINVAL, k.ioctl(fd, rdmaVerbsIoctl, hdr), "no handle")
	require.Zero(t, destroy(objectMR, methodMRDestroy, attrDestroyMRHandle, uint64(mr)))
	require.Equal(t, unix.ENOENT, destroy(objectMR, methodMRDestroy, attrDestroyMRHandle, uint64(mr)), "destroyed twice")
	require.Zero(t, destroy(objectPD, methodPDDestroy, attrDestroyPDHandle, uint64(pd)))
	require.Equal(t, unix.ENOENT, destroy(objectPD, methodPDDestroy, attrDestroyPDHandle, uint64(pd)))
	require.Equal(t, 1, k.callCount("ioctl MR_DESTROY"))
	require.Equal(t, 1, k.callCount("ioctl PD_DESTROY"))

	ring, db := cqMemory(t, 128, 64)
	ch, en := createCompChannelCmd(k, a, fd)
	require.Zero(t, en)
	vendor := mlx5CQReq(addrOf(ring), addrOf(db), 64)
	en, h, cqe, cqn := ioctlCreateCQ(k, a, fd, 100, vendor, handleAttr(attrCreateCQChannel, uint64(ch)))
	require.Zero(t, en)
	require.Equal(t, uint32(127), cqe)
	info, ok := simadopt.LookupCQ(k.fabric, cqn)
	require.True(t, ok)
	require.Equal(t, uint32(128), info.Count)
	require.Contains(t, k.files[fd].uctx.objects, uint32(h), "the handle written back names the CQ")

	objects := len(k.files[fd].uctx.objects)
	for name, c := range map[string]struct {
		cqe   uint32
		extra []testAttr
		want  syscall.Errno
	}{
		"cqe above the limit": {uint32(cqLimit(k.devs[0].Attr.MaxCQE)), nil, unix.EINVAL},
		"channel not one":     {63, []testAttr{handleAttr(attrCreateCQChannel, uint64(fd))}, unix.EBADF},
		"channel not an int":  {63, []testAttr{handleAttr(attrCreateCQChannel, 1<<63)}, unix.EINVAL},
		"negative channel":    {63, []testAttr{handleAttr(attrCreateCQChannel, ^uint64(0))}, unix.EBADF},
		"event fd not async":  {63, []testAttr{handleAttr(attrCreateCQEventFD, uint64(ch))}, unix.EBADF},
		"ignore overrun flag": {63, []testAttr{{id: attrCreateCQFlags, length: 4, data: cqFlagIgnoreOverrun}}, unix.EOPNOTSUPP},
		"unknown flag":        {63, []testAttr{{id: attrCreateCQFlags, length: 4, data: 1 << 9}}, unix.EINVAL},
	} {
		en, _, _, _ := ioctlCreateCQ(k, a, fd, c.cqe, vendor, c.extra...)
		require.Equal(t, c.want, en, name)
	}
	en, _, _, _ = ioctlCreateCQ(k, a, fd, 63, vendor[:8])
	require.Equal(t, unix.EINVAL, en, "vendor request shorter than up to its flags")
	require.Len(t, k.files[fd].uctx.objects, objects, "refusals create nothing")

	resp, respAddr := a.alloc(destroyCQRespSize)
	ne.PutUint64(resp, ^uint64(0))
	hdr, back := a.ioctlCmd(objectCQ, methodCQDestroy, handleAttr(attrDestroyCQHandle, h), out(attrDestroyCQResp, respAddr, destroyCQRespSize))
	require.Zero(t, k.ioctl(fd, rdmaVerbsIoctl, hdr))
	require.Zero(t, ne.Uint64(resp), "no events reported")
	require.NotZero(t, attrFlags(back, 1)&attrFlagValidOut)
	_, ok = simadopt.LookupCQ(k.fabric, cqn)
	require.False(t, ok)
	hdr, _ = a.ioctlCmd(objectCQ, methodCQDestroy, handleAttr(attrDestroyCQHandle, h), out(attrDestroyCQResp, respAddr, destroyCQRespSize))
	require.Equal(t, unix.ENOENT, k.ioctl(fd, rdmaVerbsIoctl, hdr), "destroy of an unknown handle")
}

// TestKernelRandomObjectIoctls sends the object methods with random
// attributes and requires an errno of the kernel's and no crash.
func TestKernelRandomObjectIoctls(t *testing.T) {
	k, a, fd := objectKernel(t)
	ring, db := cqMemory(t, 256, 128)
	rng := rand.New(rand.NewSource(13))
	methods := [][2]uint16{{objectPD, methodPDDestroy}, {objectMR, methodMRDestroy}, {objectCQ, methodCQCreate}, {objectCQ, methodCQDestroy}}
	for i := 0; i < 2000; i++ {
		if rng.Intn(3) == 0 {
			vendor := mlx5CQReq([]uintptr{addrOf(ring), uintptr(a.sanitize(rng.Uint64()))}[rng.Intn(2)], addrOf(db), []uint32{64, 128, 7}[rng.Intn(3)])
			vendor = vendor[:rng.Intn(len(vendor)+1)]
			en, _, _, _ := ioctlCreateCQ(k, a, fd, uint32(rng.Intn(300)), vendor)
			require.True(t, allowedErrnos[en], "errno %v", en)
			continue
		}
		m := methods[rng.Intn(len(methods))]
		var attrs []testAttr
		for j := rng.Intn(6); j > 0; j-- {
			at := testAttr{id: uint16(rng.Intn(10)), length: uint16([]int{0, 4, 8, rng.Intn(64)}[rng.Intn(4)]), flags: uint16(rng.Intn(2)),
				data: a.sanitize(rng.Uint64())}
			if at.id == attrUHWIn || rng.Intn(3) == 0 {
				at.data = uint64(rng.Intn(16))
			}
			attrs = append(attrs, at)
		}
		hdr, _ := a.ioctlCmd(m[0], m[1], attrs...)
		en := k.ioctl(fd, rdmaVerbsIoctl, hdr)
		require.True(t, allowedErrnos[en], "errno %v", en)
	}
}

// TestCQCreateFailedWriteBackLeavesNoSource: a CQ_CREATE whose handle
// cannot be written back (the attribute array is read-only) fails with
// EFAULT and leaves nothing of the CQ behind, its async event source
// included, as the kernel, which writes the new handle back before the
// method runs, creates nothing.
func TestCQCreateFailedWriteBackLeavesNoSource(t *testing.T) {
	k, a, fd := objectKernel(t)
	ring, db := cqMemory(t, 64, 64)
	vendor := mlx5CQReq(addrOf(ring), addrOf(db), 64)
	_, cqeAddr := a.alloc(4)
	_, drvAddr := a.alloc(8)
	attrs := []testAttr{
		handleAttr(attrCreateCQHandle, 0),
		u32Attr(attrCreateCQCQE, 63),
		inline(attrCreateCQUser, 0x55),
		u32Attr(attrCreateCQVector, 0),
		out(attrCreateCQRespCQE, cqeAddr, 4),
		{id: attrUHWIn, length: uint16(len(vendor)), flags: attrFlagMandatory, data: uint64(a.put(vendor))},
		out(attrUHWOut, drvAddr, 8),
	}
	_, built := a.ioctlCmd(objectCQ, methodCQCreate, attrs...)
	page, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer func() { _ = unix.Munmap(page) }()
	n := ioctlHdrSize + len(attrs)*attrSize
	ne.PutUint16(page[ioctlOffLength:], uint16(n))
	ne.PutUint16(page[ioctlOffObject:], objectCQ)
	ne.PutUint16(page[ioctlOffMethod:], methodCQCreate)
	ne.PutUint16(page[ioctlOffNumAttrs:], uint16(len(attrs)))
	ne.PutUint32(page[ioctlOffDriverID:], driverMLX5)
	copy(page[ioctlHdrSize:], built[:len(attrs)*attrSize])
	require.NoError(t, unix.Mprotect(page, unix.PROT_READ))
	require.Equal(t, unix.EFAULT, k.ioctl(fd, rdmaVerbsIoctl, addrOf(page)))

	uc := k.files[fd].uctx
	require.Empty(t, uc.objects, "no CQ kept")
	require.Empty(t, uc.async.sources, "the failed CQ's async event source is kept")
}
