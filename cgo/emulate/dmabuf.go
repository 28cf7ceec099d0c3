//go:build cgo && linux

package emulate

/*
#include "uverbs_abi.h"
*/
import "C"

import (
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// Memory regions over a dma-buf (ibv_reg_dmabuf_mr, the ioctl method
// REG_DMABUF_MR; there is no write command). The refusals a kernel gives
// before the driver imports the buffer come first, with their errnos, in
// the kernel's order: the PD attribute, which the ioctl framework looks up
// before the handler runs (ENOENT for a handle that names nothing, EINVAL
// for one of another type); an IOVA and offset in different page offsets
// EINVAL; access flags other than local write, remote read, write and
// atomic and relaxed ordering EINVAL (uverbs_get_flags32), then as
// ib_check_mr_access; an offset and length that wrap EINVAL
// (ib_umem_dmabuf_get); a descriptor that is not open EBADF and one that
// is not a dma-buf EINVAL (dma_buf_get). A dma-buf then goes to the model
// (sim's RegisterDMABuf), which registers one whose exporter lets the CPU
// map it (udmabuf) at the IOVA and refuses one that does not (GPU memory
// from CUDA or ROCm, which a ConnectX reaches by peer-to-peer DMA) with
// EOPNOTSUPP; a range past the buffer's end is EINVAL, as
// ib_umem_dmabuf_get answers.

func init() {
	ioctlMethods[methodKey{C.UVERBS_OBJECT_MR, C.UVERBS_METHOD_REG_DMABUF_MR}] = &method{
		name: "REG_DMABUF_MR", context: true,
		attrs: []attrSpec{
			{id: C.UVERBS_ATTR_REG_DMABUF_MR_HANDLE, kind: attrIDRNew, mandatory: true},
			{id: C.UVERBS_ATTR_REG_DMABUF_MR_PD_HANDLE, kind: attrIDRIn, mandatory: true},
			constIn(C.UVERBS_ATTR_REG_DMABUF_MR_OFFSET, true),
			constIn(C.UVERBS_ATTR_REG_DMABUF_MR_LENGTH, true),
			constIn(C.UVERBS_ATTR_REG_DMABUF_MR_IOVA, true),
			// The descriptor is a u32 (UVERBS_ATTR_PTR_IN), not a
			// descriptor attribute; the access flags are optional.
			{id: C.UVERBS_ATTR_REG_DMABUF_MR_FD, kind: attrPtrIn, minLen: 4, maxLen: 4, mandatory: true},
			flagsIn(C.UVERBS_ATTR_REG_DMABUF_MR_ACCESS_FLAGS, false),
			ptrOut(C.UVERBS_ATTR_REG_DMABUF_MR_RESP_LKEY, 4, 4, true),
			ptrOut(C.UVERBS_ATTR_REG_DMABUF_MR_RESP_RKEY, 4, 4, true),
		},
		run: (*kernel).ioctlRegDMABufMR,
	}
}

// dmabufAccess are the access flags REG_DMABUF_MR takes
// (uverbs_std_types_mr.c).
const dmabufAccess = C.IB_UVERBS_ACCESS_LOCAL_WRITE | C.IB_UVERBS_ACCESS_REMOTE_READ |
	C.IB_UVERBS_ACCESS_REMOTE_WRITE | C.IB_UVERBS_ACCESS_REMOTE_ATOMIC | C.IB_UVERBS_ACCESS_RELAXED_ORDERING

// isDMABufLink reports whether a descriptor's /proc/self/fd link names a
// dma-buf (what dma_buf_get accepts). A variable, so that the tests can
// let a memfd stand in for a buffer the CPU maps, which no exporter on
// their machines provides.
var isDMABufLink = func(target string) bool {
	return strings.HasPrefix(target, "/dmabuf:") || strings.HasPrefix(target, "anon_inode:dmabuf")
}

func (k *kernel) ioctlRegDMABufMR(f *ufile, b *bundle) syscall.Errno {
	if en := f.uctx.attrObject(b.get(C.UVERBS_ATTR_REG_DMABUF_MR_PD_HANDLE).data, objPD); en != 0 {
		return en
	}
	offset := b.get(C.UVERBS_ATTR_REG_DMABUF_MR_OFFSET).data
	iova := b.get(C.UVERBS_ATTR_REG_DMABUF_MR_IOVA).data
	pageMask := uint64(k.pageSize - 1)
	if offset&pageMask != iova&pageMask {
		return unix.EINVAL
	}
	access, en := b.flags32(C.UVERBS_ATTR_REG_DMABUF_MR_ACCESS_FLAGS, dmabufAccess)
	if en != 0 {
		return en
	}
	acc, en := checkMRAccess(access)
	if en != 0 {
		return en
	}
	// ib_umem_dmabuf_get refuses a range that wraps before it looks the
	// descriptor up.
	if length := b.get(C.UVERBS_ATTR_REG_DMABUF_MR_LENGTH).data; offset+length < offset {
		return unix.EINVAL
	}
	fd := int64(int32(b.get(C.UVERBS_ATTR_REG_DMABUF_MR_FD).data))
	if fd < 0 {
		return unix.EBADF
	}
	target, err := os.Readlink("/proc/self/fd/" + strconv.FormatInt(fd, 10))
	if err != nil {
		return unix.EBADF
	}
	if !isDMABufLink(target) {
		return unix.EINVAL
	}
	pdHandle := uint32(b.get(C.UVERBS_ATTR_REG_DMABUF_MR_PD_HANDLE).data)
	p, en := f.uctx.object(pdHandle, objPD)
	if en != 0 {
		return en
	}
	dpd, ok := p.pd.(provider.DMABufProtectionDomain)
	if !ok {
		return unix.EOPNOTSUPP
	}
	length := b.get(C.UVERBS_ATTR_REG_DMABUF_MR_LENGTH).data
	m, err := dpd.RegisterDMABuf(int(fd), offset, length, iova, acc)
	if err != nil {
		return errnoOfModel(err)
	}
	p.users++
	h := f.uctx.addObject(&uobject{kind: objMR, mr: m, owner: pdHandle})
	b.get(C.UVERBS_ATTR_REG_DMABUF_MR_HANDLE).newID = int64(h)
	var key [4]byte
	binary.NativeEndian.PutUint32(key[:], m.LKey())
	if en := b.copyTo(C.UVERBS_ATTR_REG_DMABUF_MR_RESP_LKEY, key[:]); en != 0 {
		return en
	}
	binary.NativeEndian.PutUint32(key[:], m.RKey())
	return b.copyTo(C.UVERBS_ATTR_REG_DMABUF_MR_RESP_RKEY, key[:])
}
