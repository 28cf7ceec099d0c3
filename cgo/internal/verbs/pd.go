//go:build cgo && linux

package verbs

/*
#include "mlx5kit_verbs.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// ProtectionDomain is a struct ibv_pd.
type ProtectionDomain struct {
	d      *Device
	pd     *C.struct_ibv_pd
	closed bool
}

// AllocProtectionDomain allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocProtectionDomain() (*ProtectionDomain, error) {
	if err := d.use("ibv_alloc_pd"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	pd, errno := C.ibv_alloc_pd(d.c)
	if pd == nil {
		return nil, ptrError("ibv_alloc_pd", fmt.Sprintf("%q", d.name), errno)
	}
	p := &ProtectionDomain{d: d, pd: pd}
	d.pds[p] = struct{}{}
	return p, nil
}

// use locks the device and checks that the PD is open.
func (pd *ProtectionDomain) use(verb string) error {
	if err := pd.d.use(verb); err != nil {
		return err
	}
	if pd.closed {
		pd.d.mu.Unlock()
		return errClosed(verb)
	}
	return nil
}

// Close deallocates the PD (ibv_dealloc_pd). Every MR, QP, SRQ and address
// handle of the PD must be closed first; otherwise the verb fails with
// EBUSY and the PD stays open. It is idempotent.
func (pd *ProtectionDomain) Close() error {
	pd.d.mu.Lock()
	defer pd.d.mu.Unlock()
	return pd.closeLocked()
}

func (pd *ProtectionDomain) closeLocked() error {
	if pd.closed {
		return nil
	}
	if ret, errno := C.ibv_dealloc_pd(pd.pd); ret != 0 {
		return retError("ibv_dealloc_pd", "", int(ret), errno)
	}
	pd.closed = true
	delete(pd.d.pds, pd)
	return nil
}

// MemoryRegion is a struct ibv_mr.
type MemoryRegion struct {
	pd     *ProtectionDomain
	mr     *C.struct_ibv_mr
	addr   unsafe.Pointer // nil for a dma-buf region
	iova   uint64
	length uint64
	lkey   uint32
	rkey   uint32
	closed bool
}

// RegisterMemory registers length bytes at addr with the given access
// (ibv_reg_mr). The memory must be mmap'd (ctx.AllocBuffer, unix.Mmap),
// never Go heap: the device reads and writes it while the Go runtime does
// not know, and the garbage collector may reuse heap memory whose last Go
// reference is gone. Huge-page memory is registered the same way.
func (pd *ProtectionDomain) RegisterMemory(addr unsafe.Pointer, length uint64, access ctx.Access) (*MemoryRegion, error) {
	const verb = "ibv_reg_mr"
	if addr == nil || length == 0 {
		return nil, &VerbError{Verb: verb, Detail: fmt.Sprintf("%d bytes at %p", length, addr), Sentinel: ctx.ErrInvalidArgument}
	}
	if err := pd.use(verb); err != nil {
		return nil, err
	}
	defer pd.d.mu.Unlock()
	mr, errno := C.mk_reg_mr(pd.pd, addr, C.size_t(length), C.uint(access))
	if mr == nil {
		return nil, ptrError(verb, fmt.Sprintf("%d bytes at %p access %v", length, addr, access), errno)
	}
	m := &MemoryRegion{pd: pd, mr: mr, addr: addr, iova: uint64(uintptr(addr)), length: length, lkey: uint32(mr.lkey), rkey: uint32(mr.rkey)}
	pd.d.mrs[m] = struct{}{}
	return m, nil
}

// RegisterBytes registers b (mmap'd memory, see RegisterMemory).
func (pd *ProtectionDomain) RegisterBytes(b []byte, access ctx.Access) (*MemoryRegion, error) {
	if len(b) == 0 {
		return nil, &VerbError{Verb: "ibv_reg_mr", Detail: "empty region", Sentinel: ctx.ErrInvalidArgument}
	}
	return pd.RegisterMemory(unsafe.Pointer(unsafe.SliceData(b)), uint64(len(b)), access)
}

// LKey is the local key.
func (mr *MemoryRegion) LKey() uint32 { return mr.lkey }

// RKey is the remote key.
func (mr *MemoryRegion) RKey() uint32 { return mr.rkey }

// Addr is the first registered address; nil for a dma-buf region (see
// IOVA).
func (mr *MemoryRegion) Addr() unsafe.Pointer { return mr.addr }

// Len is the registered length in bytes.
func (mr *MemoryRegion) Len() uint64 { return mr.length }

// Close deregisters the region (ibv_dereg_mr). It is idempotent.
func (mr *MemoryRegion) Close() error {
	mr.pd.d.mu.Lock()
	defer mr.pd.d.mu.Unlock()
	return mr.closeLocked()
}

func (mr *MemoryRegion) closeLocked() error {
	if mr.closed {
		return nil
	}
	if ret, errno := C.ibv_dereg_mr(mr.mr); ret != 0 {
		return retError("ibv_dereg_mr", fmt.Sprintf("lkey %#x", mr.lkey), int(ret), errno)
	}
	mr.closed = true
	delete(mr.pd.d.mrs, mr)
	return nil
}
