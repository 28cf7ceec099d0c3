package sim

import (
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// The hooks below let a model of the kernel side (package cgo/emulate)
// create objects over memory the user library allocated, as a real
// device does: libmlx5 allocates a CQ's ring and doorbell record itself
// and tells the kernel where they are.

// ProtectionDomainNumber returns the PD number of a protection domain of
// the model (what mlx5_ib returns to libmlx5 as pdn); ok is false for a
// protection domain of another provider.
func ProtectionDomainNumber(p ctx.ProviderProtectionDomain) (pdn uint32, ok bool) {
	x, ok := p.(*pd)
	if !ok {
		return 0, false
	}
	return x.pdn, true
}

// AdoptedCQConfig describes a completion queue whose ring and doorbell
// record the caller owns.
type AdoptedCQConfig struct {
	// Ring is the first CQE; Count (a power of two) entries of CQESize
	// (64 or 128) bytes follow. The caller initialises the entries
	// (invalid opcode, owner bit set), as libmlx5 does.
	Ring    unsafe.Pointer
	Count   uint32
	CQESize uint32
	// DBRec is the doorbell record (consumer index, arm), 8-byte aligned.
	DBRec unsafe.Pointer
	// CompVector must be below DeviceAttr.CompVectors.
	CompVector uint32
}

// AdoptCompletionQueue creates a completion queue of dev (a device of the
// model) over the caller's ring and doorbell record: the model writes its
// CQEs there. The memory must stay mapped until the queue is closed; the
// model does not free it. The arm doorbell goes to a UAR page of the
// model's own (Descriptor().UAR).
func AdoptCompletionQueue(dev ctx.ProviderDevice, cfg AdoptedCQConfig) (ctx.ProviderCompletionQueue, error) {
	const op = "sim: adopt CQ"
	d, ok := dev.(*device)
	if !ok {
		return nil, ctx.Errorf(op, "not a device of the software HCA: %w", ctx.ErrInvalidArgument)
	}
	switch {
	case cfg.Ring == nil || cfg.DBRec == nil:
		return nil, ctx.Errorf(op, "nil ring or doorbell record: %w", ctx.ErrInvalidArgument)
	case cfg.Count < 2 || cfg.Count > maxCQE+1 || cfg.Count&(cfg.Count-1) != 0:
		return nil, ctx.Errorf(op, "%d CQEs (a power of two from 2 to %d): %w", cfg.Count, maxCQE+1, ctx.ErrInvalidArgument)
	case cfg.CQESize != prm.CQE64Size && cfg.CQESize != prm.CQE128Size:
		return nil, ctx.Errorf(op, "CQE size %d: %w", cfg.CQESize, ctx.ErrInvalidArgument)
	case uintptr(cfg.Ring)%uintptr(cfg.CQESize) != 0 || uintptr(cfg.DBRec)%8 != 0:
		return nil, ctx.Errorf(op, "ring %p or doorbell record %p misaligned: %w", cfg.Ring, cfg.DBRec, ctx.ErrInvalidArgument)
	case cfg.CompVector >= compVectors:
		return nil, ctx.Errorf(op, "completion vector %d of %d: %w", cfg.CompVector, compVectors, ctx.ErrInvalidArgument)
	}
	c := &cq{f: d.f, dev: d, cnt: cfg.Count, size: cfg.CQESize, evfd: -1, ring: cfg.Ring, db: cfg.DBRec}
	uar, err := region(pageSize)
	if err != nil {
		return nil, ctx.Errorf(op, "UAR: %w", err)
	}
	c.bufs[2] = uar
	c.uar = uar.Pointer()
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	if d.closed {
		freeAll(uar)
		return nil, ctx.Errorf(op, "%w", ctx.ErrClosed)
	}
	cqn, _, ok := d.f.cqns.take()
	if !ok {
		freeAll(uar)
		return nil, exhausted(op, "CQNs", &d.f.cqns)
	}
	c.cqn = cqn
	d.f.addCQ(c)
	c.mem = keepMemory([]*ctx.Buffer{uar})
	return c, nil
}

// MemoryRegionInfo is what the model knows of a registered memory region.
type MemoryRegionInfo struct {
	Key    uint32
	Addr   uint64
	Length uint64
	Access ctx.Access
	PDN    uint32
}

// MemoryRegion returns the live memory region with the given key.
func (f *Fabric) MemoryRegion(key uint32) (MemoryRegionInfo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.mrs[key]
	if !ok || m.closed {
		return MemoryRegionInfo{}, false
	}
	return MemoryRegionInfo{Key: m.key, Addr: m.addr, Length: m.length, Access: m.access, PDN: m.pd.pdn}, true
}

// CompletionQueueInfo is what the model knows of a completion queue.
type CompletionQueueInfo struct {
	CQN     uint32
	Ring    unsafe.Pointer
	Count   uint32
	CQESize uint32
	DBRec   unsafe.Pointer
}

// CompletionQueue returns the live completion queue with the given number.
func (f *Fabric) CompletionQueue(cqn uint32) (CompletionQueueInfo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.cqs[cqn]
	if !ok || c.closed {
		return CompletionQueueInfo{}, false
	}
	return CompletionQueueInfo{CQN: c.cqn, Ring: c.ring, Count: c.cnt, CQESize: c.size, DBRec: c.db}, true
}
