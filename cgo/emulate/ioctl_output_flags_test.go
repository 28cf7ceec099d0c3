//go:build cgo && linux

package emulate

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestGetContextOutputFlagRefusedLeavesNoContext: the kernel marks an
// output written (UVERBS_ATTR_F_VALID_OUTPUT in the caller's attribute)
// as it copies it (uverbs_copy_to, uverbs_set_output), before GET_CONTEXT
// creates the context; an attribute array it cannot write back to (here
// read-only) fails the call with EFAULT and leaves no context, so that
// the call can be made again.
func TestGetContextOutputFlagRefusedLeavesNoContext(t *testing.T) {
	k := testKernel(t, ctx.LinkLayerInfiniBand)
	a := newArena(t)
	fd := openNode(t, k, 0)

	req := ucontextReq(16, 4, 0)
	_, respAddr := a.alloc(ucontextRespSize)
	_, ncAddr := a.alloc(4)
	attrs := []testAttr{
		out(attrNumCompVectors, ncAddr, 4),
		{id: attrUHWIn, length: uint16(len(req)), flags: attrFlagMandatory, data: uint64(a.put(req))},
		out(attrUHWOut, respAddr, ucontextRespSize),
	}
	_, built := a.ioctlCmd(objectDevice, methodGetContext, attrs...)
	page, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer func() { _ = unix.Munmap(page) }()
	n := ioctlHdrSize + len(attrs)*attrSize
	ne.PutUint16(page[ioctlOffLength:], uint16(n))
	ne.PutUint16(page[ioctlOffObject:], objectDevice)
	ne.PutUint16(page[ioctlOffMethod:], methodGetContext)
	ne.PutUint16(page[ioctlOffNumAttrs:], uint16(len(attrs)))
	ne.PutUint32(page[ioctlOffDriverID:], driverMLX5)
	copy(page[ioctlHdrSize:], built[:len(attrs)*attrSize])
	require.NoError(t, unix.Mprotect(page, unix.PROT_READ))
	require.Equal(t, unix.EFAULT, k.ioctl(fd, rdmaVerbsIoctl, addrOf(page)))
	require.Nil(t, k.files[fd].uctx, "no context kept")

	en, _, _ := getContext(k, a, fd, req)
	require.Zero(t, en, "GET_CONTEXT again")
}
