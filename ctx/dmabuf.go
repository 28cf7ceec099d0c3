package ctx

import (
	"fmt"
	"os"

	"github.com/mlx5kit/mlx5kit/internal/kerrno"
	"golang.org/x/sys/unix"
)

// RegisterDMABuf registers length bytes of the memory behind the dma-buf
// file descriptor fd (GPU memory exported by CUDA or ROCm), starting at
// byte offset of the buffer (ibv_reg_dmabuf_mr). The region is addressed at
// iova: MemoryRegion.Addr returns iova, and both the local SGEs that use
// LKey and the remote addresses peers use with RKey are iova-based, as on
// hardware (iova+n names byte offset+n of the dma-buf).
//
// The region's memory is not Go-addressable: Bytes and Pointer return nil.
// To read or write it from the host, map the fd yourself (for a memfd) or
// use the GPU API that exported it.
//
// fd may be closed once RegisterDMABuf returns: the registration holds the
// buffer until the region is closed.
//
// Refused as the kernel refuses them, in its order, each error naming
// ibv_reg_dmabuf_mr and the errno and wrapping both the errno and a
// sentinel: offset and iova at different offsets within a page, an access
// flag other than LocalWrite, RemoteRead, RemoteWrite, RemoteAtomic and
// relaxed ordering (1<<20; AccessOnDemand too), remote write or atomic
// access without LocalWrite, offset+length overflowing (EINVAL,
// ErrInvalidArgument); fd < 0 (EBADF, ErrInvalidArgument); length 0 or
// iova+length overflowing (EINVAL, ErrInvalidArgument). The provider
// refuses a closed fd (EBADF), a fd that is not a dma-buf and a range
// beyond its end (EINVAL). A provider without dma-buf support returns
// ErrNotSupported.
//
// The software HCA accepts any mappable file (a memfd stands in for GPU
// memory): it maps the range MAP_SHARED and serves RDMA to and from that
// mapping, so what a peer writes shows in every other mapping of the file.
func (pd *ProtectionDomain) RegisterDMABuf(fd int, offset, length, iova uint64, access Access) (*MemoryRegion, error) {
	const op = "register dma-buf MR"
	if err := checkDMABuf(fd, offset, length, iova, access); err != nil {
		return nil, &OpError{Op: op, Err: err}
	}
	if err := pd.lockPD(op); err != nil {
		return nil, err
	}
	defer pd.t.mu.Unlock()
	if !pd.h.DMABuf() {
		return nil, &OpError{Op: op, Err: fmt.Errorf("%s: the %s provider cannot register dma-buf memory: %w", dmabufVerb, pd.ctx.Kind(), ErrNotSupported)}
	}
	mh, err := pd.h.RegisterDMABuf(fd, offset, length, iova, access)
	if err != nil {
		return nil, opErr(op, err)
	}
	h := mh.(mrHandle)
	mr := &MemoryRegion{pd: pd, h: h, iova: iova, dmabuf: true, length: length, access: access, lkey: h.LKey(), rkey: h.RKey()}
	mr.node.init(pd.t, rankMemoryRegion, h.Close, &pd.node)
	return mr, nil
}

// DMABuf reports whether the region was registered from a dma-buf file
// descriptor (RegisterDMABuf); its memory is then not Go-addressable.
func (mr *MemoryRegion) DMABuf() bool { return mr.dmabuf }

// dmabufVerb is the rdma-core verb the dma-buf errors name.
const dmabufVerb = "ibv_reg_dmabuf_mr"

// dmabufAccess are the access flags REG_DMABUF_MR takes
// (uverbs_std_types_mr.c): any other, on-demand paging and the flush
// flags included, is EINVAL before ib_check_mr_access runs.
const dmabufAccess = accessAll | accessRelaxedOrdering

// accessRelaxedOrdering is IB_ACCESS_RELAXED_ORDERING, the first flag of
// the optional range.
const accessRelaxedOrdering Access = 1 << 20

// checkDMABuf refuses what the kernel refuses without looking at the fd,
// in its order: the page offsets of offset and iova and the access flags
// (REG_DMABUF_MR), a range that wraps (ib_umem_dmabuf_get, before it
// looks the fd up), then the fd.
func checkDMABuf(fd int, offset, length, iova uint64, access Access) error {
	page := uint64(os.Getpagesize())
	if offset%page != iova%page {
		return kerrno.New(dmabufVerb, fmt.Sprintf("offset %#x and iova %#x lie at different offsets in a %d-byte page", offset, iova, page), unix.EINVAL, ErrInvalidArgument)
	}
	if access&^dmabufAccess != 0 {
		return kerrno.New(dmabufVerb, "access "+access.String()+": not a dma-buf access flag", unix.EINVAL, ErrInvalidArgument)
	}
	if err := checkAccess(dmabufVerb, access); err != nil {
		return err
	}
	switch {
	case offset+length < offset:
		return kerrno.New(dmabufVerb, fmt.Sprintf("offset %#x + length %#x overflows", offset, length), unix.EINVAL, ErrInvalidArgument)
	case fd < 0:
		return kerrno.New(dmabufVerb, fmt.Sprintf("fd %d", fd), unix.EBADF, ErrInvalidArgument)
	case length == 0:
		return kerrno.New(dmabufVerb, "length 0", unix.EINVAL, ErrInvalidArgument)
	case iova+length < iova:
		return kerrno.New(dmabufVerb, fmt.Sprintf("iova %#x + length %#x overflows", iova, length), unix.EINVAL, ErrInvalidArgument)
	}
	return nil
}

// accessOptional is the optional range of access flags
// (IB_UVERBS_ACCESS_OPTIONAL_RANGE, 1<<20 to 1<<29, relaxed ordering the
// first): the kernel accepts them and a device that cannot honour one
// ignores it.
const accessOptional Access = (1<<29<<1 - 1) &^ (accessRelaxedOrdering - 1)

// accessFlush are IB_ACCESS_FLUSH_GLOBAL and IB_ACCESS_FLUSH_PERSISTENT
// (1<<8, 1<<9), which the kernel refuses on a device without the flush
// capabilities: mlx5_ib announces neither.
const accessFlush Access = 1<<8 | 1<<9

// checkAccess refuses access flags no provider accepts, in the order of
// the kernel's ib_check_mr_access: remote write or atomic without local
// write and unknown flags (EINVAL), then on-demand paging and the flush
// flags (EOPNOTSUPP). Flags of the optional range are accepted and passed
// on.
func checkAccess(verb string, access Access) error {
	switch {
	case access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0:
		return kerrno.New(verb, "access "+access.String()+": remote write or atomic needs LocalWrite", unix.EINVAL, ErrInvalidArgument)
	case access&^(accessAll|AccessOnDemand|accessFlush|accessOptional) != 0:
		return kerrno.New(verb, "access "+access.String()+": unknown flag", unix.EINVAL, ErrInvalidArgument)
	case access&AccessOnDemand != 0:
		return kerrno.New(verb, "access "+access.String()+": no on-demand paging", unix.EOPNOTSUPP, ErrNotSupported)
	case access&accessFlush != 0:
		return kerrno.New(verb, "access "+access.String()+": no flush capability", unix.EOPNOTSUPP, ErrNotSupported)
	}
	return nil
}
