package sim

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/kerrno"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

var _ provider.DMABufProtectionDomain = (*pd)(nil)

// dmabufVerb is the verb the model's dma-buf errors name.
const dmabufVerb = "ibv_reg_dmabuf_mr"

// RegisterDMABuf registers a dma-buf region. The model takes a dma-buf
// whose exporter lets the CPU map it (udmabuf) or any mappable regular
// file (a memfd stands in for GPU memory): it maps
// the pages that hold [offset, offset+length) of fd MAP_SHARED, read-write
// when the access allows any write and read-only otherwise, and serves
// RDMA to and from that mapping at iova. Writes land in the file's pages,
// so every other mapping of the file sees them. The mapping holds the
// file, so fd may be closed after registration; Close unmaps it.
//
// Unlike a pinned GPU buffer, a file shrunk below offset+length while the
// region is registered makes the model fault when it touches the lost
// pages; keep the file's size while it is registered.
//
// A dma-buf whose exporter refuses CPU mappings (GPU memory from CUDA or
// ROCm) is refused with EOPNOTSUPP and ctx.ErrNotSupported: the model
// reaches memory only through the CPU, where a ConnectX reaches it by
// peer-to-peer DMA.
func (p *pd) RegisterDMABuf(fd int, offset, length, iova uint64, access ctx.Access) (provider.MemoryRegion, error) {
	const op = "sim: register dma-buf MR"
	if length == 0 || offset+length < offset || iova+length < iova {
		return nil, &ctx.OpError{Op: op, Err: kerrno.New(dmabufVerb, fmt.Sprintf("offset %#x length %#x iova %#x", offset, length, iova), unix.EINVAL, ctx.ErrInvalidArgument)}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &ctx.OpError{Op: op, Err: errnoOf(fmt.Sprintf("fd %d", fd), err)}
	}
	exported := isDMABuf(fd)
	if !exported && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &ctx.OpError{Op: op, Err: kerrno.New(dmabufVerb, fmt.Sprintf("fd %d is neither a dma-buf nor a regular file such as a memfd", fd), unix.EINVAL, ctx.ErrInvalidArgument)}
	}
	if size := uint64(st.Size); size < offset+length {
		return nil, &ctx.OpError{Op: op, Err: kerrno.New(dmabufVerb, fmt.Sprintf("offset %#x + length %#x beyond the %d-byte buffer of fd %d", offset, length, size, fd), unix.EINVAL, ctx.ErrInvalidArgument)}
	}
	page := uint64(os.Getpagesize())
	start := offset &^ (page - 1)
	end := (offset + length + page - 1) &^ (page - 1)
	if end-start > uint64(maxInt) {
		return nil, &ctx.OpError{Op: op, Err: kerrno.New(dmabufVerb, fmt.Sprintf("length %#x", length), unix.EINVAL, ctx.ErrInvalidArgument)}
	}
	prot := unix.PROT_READ
	if access&(ctx.AccessLocalWrite|ctx.AccessRemoteWrite|ctx.AccessRemoteAtomic) != 0 {
		prot |= unix.PROT_WRITE
	}
	mapping, err := unix.Mmap(fd, int64(start), int(end-start), prot, unix.MAP_SHARED)
	if err != nil && exported {
		// The exporter keeps its memory from the CPU (GPU memory from
		// CUDA or ROCm does): only a NIC's peer-to-peer DMA reaches it.
		return nil, &ctx.OpError{Op: op, Err: kerrno.New(dmabufVerb, fmt.Sprintf("the exporter of dma-buf fd %d does not let the CPU map it (mmap: %v), and the software HCA reaches memory only through the CPU; a NIC with GPUDirect RDMA registers such memory", fd, err), unix.EOPNOTSUPP, ctx.ErrNotSupported)}
	}
	if err != nil {
		return nil, &ctx.OpError{Op: op, Err: errnoOf(fmt.Sprintf("mmap of fd %d at %#x for %d bytes", fd, start, end-start), err)}
	}
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	fail := func(err error) (provider.MemoryRegion, error) {
		_ = unix.Munmap(mapping)
		return nil, err
	}
	if p.closed {
		return fail(provider.Errorf(op, "%w", ctx.ErrClosed))
	}
	if p.dev.deadLocked() {
		return fail(errDeviceFatal(op))
	}
	key, ok := p.f.allocKeyLocked()
	if !ok {
		return fail(exhausted(op, "memory key indices", &p.f.keys))
	}
	base := unsafe.Pointer(unsafe.SliceData(mapping[offset-start:]))
	m := &mr{f: p.f, pd: p, key: key, base: base, addr: iova, length: length, access: access, mapping: mapping}
	p.f.mrs[key] = m
	return m, nil
}

// unmapLocked unmaps the model's mapping of a dma-buf region; the fabric's
// mu is held, so the engine, which reads and writes the mapping only under
// it, is not in the middle of a transfer.
func (m *mr) unmapLocked() error {
	if m.mapping == nil {
		return nil
	}
	err := unix.Munmap(m.mapping)
	m.mapping, m.base = nil, nil
	if err != nil {
		return provider.Errorf("sim: deregister dma-buf MR", "munmap: %w", err)
	}
	return nil
}

const maxInt = int(^uint(0) >> 1)

// errnoOf turns a failed system call on the dma-buf fd into the error the
// kernel's registration would give: its errno, wrapped with the sentinel
// it maps to.
func errnoOf(what string, err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("%s %s: %w", dmabufVerb, what, err)
	}
	sentinel := ctx.ErrInvalidArgument
	if errno == unix.ENOMEM {
		sentinel = ctx.ErrNoMemory
	}
	return kerrno.New(dmabufVerb, what, errno, sentinel)
}

// dmabufMagic is the file-system magic of dma-buf files (DMA_BUF_MAGIC in
// linux/magic.h).
const dmabufMagic = 0x444d4142

// isDMABuf reports whether fd is a dma-buf exported by a kernel driver
// (a GPU's memory, udmabuf) rather than a plain file.
func isDMABuf(fd int) bool {
	var fs unix.Statfs_t
	return unix.Fstatfs(fd, &fs) == nil && fs.Type == dmabufMagic
}
