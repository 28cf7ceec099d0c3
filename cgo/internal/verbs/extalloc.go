//go:build cgo && linux

package verbs

/*
#include "extalloc.h"
*/
import "C"

// The hardware side of the deferral described in extmem.go: the parent
// domains whose allocator is an extArena, and the hooks of QP, CQ, SRQ and
// Device creation and destruction.

// extDomain is a parent domain whose buffers come from an arena: rdma-core
// allocates the rings and doorbell record of the object created through it
// there (MLX5DV_RES_TYPE_QP, _CQ, _SRQ, _DBR) and frees them back at its
// destruction, which leaves them mapped.
type extDomain struct {
	pdd   *C.struct_ibv_pd
	arena *extArena
	id    uintptr // the arena's number, the parent domain's pd_context
}

// newExtDomain allocates a parent domain over pd (and td, when not nil)
// with a new arena as its allocator. what goes into the error.
func newExtDomain(c *C.struct_ibv_context, pd *C.struct_ibv_pd, td *C.struct_ibv_td, what string) (extDomain, error) {
	a := newExtArena()
	id := nameArena(a)
	pdd, errno := C.mk_alloc_ext_parent_domain(c, pd, td, C.uintptr_t(id))
	if pdd == nil {
		forgetArena(id)
		return extDomain{}, ptrError("ibv_alloc_parent_domain", what, errno)
	}
	return extDomain{pdd: pdd, arena: a, id: id}, nil
}

// dealloc deallocates the parent domain, once the object created through
// it is destroyed (rdma-core has freed its buffers then). The arena stays
// mapped for the queueMemory that owns it. It does nothing for a zero
// extDomain, or a second time.
func (e *extDomain) dealloc() error {
	if e.pdd == nil {
		return nil
	}
	if ret, errno := C.ibv_dealloc_pd(e.pdd); ret != 0 {
		return retError("ibv_dealloc_pd", "parent domain", int(ret), errno)
	}
	e.pdd = nil
	forgetArena(e.id)
	return nil
}

// abandon is dealloc for an object whose creation failed, or a probe's:
// no data plane saw its memory, so the arena is unmapped at once.
func (e *extDomain) abandon() error {
	if err := e.dealloc(); err != nil {
		return err
	}
	if e.arena != nil {
		return e.arena.release()
	}
	return nil
}

// retire is the domain's part of a QP's Close, the QP destroyed already:
// the parent domain goes now (it holds a reference on the PD, which may be
// closed next), while the thread domain, whose BlueFlame register the
// send queue writes and which rdma-core would hand to the next thread
// domain, and the arena are left to the QP's queueMemory.
func (dd *dedicatedDomain) retire() error {
	if err := dd.ext.dealloc(); err != nil {
		return err
	}
	dd.pdd, dd.td = nil, nil
	return nil
}

// deviceMemory is a Device's part in the deferral: the gate that closes
// the device (ibv_close_device unmaps the UAR pages: the CQs' arm
// doorbells, the QPs' registers) once it was closed and its queues' memory
// is gone, and the private PD that the CQs' parent domains are allocated
// over (a CQ belongs to no PD, a parent domain needs one).
type deviceMemory struct {
	gate closeGate
	cqPD *C.struct_ibv_pd
}

// deferClose arranges for the device context c to be closed by the gate.
func (d *Device) deferClose(c *C.struct_ibv_context) {
	openContexts.Add(1)
	d.mem.gate.final = func() {
		// Nobody is left to report an error to.
		C.ibv_close_device(c)
		openContexts.Add(-1)
	}
}

// queueMemory returns the Memory of a queue's descriptor: it owns arena
// and, once unreachable, unmaps it, deallocates td (when not nil) and lets
// go of the device. d.mu is held.
func (d *Device) queueMemory(arena *extArena, td *C.struct_ibv_td) *queueMemory {
	var after []func()
	if td != nil {
		after = append(after, func() { C.ibv_dealloc_td(td) })
	}
	if d.mem.gate.hold() {
		after = append(after, d.mem.gate.let)
	}
	return newQueueMemory(arena, after...)
}

// cqDomain returns a new parent domain for a CQ, over the device's private
// PD (allocated on first use). d.mu is held.
func (d *Device) cqDomain() (extDomain, error) {
	if d.mem.cqPD == nil {
		pd, errno := C.ibv_alloc_pd(d.c)
		if pd == nil {
			return extDomain{}, ptrError("ibv_alloc_pd", "PD of the CQs' parent domains", errno)
		}
		d.mem.cqPD = pd
	}
	return newExtDomain(d.c, d.mem.cqPD, nil, "CQ")
}

// closeMemory is the memory's part of Device.Close, every object destroyed
// already: the private PD goes, and the device context is closed now or,
// while a queue's memory is reachable, when the last of it is collected.
// d.mu is held.
func (d *Device) closeMemory() error {
	if d.mem.cqPD != nil {
		if ret, errno := C.ibv_dealloc_pd(d.mem.cqPD); ret != 0 {
			return retError("ibv_dealloc_pd", "PD of the CQs' parent domains", int(ret), errno)
		}
		d.mem.cqPD = nil
	}
	d.mem.gate.close()
	return nil
}
