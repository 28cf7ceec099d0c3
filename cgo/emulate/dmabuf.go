//go:build cgo && linux

package emulate

/*
#include "uverbs_abi.h"
*/
import "C"

import (
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Memory regions over a dma-buf (ibv_reg_dmabuf_mr, the ioctl method
// REG_DMABUF_MR; there is no write command). The model registers no
// dma-buf, but it answers the refusals a kernel gives before the driver
// would import one, with their errnos: the access flags as
// ib_check_mr_access, an IOVA and offset in different page offsets
// EINVAL, an unknown PD EINVAL, a descriptor that is not open EBADF and
// one that is not a dma-buf EINVAL (dma_buf_get). A real dma-buf gets
// EOPNOTSUPP, as from a driver without dma-buf support.

func init() {
	ioctlMethods[methodKey{C.UVERBS_OBJECT_MR, C.UVERBS_METHOD_REG_DMABUF_MR}] = &method{
		name: "REG_DMABUF_MR", context: true,
		attrs: []attrSpec{
			{id: C.UVERBS_ATTR_REG_DMABUF_MR_HANDLE, kind: attrIDRNew, mandatory: true},
			{id: C.UVERBS_ATTR_REG_DMABUF_MR_PD_HANDLE, kind: attrIDRIn, mandatory: true},
			constIn(C.UVERBS_ATTR_REG_DMABUF_MR_OFFSET, true),
			constIn(C.UVERBS_ATTR_REG_DMABUF_MR_LENGTH, true),
			constIn(C.UVERBS_ATTR_REG_DMABUF_MR_IOVA, true),
			{id: C.UVERBS_ATTR_REG_DMABUF_MR_FD, kind: attrFDIn, mandatory: true},
			flagsIn(C.UVERBS_ATTR_REG_DMABUF_MR_ACCESS_FLAGS, true),
			ptrOut(C.UVERBS_ATTR_REG_DMABUF_MR_RESP_LKEY, 4, 4, true),
			ptrOut(C.UVERBS_ATTR_REG_DMABUF_MR_RESP_RKEY, 4, 4, true),
		},
		run: (*kernel).ioctlRegDMABufMR,
	}
}

func (k *kernel) ioctlRegDMABufMR(f *ufile, b *bundle) syscall.Errno {
	access, en := b.flags32(C.UVERBS_ATTR_REG_DMABUF_MR_ACCESS_FLAGS, 0xffffffff)
	if en != 0 {
		return en
	}
	if _, en := checkMRAccess(access); en != 0 {
		return en
	}
	offset := b.get(C.UVERBS_ATTR_REG_DMABUF_MR_OFFSET).data
	iova := b.get(C.UVERBS_ATTR_REG_DMABUF_MR_IOVA).data
	pageMask := uint64(k.pageSize - 1)
	if offset&pageMask != iova&pageMask {
		return unix.EINVAL
	}
	if _, en := f.uctx.object(uint32(b.get(C.UVERBS_ATTR_REG_DMABUF_MR_PD_HANDLE).data), objPD); en != 0 {
		return en
	}
	fd := int64(int32(b.get(C.UVERBS_ATTR_REG_DMABUF_MR_FD).data))
	if fd < 0 {
		return unix.EBADF
	}
	target, err := os.Readlink("/proc/self/fd/" + strconv.FormatInt(fd, 10))
	if err != nil {
		return unix.EBADF
	}
	if !strings.HasPrefix(target, "/dmabuf:") && !strings.HasPrefix(target, "anon_inode:dmabuf") {
		return unix.EINVAL
	}
	return unix.EOPNOTSUPP
}
