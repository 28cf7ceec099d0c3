//go:build cgo && linux

package emulate

import (
	"math/rand"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// objectKernel is a test kernel with a context on node 0.
func objectKernel(t *testing.T) (*kernel, *arena, int) {
	k := testKernel(t, ctx.LinkLayerInfiniBand)
	a := newArena(t)
	fd := openNode(t, k, 0)
	en, _, _ := getContext(k, a, fd, ucontextReq(4, 0, 0))
	require.Zero(t, en)
	return k, a, fd
}

// allocPD sends ALLOC_PD and returns the handle and the pdn of the mlx5
// response.
func allocPDCmd(k *kernel, a *arena, fd int) (handle, pdn uint32, en syscall.Errno) {
	resp, respAddr := a.alloc(allocPDRespSize + 4)
	buf, n := a.writeCmd(cmdAllocPD, respCore(respAddr), (allocPDRespSize+4)/4)
	if _, en = k.write(fd, buf, n); en != 0 {
		return 0, 0, en
	}
	return ne.Uint32(resp), ne.Uint32(resp[allocPDRespSize:]), 0
}

func handleCmd(k *kernel, a *arena, fd int, cmd uint32, h uint32) syscall.Errno {
	core := make([]byte, 4)
	ne.PutUint32(core, h)
	buf, n := a.writeCmd(cmd, core, 0)
	_, en := k.write(fd, buf, n)
	return en
}

func regMRCmd(k *kernel, a *arena, fd int, pd uint32, start, length, iova uint64, access uint32) (h, lkey, rkey uint32, en syscall.Errno) {
	resp, respAddr := a.alloc(regMRRespSize)
	core := respCore(respAddr, make([]byte, 32)...)
	ne.PutUint64(core[8:], start)
	ne.PutUint64(core[16:], length)
	ne.PutUint64(core[24:], iova)
	ne.PutUint32(core[32:], pd)
	ne.PutUint32(core[36:], access)
	buf, n := a.writeCmd(cmdRegMR, core, regMRRespSize/4)
	if _, en = k.write(fd, buf, n); en != 0 {
		return 0, 0, 0, en
	}
	return ne.Uint32(resp), ne.Uint32(resp[4:]), ne.Uint32(resp[8:]), 0
}

// TestKernelHandlesLowestFree checks that object handles are allocated as
// the uverbs core allocates them: the lowest handle no object holds,
// from 0, so a destroyed object's handle goes to the next object created,
// whatever its kind.
func TestKernelHandlesLowestFree(t *testing.T) {
	k, a, fd := objectKernel(t)
	var hs []uint32
	for range 4 {
		h, _, en := allocPDCmd(k, a, fd)
		require.Zero(t, en)
		hs = append(hs, h)
	}
	require.Equal(t, []uint32{0, 1, 2, 3}, hs, "from 0, one after another")
	require.Zero(t, handleCmd(k, a, fd, cmdDeallocPD, hs[2]))
	require.Zero(t, handleCmd(k, a, fd, cmdDeallocPD, hs[1]))
	mem, addr := a.alloc(4096)
	_ = mem
	mr, _, _, en := regMRCmd(k, a, fd, hs[0], uint64(addr), 4096, uint64(addr), accessLocalWrite)
	require.Zero(t, en)
	require.Equal(t, hs[1], mr, "the lowest free handle, taken by an object of another kind")
	h, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	require.Equal(t, hs[2], h, "then the next free one")
	h, _, en = allocPDCmd(k, a, fd)
	require.Zero(t, en)
	require.Equal(t, uint32(4), h, "then past the highest")
	require.Equal(t, unix.EINVAL, handleCmd(k, a, fd, cmdDeallocPD, mr), "the reused handle names the MR now")
}

// TestKernelProtectionDomains allocates and frees PDs through the write
// commands and checks the kernel's refusals.
func TestKernelProtectionDomains(t *testing.T) {
	k, a, fd := objectKernel(t)
	h0, pdn0, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	h1, pdn1, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	require.NotEqual(t, h0, h1, "one handle per object")
	require.NotZero(t, pdn0, "mlx5 response carries the pdn")
	require.NotEqual(t, pdn0, pdn1)
	require.Equal(t, 2, k.callCount("write ALLOC_PD"))

	require.Zero(t, handleCmd(k, a, fd, cmdDeallocPD, h0))
	require.Equal(t, unix.ENOENT, handleCmd(k, a, fd, cmdDeallocPD, h0), "freed twice")
	require.Equal(t, unix.ENOENT, handleCmd(k, a, fd, cmdDeallocPD, 0xdead), "a handle that names nothing")

	// A PD with a memory region is busy.
	mem, addr := a.alloc(4096)
	_ = mem
	mr, _, _, en := regMRCmd(k, a, fd, h1, uint64(addr), 4096, uint64(addr), accessLocalWrite)
	require.Zero(t, en)
	require.Equal(t, unix.EBUSY, handleCmd(k, a, fd, cmdDeallocPD, h1))
	require.Equal(t, unix.EINVAL, handleCmd(k, a, fd, cmdDeallocPD, mr), "an MR handle is not a PD")
	require.Zero(t, handleCmd(k, a, fd, cmdDeregMR, mr))
	require.Zero(t, handleCmd(k, a, fd, cmdDeallocPD, h1))

	// Without a context, and a command too short.
	fd2 := openNode(t, k, 1)
	_, _, en = allocPDCmd(k, a, fd2)
	require.Equal(t, unix.EINVAL, en, "ALLOC_PD before GET_CONTEXT")
	buf, _ := a.writeCmd(cmdAllocPD, respCore(0), 1)
	_, en = k.write(fd, buf, cmdHdrSize+4)
	require.Equal(t, unix.EINVAL, en, "length disagrees with the header")
	buf, n := a.writeCmd(cmdAllocPD, respCore(a.guard), (allocPDRespSize+4)/4)
	_, en = k.write(fd, buf, n)
	require.Equal(t, unix.EFAULT, en, "response into memory the caller does not have")
	require.Empty(t, k.files[fd].uctx.objects, "a failed ALLOC_PD leaves nothing behind")
}

// TestKernelMemoryRegions registers memory through REG_MR and checks the
// model's region and every refusal with the kernel's errno.
func TestKernelMemoryRegions(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, pdn, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	_, addr := a.alloc(8192)
	start := uint64(addr)
	h, lkey, rkey, en := regMRCmd(k, a, fd, pd, start, 8192, start, accessLocalWrite|accessRemoteWrite|accessRemoteRead)
	require.Zero(t, en)
	info, ok := simadopt.LookupMR(k.fabric, lkey)
	require.True(t, ok, "the model has the region under its lkey")
	require.Equal(t, rkey, info.Key)
	require.Equal(t, start, info.Addr)
	require.Equal(t, uint64(8192), info.Length)
	require.Equal(t, pdn, info.PDN)
	require.Equal(t, ctx.AccessLocalWrite|ctx.AccessRemoteWrite|ctx.AccessRemoteRead, info.Access)

	objects := len(k.files[fd].uctx.objects)
	for name, c := range map[string]struct {
		pd            uint32
		start, length uint64
		iova          uint64
		access        uint32
		want          syscall.Errno
	}{
		"remote write without local write":  {pd, start, 64, start, accessRemoteWrite, unix.EINVAL},
		"remote atomic without local write": {pd, start, 64, start, accessAtomic | accessRemoteRead, unix.EINVAL},
		"unknown access bit":                {pd, start, 64, start, accessLocalWrite | 1<<12, unix.EINVAL},
		"on-demand paging":                  {pd, start, 64, start, accessLocalWrite | accessOnDemand, unix.EOPNOTSUPP},
		"flush to global visibility":        {pd, start, 64, start, accessLocalWrite | 1<<8, unix.EOPNOTSUPP},
		"flush to persistence":              {pd, start, 64, start, accessLocalWrite | 1<<9, unix.EOPNOTSUPP},
		"zero length":                       {pd, start, 0, start, accessLocalWrite, unix.EINVAL},
		"wraps":                             {pd, ^uint64(0) - 10, 64, ^uint64(0) - 10, accessLocalWrite, unix.EINVAL},
		"iova in another page offset":       {pd, start, 64, start + 8, accessLocalWrite, unix.EINVAL},
		"iova other than the address":       {pd, start, 64, start + 4096, accessLocalWrite, unix.EOPNOTSUPP},
		"unknown PD":                        {0xbeef, start, 64, start, accessLocalWrite, unix.EINVAL},
		"MR handle as PD":                   {h, start, 64, start, accessLocalWrite, unix.EINVAL},
		"into the guard page":               {pd, uint64(a.guard) - 64, 128, uint64(a.guard) - 64, accessLocalWrite, unix.EFAULT},
		"unmapped":                          {pd, 4096, 4096, 4096, 0, unix.EFAULT},
	} {
		_, _, _, en := regMRCmd(k, a, fd, c.pd, c.start, c.length, c.iova, c.access)
		require.Equal(t, c.want, en, name)
	}
	// Pages pinned for writing must be writable: a read-only mapping is
	// registered for reading only.
	ro, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer unix.Munmap(ro)
	roStart := uint64(uintptr(unsafe.Pointer(&ro[0])))
	_, _, _, en = regMRCmd(k, a, fd, pd, roStart, 4096, roStart, accessLocalWrite)
	require.Equal(t, unix.EFAULT, en, "read-only memory with local write")
	require.Len(t, k.files[fd].uctx.objects, objects, "refusals create nothing")
	roH, _, _, en := regMRCmd(k, a, fd, pd, roStart, 4096, roStart, accessRemoteRead)
	require.Zero(t, en, "read-only memory for remote reads")
	require.Zero(t, handleCmd(k, a, fd, cmdDeregMR, roH))

	require.Equal(t, unix.ENOENT, handleCmd(k, a, fd, cmdDeregMR, 0xbeef))
	require.Equal(t, unix.EINVAL, handleCmd(k, a, fd, cmdDeregMR, pd), "a PD handle is not an MR")
	require.Zero(t, handleCmd(k, a, fd, cmdDeregMR, h))
	_, ok = simadopt.LookupMR(k.fabric, lkey)
	require.False(t, ok, "DEREG_MR removes the region from the model")

	// Closing the node releases what is left.
	_, lkey, _, en = regMRCmd(k, a, fd, pd, start, 64, start, 0)
	require.Zero(t, en)
	require.Zero(t, k.close(fd))
	_, ok = simadopt.LookupMR(k.fabric, lkey)
	require.False(t, ok, "close releases the regions")
}

// TestKernelRandomObjectCommands sends the object commands with random
// fields and requires an errno of the kernel's and no crash.
func TestKernelRandomObjectCommands(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	rng := rand.New(rand.NewSource(7))
	allowed := map[syscall.Errno]bool{0: true, unix.EINVAL: true, unix.EFAULT: true, unix.ENOENT: true,
		unix.EBUSY: true, unix.EOPNOTSUPP: true, unix.ENOSPC: true, unix.EBADF: true}
	for i := 0; i < 2000; i++ {
		handles := []uint32{pd, rng.Uint32(), uint32(rng.Intn(8))}
		h := handles[rng.Intn(len(handles))]
		var en syscall.Errno
		switch rng.Intn(4) {
		case 0:
			_, _, en = allocPDCmd(k, a, fd)
		case 1:
			en = handleCmd(k, a, fd, []uint32{cmdDeallocPD, cmdDeregMR}[rng.Intn(2)], h)
		case 2:
			start := a.sanitize(rng.Uint64())
			_, _, _, en = regMRCmd(k, a, fd, h, start, uint64(rng.Intn(1<<14)), start, rng.Uint32()&0xff)
		case 3:
			core := make([]byte, 8+rng.Intn(40))
			rng.Read(core)
			// The response goes into the arena or nowhere, never into
			// memory the test runs on.
			ne.PutUint64(core, a.sanitize(ne.Uint64(core)))
			buf, n := a.writeCmd([]uint32{cmdAllocPD, cmdDeallocPD, cmdRegMR, cmdDeregMR}[rng.Intn(4)], core, rng.Intn(4))
			_, en = k.write(fd, buf, n)
		}
		require.True(t, allowed[en], "errno %v", en)
	}
}
