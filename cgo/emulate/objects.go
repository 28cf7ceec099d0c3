//go:build cgo && linux

package emulate

/*
#include "uverbs_abi.h"
*/
import "C"

import (
	"container/heap"
	"errors"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// The verbs objects of a context: protection domains, memory regions and
// completion queues, created on the model and named by handles, as the
// uverbs core names them (one handle space per open device node). The
// checks and errnos are the kernel's: a handle that names nothing is
// ENOENT when destroyed and EINVAL when used as a parent, a handle of the
// wrong kind EINVAL, a protection domain still in use EBUSY.

// objKind is the type of a uverbs object.
type objKind uint8

const (
	objPD objKind = iota + 1
	objMR
	objCQ
	objQP
)

// uobject is one object of a context.
type uobject struct {
	kind objKind
	pd   provider.ProtectionDomain
	mr   provider.MemoryRegion
	cq   provider.CompletionQueue
	qp   provider.QueuePair
	// qpType is a QP's type, caps its capabilities; uc is set for a UC
	// QP, whose qpType is RC (the model's unreliable RC QP).
	qpType ctx.QPType
	uc     bool
	caps   ctx.QueuePairCaps
	sigAll bool   // a QP's sq_sig_all
	owner  uint32 // the PD handle of an MR or a QP
	// sendCQ and recvCQ are the CQ handles of a QP.
	sendCQ, recvCQ uint32
	// srq is an SRQ's state; srqRef the SRQ object a QP receives through.
	srq    *srqObject
	srqRef *uobject
	// channel is a CQ's completion channel descriptor (-1 for none),
	// events what the CQ wrote there.
	channel int
	events  *cqEvents
	// cqEntries and cqeSize are a CQ's ring: its entries (a power of
	// two, what ibcq->cqe says plus one) and their size.
	cqEntries, cqeSize uint32
	users              int // objects that name this one (MRs of a PD)
	// async is a QP's, CQ's or SRQ's async event source.
	async *asyncSource
	// regMap is the UAR page of the doorbell register the model watches
	// for a QP (bfregRegister), nil when none; regOff is the register's
	// offset in it, regSize the size of each of its buffers.
	regMap  *mapping
	regOff  uintptr
	regSize uint32
}

// addObject gives o the lowest handle no object of the context holds, as
// the uverbs core's allocation of object ids (idr_alloc from 0, xa_alloc
// in later kernels) does: a destroyed object's handle is taken again by
// the next one created.
func (uc *ucontext) addObject(o *uobject) uint32 {
	if uc.objects == nil {
		uc.objects = map[uint32]*uobject{}
	}
	var h uint32
	if uc.freeHandles.Len() > 0 {
		h = heap.Pop(&uc.freeHandles).(uint32)
	} else {
		h = uc.nextHandle
		uc.nextHandle++
	}
	uc.objects[h] = o
	return h
}

// removeObject forgets handle h, which the next object created may take.
func (uc *ucontext) removeObject(h uint32) {
	if _, ok := uc.objects[h]; !ok {
		return
	}
	delete(uc.objects, h)
	heap.Push(&uc.freeHandles, h)
}

// handleHeap holds the handles below nextHandle that no object holds,
// smallest first.
type handleHeap []uint32

func (h handleHeap) Len() int           { return len(h) }
func (h handleHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h handleHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *handleHeap) Push(x any)        { *h = append(*h, x.(uint32)) }
func (h *handleHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// object looks a handle up for use (a parent): EINVAL if it names nothing
// of that kind, as uobj_get_obj_read failing.
func (uc *ucontext) object(h uint32, kind objKind) (*uobject, syscall.Errno) {
	o, ok := uc.objects[h]
	if !ok || o.kind != kind {
		return nil, unix.EINVAL
	}
	return o, 0
}

// attrObject looks up the handle of an ioctl object attribute, as the
// ioctl framework does before the method runs (rdma_lookup_get_uobject):
// ENOENT if it names nothing, EINVAL if it names another kind. (The write
// commands' parents are object's: EINVAL for both before Linux 6.15.)
func (uc *ucontext) attrObject(h uint64, kind objKind) syscall.Errno {
	if int64(h) < 0 {
		return unix.EINVAL
	}
	o, ok := uc.objects[uint32(h)]
	switch {
	case !ok || h > 0xffffffff:
		return unix.ENOENT
	case o.kind != kind:
		return unix.EINVAL
	}
	return 0
}

// destroyable looks a handle up for destruction: ENOENT if it names
// nothing, EINVAL if it names another kind, EBUSY if in use.
func (uc *ucontext) destroyable(h uint64, kind objKind) (*uobject, syscall.Errno) {
	if int64(h) < 0 {
		return nil, unix.EINVAL
	}
	if uc == nil {
		// No context yet: the file's handle table is empty.
		return nil, unix.ENOENT
	}
	o, ok := uc.objects[uint32(h)]
	if h > 0xffffffff {
		ok = false
	}
	switch {
	case !ok:
		return nil, unix.ENOENT
	case o.kind != kind:
		return nil, unix.EINVAL
	case o.users > 0:
		return nil, unix.EBUSY
	}
	return o, 0
}

// close releases the object on the model.
func (o *uobject) close() {
	switch o.kind {
	case objPD:
		_ = o.pd.Close()
	case objMR:
		_ = o.mr.Close()
	case objCQ:
		_ = o.cq.Close()
	case objQP:
		_ = o.qp.Close()
	case objSRQ:
		_ = o.srq.srq.Close()
	}
}

// destroyObjects releases every object of the context, children first,
// as the kernel does when the device node is closed.
func (uc *ucontext) destroyObjects() {
	for _, kind := range []objKind{objQP, objSRQ, objCQ, objMR, objPD} {
		for h, o := range uc.objects {
			if o.kind == kind {
				o.close()
				uc.removeObject(h)
			}
		}
	}
}

// errnoOfModel maps an error of the model to the errno mlx5_ib would give:
// the errno it carries (the model's kernel checks name theirs), else by
// its sentinel.
func errnoOfModel(err error) syscall.Errno {
	var errno syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &errno) && errno != 0:
		return errno
	case errors.Is(err, ctx.ErrInvalidArgument):
		return unix.EINVAL
	case errors.Is(err, ctx.ErrNotSupported):
		return unix.EOPNOTSUPP
	case errors.Is(err, ctx.ErrClosed):
		return unix.EIO
	default:
		return unix.ENOMEM
	}
}

// ---- protection domains ----

func (k *kernel) allocPD(f *ufile) (handle, pdn uint32, en syscall.Errno) {
	pd, err := f.uctx.dev.AllocProtectionDomain()
	if err != nil {
		return 0, 0, errnoOfModel(err)
	}
	pdn, ok := simadopt.ProtectionDomainNumber(pd)
	if !ok {
		_ = pd.Close()
		return 0, 0, unix.ENODEV
	}
	return f.uctx.addObject(&uobject{kind: objPD, pd: pd}), pdn, 0
}

func (k *kernel) destroyPD(f *ufile, h uint64) syscall.Errno {
	o, en := f.uctx.destroyable(h, objPD)
	if en != 0 {
		return en
	}
	o.close()
	f.uctx.removeObject(uint32(h))
	return 0
}

func (k *kernel) writeAllocPD(f *ufile, c *writeCall) syscall.Errno {
	h, pdn, en := k.allocPD(f)
	if en != 0 {
		return en
	}
	resp := C.struct_ib_uverbs_alloc_pd_resp{pd_handle: C.__u32(h)}
	vendor := C.struct_mlx5_ib_alloc_pd_resp{pdn: C.__u32(pdn)}
	if en = c.response(bytesOf(&resp)); en == 0 {
		en = writeDriverOut(c.udataOut, c.udataLen, bytesOf(&vendor))
	}
	if en != 0 {
		_ = k.destroyPD(f, uint64(h))
	}
	return en
}

// writeDriverOut writes a driver answer mlx5_ib copies whole
// (ib_copy_to_udata with the structure's size, not the buffer's): no
// driver buffer is a NULL one, EFAULT; a buffer too short for it, which
// the kernel would write past, is refused the same way.
func writeDriverOut(addr uintptr, n int, b []byte) syscall.Errno {
	if n < len(b) {
		return unix.EFAULT
	}
	return copyOut(addr, b)
}

func (k *kernel) writeDeallocPD(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_dealloc_pd
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	return k.destroyPD(f, uint64(req.pd_handle))
}

// ---- memory regions ----

// accessFlush are IB_UVERBS_ACCESS_FLUSH_GLOBAL and _PERSISTENT (1 << 8,
// 1 << 9, Linux 6.2), which the headers the package builds with may lack.
const accessFlush = 1<<8 | 1<<9

// mrAccessSupported are the access flags the uverbs core accepts
// (IB_ACCESS_SUPPORTED since Linux 6.2), the optional range included.
const mrAccessSupported = C.IB_UVERBS_ACCESS_LOCAL_WRITE | C.IB_UVERBS_ACCESS_REMOTE_WRITE |
	C.IB_UVERBS_ACCESS_REMOTE_READ | C.IB_UVERBS_ACCESS_REMOTE_ATOMIC | C.IB_UVERBS_ACCESS_MW_BIND |
	C.IB_UVERBS_ACCESS_ZERO_BASED | C.IB_UVERBS_ACCESS_ON_DEMAND | C.IB_UVERBS_ACCESS_HUGETLB |
	accessFlush | C.IB_UVERBS_ACCESS_OPTIONAL_RANGE

// checkMRAccess checks access flags as ib_check_mr_access does since Linux
// 6.2 (on-demand paging on a device without it, as the model's, and the
// flush flags, which mlx5_ib never announces, EOPNOTSUPP), then what the
// model cannot do: zero-based addresses (the model's MRs are addressed by
// their virtual address), EOPNOTSUPP.
func checkMRAccess(flags uint32) (ctx.Access, syscall.Errno) {
	core := flags &^ C.IB_UVERBS_ACCESS_OPTIONAL_RANGE
	if core&(C.IB_UVERBS_ACCESS_REMOTE_WRITE|C.IB_UVERBS_ACCESS_REMOTE_ATOMIC) != 0 && core&C.IB_UVERBS_ACCESS_LOCAL_WRITE == 0 {
		return 0, unix.EINVAL
	}
	if flags&^mrAccessSupported != 0 {
		return 0, unix.EINVAL
	}
	if flags&(C.IB_UVERBS_ACCESS_ON_DEMAND|accessFlush|C.IB_UVERBS_ACCESS_ZERO_BASED) != 0 {
		return 0, unix.EOPNOTSUPP
	}
	var a ctx.Access
	for bit, acc := range map[uint32]ctx.Access{
		C.IB_UVERBS_ACCESS_LOCAL_WRITE: ctx.AccessLocalWrite, C.IB_UVERBS_ACCESS_REMOTE_WRITE: ctx.AccessRemoteWrite,
		C.IB_UVERBS_ACCESS_REMOTE_READ: ctx.AccessRemoteRead, C.IB_UVERBS_ACCESS_REMOTE_ATOMIC: ctx.AccessRemoteAtomic,
	} {
		if flags&bit != 0 {
			a |= acc
		}
	}
	return a, 0
}

// checkMapped reports EFAULT unless every page of [addr, addr+n) can be
// read (what pinning the pages finds): it reads one byte of each page,
// up to 1024 pages a call.
func (k *kernel) checkMapped(addr, n uint64) syscall.Errno {
	ps := uint64(k.pageSize)
	end := addr + n
	if end < addr {
		return unix.EINVAL
	}
	var local [1024]byte
	var remote [1024]unix.RemoteIovec
	page := addr
	for page < end {
		i := 0
		for ; i < len(remote) && page < end; i++ {
			remote[i] = unix.RemoteIovec{Base: uintptr(page), Len: 1}
			page = (page &^ (ps - 1)) + ps
			if page == 0 { // the last page of the address space
				page = end
			}
		}
		iov := []unix.Iovec{{Base: &local[0]}}
		iov[0].SetLen(i)
		got, err := unix.ProcessVMReadv(os.Getpid(), iov, remote[:i], 0)
		if en := transferErrno(got, i, err); en != 0 {
			return en
		}
	}
	return 0
}

func (k *kernel) regMR(f *ufile, pdHandle uint32, start, length, iova uint64, flags uint32) (handle, lkey, rkey uint32, en syscall.Errno) {
	ps := uint64(k.pageSize)
	if start&(ps-1) != iova&(ps-1) {
		return 0, 0, 0, unix.EINVAL
	}
	access, en := checkMRAccess(flags)
	if en != 0 {
		return 0, 0, 0, en
	}
	p, en := f.uctx.object(pdHandle, objPD)
	if en != 0 {
		return 0, 0, 0, en
	}
	if length == 0 || start+length < start {
		return 0, 0, 0, unix.EINVAL
	}
	if length > f.dev.Attr.MaxMRSize {
		return 0, 0, 0, unix.EINVAL
	}
	if iova != start {
		return 0, 0, 0, unix.EOPNOTSUPP
	}
	if en := k.checkMapped(start, length); en != 0 {
		return 0, 0, 0, en
	}
	// The range is the process's own memory, not Go's: it reaches the
	// model as a pointer without a uintptr conversion vet would flag.
	m, err := p.pd.RegisterMemory(*(*unsafe.Pointer)(unsafe.Pointer(&start)), length, access)
	if err != nil {
		return 0, 0, 0, errnoOfModel(err)
	}
	p.users++
	h := f.uctx.addObject(&uobject{kind: objMR, mr: m, owner: pdHandle})
	return h, m.LKey(), m.RKey(), 0
}

func (k *kernel) destroyMR(f *ufile, h uint64) syscall.Errno {
	o, en := f.uctx.destroyable(h, objMR)
	if en != 0 {
		return en
	}
	o.close()
	f.uctx.removeObject(uint32(h))
	if p, ok := f.uctx.objects[o.owner]; ok {
		p.users--
	}
	return 0
}

func (k *kernel) writeRegMR(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_reg_mr
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	h, lkey, rkey, en := k.regMR(f, uint32(req.pd_handle), uint64(req.start), uint64(req.length), uint64(req.hca_va), uint32(req.access_flags))
	if en != 0 {
		return en
	}
	resp := C.struct_ib_uverbs_reg_mr_resp{mr_handle: C.__u32(h), lkey: C.__u32(lkey), rkey: C.__u32(rkey)}
	if en = c.response(bytesOf(&resp)); en != 0 {
		_ = k.destroyMR(f, uint64(h))
	}
	return en
}

func (k *kernel) writeDeregMR(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_dereg_mr
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	return k.destroyMR(f, uint64(req.mr_handle))
}
