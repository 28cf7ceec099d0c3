//go:build cgo && linux

package verbs

/*
#include "mlx5kit_verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"syscall"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

var _ provider.DMABufProtectionDomain = providerPD{}

// RegisterDMABuf registers length bytes of the dma-buf fd (GPU memory that
// CUDA or ROCm exported) starting at byte offset of the buffer, addressed
// at iova (ibv_reg_dmabuf_mr, rdma-core 34 or later; the kernel needs
// dma-buf support in mlx5_ib, Linux 5.12 or later). The region's local SGEs
// and the peers' remote addresses are iova-based; its memory is not
// host-addressable, so Addr returns nil and IOVA the address to use.
// The registration holds the buffer: fd may be closed afterwards.
//
// The kernel refuses a bad fd (EBADF), a fd that is not a dma-buf, length
// 0, a range beyond the buffer, offset and iova at different offsets in a
// page, remote write without local write (EINVAL) and on-demand paging
// where unsupported (EOPNOTSUPP); the *VerbError names the errno.
//
// This path has not been run against hardware in this module's tests.
func (pd *ProtectionDomain) RegisterDMABuf(fd int, offset, length, iova uint64, access ctx.Access) (*MemoryRegion, error) {
	const verb = "ibv_reg_dmabuf_mr"
	detail := fmt.Sprintf("fd %d offset %#x length %#x iova %#x access %v", fd, offset, length, iova, access)
	if fd < 0 || fd > math.MaxInt32 {
		return nil, dmabufError(verb, detail, syscall.EBADF)
	}
	if length > math.MaxUint {
		return nil, dmabufError(verb, detail, syscall.EINVAL)
	}
	if err := pd.use(verb); err != nil {
		return nil, err
	}
	defer pd.d.mu.Unlock()
	mr, errno := C.ibv_reg_dmabuf_mr(pd.pd, C.uint64_t(offset), C.size_t(length), C.uint64_t(iova), C.int(fd), C.int(access))
	if mr == nil {
		var en syscall.Errno
		if errors.As(errno, &en) {
			return nil, dmabufError(verb, detail, en)
		}
		return nil, ptrError(verb, detail, errno)
	}
	m := &MemoryRegion{pd: pd, mr: mr, iova: iova, length: length, lkey: uint32(mr.lkey), rkey: uint32(mr.rkey)}
	pd.d.mrs[m] = struct{}{}
	return m, nil
}

// dmabufError is errnoError with EBADF, a bad dma-buf fd, mapped to
// ctx.ErrInvalidArgument as the software HCA maps it.
func dmabufError(verb, detail string, errno syscall.Errno) *VerbError {
	e := errnoError(verb, detail, errno)
	if errno == syscall.EBADF {
		e.Sentinel = ctx.ErrInvalidArgument
	}
	return e
}

// IOVA is the first address of the region as the device sees it: the
// address local SGEs with LKey and peers with RKey name. It is the
// registered address for RegisterMemory and the iova for RegisterDMABuf.
func (mr *MemoryRegion) IOVA() uint64 { return mr.iova }

func (pd providerPD) RegisterDMABuf(fd int, offset, length, iova uint64, access ctx.Access) (provider.MemoryRegion, error) {
	mr, err := pd.ProtectionDomain.RegisterDMABuf(fd, offset, length, iova, access)
	if err != nil {
		return nil, err
	}
	return mr, nil
}
