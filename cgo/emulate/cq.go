//go:build cgo && linux

package emulate

/*
#include "uverbs_abi.h"
*/
import "C"

import (
	"syscall"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"golang.org/x/sys/unix"
)

// Completion channels and completion queues. A completion channel is an
// event descriptor (a pipe) like the async event file; a completion queue
// is created on the model over the ring and doorbell record libmlx5
// allocated (simadopt.CompletionQueue), so that the CQEs the model writes
// are the ones libmlx5 polls.

// cqLimit is the most entries a CQ may have: the largest power of two
// within the device's max_cqe plus one (1 << log_max_cq_sz on a ConnectX).
func cqLimit(maxCQE uint32) uint64 {
	l := uint64(1)
	for l*2 <= uint64(maxCQE)+1 {
		l *= 2
	}
	return l
}

// createCompChannel creates a completion channel descriptor.
func (k *kernel) createCompChannel(f *ufile) (int, syscall.Errno) {
	e, en := k.newEventFile()
	if en != 0 {
		return -1, en
	}
	e.comp, e.owner = true, f
	return e.fd, 0
}

func (k *kernel) writeCreateCompChannel(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_create_comp_channel
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	fd, en := k.createCompChannel(f)
	if en != 0 {
		return en
	}
	resp := C.struct_ib_uverbs_create_comp_channel_resp{fd: C.__u32(fd)}
	if en = c.response(bytesOf(&resp)); en != 0 {
		k.dropEventFile(k.events[fd])
	}
	return en
}

// cqRequest is what CREATE_CQ asks for, from either door.
type cqRequest struct {
	cqe        uint64
	compVector uint64
	channel    int        // -1 for none
	userHandle uint64     // what a completion or async event names (libibverbs' CQ)
	asyncFile  *eventFile // the async descriptor CQ_CREATE named, nil for the default
	flags      uint32
	vendor     []byte // struct mlx5_ib_create_cq
}

// createCQ is the uverbs core's create_cq and mlx5_ib_create_cq for a user
// CQ: it checks the request as they do and creates the CQ on the model
// over the library's ring and doorbell record. It returns the handle, the
// entries the CQ has less one (what the response's cqe says) and the CQN.
func (k *kernel) createCQ(f *ufile, r cqRequest) (handle, cqe, cqn uint32, en syscall.Errno) {
	if r.compVector >= uint64(f.dev.Attr.CompVectors) {
		return 0, 0, 0, unix.EINVAL
	}
	if r.channel >= 0 {
		if e, ok := k.events[r.channel]; !ok || !e.comp || e.owner != f {
			return 0, 0, 0, unix.EBADF
		}
	}
	if r.flags&^cqFlagTimestamp != 0 {
		// Overrun ignoring the model has not; completion timestamps it
		// writes from its clock, as mlx5_ib lets the device do.
		return 0, 0, 0, unix.EOPNOTSUPP
	}
	limit := cqLimit(f.dev.Attr.MaxCQE)
	if r.cqe > limit {
		return 0, 0, 0, unix.EINVAL
	}
	entries := uint64(1)
	for entries < r.cqe+1 {
		entries *= 2
	}
	if entries > limit {
		return 0, 0, 0, unix.EINVAL
	}
	// create_cq_user reads as much of the request as the library sent, up
	// to the whole structure, the rest zero; less than up to the flags is
	// EINVAL (since Linux 5.7; rdma-core before v29 sends the 24 bytes up
	// to and with the flags).
	var ucmd C.struct_mlx5_ib_create_cq
	if len(r.vendor) < int(unsafe.Offsetof(ucmd.flags)) {
		return 0, 0, 0, unix.EINVAL
	}
	copy(bytesOf(&ucmd), r.vendor)
	const knownFlags = C.MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD | C.MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX | C.MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS
	if ucmd.flags&^knownFlags != 0 {
		return 0, 0, 0, unix.EINVAL
	}
	size := uint32(ucmd.cqe_size)
	if (size != 64 && size != 128) || ucmd.reserved0 != 0 || ucmd.reserved1 != 0 {
		return 0, 0, 0, unix.EINVAL
	}
	if ucmd.cqe_comp_en != 0 {
		// The device announced no CQE compression.
		return 0, 0, 0, unix.EOPNOTSUPP
	}
	if ucmd.flags&C.MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD != 0 && (size != 128 || !f.dev.Attr.CQEPadding) {
		// mlx5_ib takes padding only for 128-byte CQEs of a device with
		// cqe_128_always (what the model reports as CQEPadding); the
		// model writes every 128-byte CQE padded anyway.
		return 0, 0, 0, unix.EOPNOTSUPP
	}
	if ucmd.flags&C.MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS != 0 {
		// Real-time timestamps the model has not.
		return 0, 0, 0, unix.EOPNOTSUPP
	}
	if ucmd.flags&C.MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX != 0 {
		// The index of a dynamically allocated UAR, which this kernel
		// never hands out.
		return 0, 0, 0, unix.EINVAL
	}
	ring, db := uint64(ucmd.buf_addr), uint64(ucmd.db_addr)
	if en := k.checkMapped(ring, entries*uint64(size)); en != 0 {
		return 0, 0, 0, en
	}
	if en := k.checkMapped(db, 8); en != 0 {
		return 0, 0, 0, en
	}
	if ring%uint64(size) != 0 || db%8 != 0 {
		// The model stores CQEs and reads the record with aligned
		// atomics; libmlx5 page-aligns the ring and 8-byte-aligns the
		// record.
		return 0, 0, 0, unix.EINVAL
	}
	var events *cqEvents
	if r.channel >= 0 {
		events = &cqEvents{file: k.events[r.channel], cookie: r.userHandle}
	}
	cfg := simadopt.CQConfig{
		// The library's memory, not Go's: it reaches the model as
		// pointers without uintptr conversions vet would flag.
		Ring:       *(*unsafe.Pointer)(unsafe.Pointer(&ring)),
		Count:      uint32(entries),
		CQESize:    size,
		DBRec:      *(*unsafe.Pointer)(unsafe.Pointer(&db)),
		CompVector: uint32(r.compVector),
		Timestamps: r.flags&cqFlagTimestamp != 0,
	}
	if events != nil {
		cfg.Event = events.post
	}
	q, err := simadopt.CompletionQueue(f.uctx.dev, cfg)
	if err != nil {
		return 0, 0, 0, errnoOfModel(err)
	}
	cqn = q.Descriptor().CQN
	src := f.uctx.async.add(asyncKey{asyncCQ, cqn}, r.userHandle, r.asyncFile)
	h := f.uctx.addObject(&uobject{kind: objCQ, cq: q, channel: r.channel, events: events, async: src,
		cqEntries: uint32(entries), cqeSize: size})
	return h, uint32(entries - 1), cqn, 0
}

// destroyCQ destroys a CQ and returns the completion and async events
// reported for it: those written to its channel and async descriptor less
// those still unread there, which are taken out (ib_uverbs_release_ucq),
// so that libibverbs waits for the acknowledgement of exactly the events
// it read.
func (k *kernel) destroyCQ(f *ufile, h uint64) (comp, async uint32, en syscall.Errno) {
	o, en := f.uctx.destroyable(h, objCQ)
	if en != 0 {
		return 0, 0, en
	}
	o.close()
	f.uctx.removeObject(uint32(h))
	return o.events.reported(), f.uctx.async.release(o.async), 0
}

// writeCQNumber writes mlx5_ib's answer to CREATE_CQ: the CQN, the 4
// bytes mlx5_ib copies whatever the driver buffer (writeDriverOut).
func writeCQNumber(addr uintptr, n int, cqn uint32) syscall.Errno {
	return writeDriverOut(addr, n, bytesOf(&cqn))
}

func (k *kernel) writeCreateCQ(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_create_cq
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	// The legacy command has no flags: a ConnectX stamps every CQE, and
	// libibverbs sends this command for a CQ asked to stamp (ibv_create_cq_ex
	// with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) when the provider says the
	// kernel ignores the flag (CREATE_CQ_CMD_FLAGS_TS_IGNORED_EX, which
	// libmlx5 passes). So a CQ from this door stamps its CQEs.
	h, cqe, cqn, en := k.createCQ(f, cqRequest{
		cqe: uint64(req.cqe), compVector: uint64(req.comp_vector), channel: int(req.comp_channel),
		userHandle: uint64(req.user_handle), flags: cqFlagTimestamp,
		vendor: c.udataIn,
	})
	if en != 0 {
		return en
	}
	resp := C.struct_ib_uverbs_create_cq_resp{cq_handle: C.__u32(h), cqe: C.__u32(cqe)}
	if en = c.response(bytesOf(&resp)); en == 0 {
		en = writeCQNumber(c.udataOut, c.udataLen, cqn)
	}
	if en != 0 {
		_, _, _ = k.destroyCQ(f, uint64(h))
	}
	return en
}

func (k *kernel) writeDestroyCQ(f *ufile, c *writeCall) syscall.Errno {
	// ib_uverbs_destroy_cq ignores the reserved field.
	var req C.struct_ib_uverbs_destroy_cq
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	var resp C.struct_ib_uverbs_destroy_cq_resp
	comp, async, en := k.destroyCQ(f, uint64(req.cq_handle))
	if en != 0 {
		return en
	}
	resp.comp_events_reported, resp.async_events_reported = C.__u32(comp), C.__u32(async)
	return c.response(bytesOf(&resp))
}

// resizeCQ is ib_uverbs_resize_cq and mlx5_ib_resize_cq for a user CQ:
// entries is the request's cqe, vendor its struct mlx5_ib_resize_cq. It
// checks the request in the kernel's order, then has the model write the
// resize CQE into the old ring and go on in the new one
// (simadopt.ResizeCompletionQueue); libmlx5 copies the CQEs it had not
// polled. It returns the entries the CQ has less one (the response's cqe).
func (k *kernel) resizeCQ(f *ufile, h uint32, entries uint32, vendor []byte) (cqe uint32, en syscall.Errno) {
	o, en := f.uctx.object(h, objCQ)
	if en != 0 {
		return 0, en
	}
	// mlx5_ib_resize_cq: at least one entry and at most the device's
	// 1 << log_max_cq_sz (entries is an int there), then entries + 1
	// rounded up to a power of two within it; the CQ's own size is a
	// success that changes nothing, read before the driver data.
	limit := cqLimit(f.dev.Attr.MaxCQE)
	if int32(entries) < 1 || uint64(entries) > limit {
		return 0, unix.EINVAL
	}
	n := uint64(1)
	for n < uint64(entries)+1 {
		n *= 2
	}
	if n > limit {
		return 0, unix.EINVAL
	}
	if n == uint64(o.cqEntries) {
		return o.cqEntries - 1, 0
	}
	// resize_user: the structure (ib_copy_from_udata reads its 16 bytes
	// whatever the library sent: less is refused here as EINVAL, the
	// model not reading past the command), reserved fields zero, then
	// the pages of cqe_size * entries bytes pinned.
	var ucmd C.struct_mlx5_ib_resize_cq
	if len(vendor) < int(unsafe.Sizeof(ucmd)) {
		return 0, unix.EINVAL
	}
	copy(bytesOf(&ucmd), vendor)
	if ucmd.reserved0 != 0 || ucmd.reserved1 != 0 {
		return 0, unix.EINVAL
	}
	size := uint32(ucmd.cqe_size)
	ring := uint64(ucmd.buf_addr)
	if size == 0 {
		// A umem of no pages: ib_umem_get's EINVAL.
		return 0, unix.EINVAL
	}
	if en := k.checkMapped(ring, n*uint64(size)); en != 0 {
		return 0, en
	}
	if size != o.cqeSize || ring%uint64(size) != 0 {
		// The resize's MODIFY_CQ selects the log size and the page
		// offset and size, not the CQE size, which libmlx5 keeps; the
		// model refuses another size, and a ring the page offset
		// quanta (and its aligned stores) cannot place.
		return 0, unix.EINVAL
	}
	err := simadopt.ResizeCompletionQueue(o.cq, simadopt.CQResize{
		Ring:  *(*unsafe.Pointer)(unsafe.Pointer(&ring)),
		Count: uint32(n),
	})
	if err != nil {
		return 0, errnoOfModel(err)
	}
	o.cqEntries = uint32(n)
	return uint32(n - 1), 0
}

func (k *kernel) writeResizeCQ(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_resize_cq
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	cqe, en := k.resizeCQ(f, uint32(req.cq_handle), uint32(req.cqe), c.udataIn)
	if en != 0 {
		return en
	}
	// mlx5_ib answers no driver data (struct mlx5_ib_resize_cq_resp is
	// empty in rdma-core).
	resp := C.struct_ib_uverbs_resize_cq_resp{cqe: C.__u32(cqe)}
	return c.response(bytesOf(&resp))
}

func (k *kernel) ioctlCreateCQ(f *ufile, b *bundle) syscall.Errno {
	u32 := func(id uint16) uint64 { return b.get(id).data & 0xffffffff }
	r := cqRequest{cqe: u32(C.UVERBS_ATTR_CREATE_CQ_CQE), compVector: u32(C.UVERBS_ATTR_CREATE_CQ_COMP_VECTOR), channel: -1,
		userHandle: b.get(C.UVERBS_ATTR_CREATE_CQ_USER_HANDLE).data}
	flags, en := b.flags32(C.UVERBS_ATTR_CREATE_CQ_FLAGS, C.IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION|C.IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN)
	if en != 0 {
		return en
	}
	r.flags = flags
	// A descriptor attribute is an int: a value that is not one is
	// EINVAL (lookup_get_fd_uobject), one that names no such descriptor
	// EBADF.
	for _, id := range []uint16{C.UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL, C.UVERBS_ATTR_CREATE_CQ_EVENT_FD} {
		if a := b.get(id); a != nil && int64(a.data) != int64(int32(a.data)) {
			return unix.EINVAL
		}
	}
	if a := b.get(C.UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL); a != nil {
		if int64(a.data) < 0 || a.data > maxFD {
			return unix.EBADF
		}
		r.channel = int(a.data)
	}
	if a := b.get(C.UVERBS_ATTR_CREATE_CQ_EVENT_FD); a != nil {
		// An async event descriptor, which the CQ's async events go to.
		e, ok := k.events[int(a.data)]
		if !ok || e.comp || e.owner != f || a.data > maxFD {
			return unix.EBADF
		}
		r.asyncFile = e
	}
	in, outAddr, outLen, en := b.udata()
	if en != 0 {
		return en
	}
	r.vendor = in
	h, cqe, cqn, en := k.createCQ(f, r)
	if en != 0 {
		return en
	}
	cqe32 := cqe
	if en = b.copyTo(C.UVERBS_ATTR_CREATE_CQ_RESP_CQE, bytesOf(&cqe32)); en == 0 {
		en = writeCQNumber(outAddr, outLen, cqn)
	}
	if en != 0 {
		_, _, _ = k.destroyCQ(f, uint64(h))
		return en
	}
	if a := b.get(C.UVERBS_ATTR_UHW_OUT); a != nil {
		a.written = true
	}
	b.get(C.UVERBS_ATTR_CREATE_CQ_HANDLE).newID = int64(h)
	return 0
}

func (k *kernel) ioctlDestroyCQ(f *ufile, b *bundle) syscall.Errno {
	comp, async, en := k.destroyCQ(f, b.get(C.UVERBS_ATTR_DESTROY_CQ_HANDLE).data)
	if en != 0 {
		return en
	}
	var resp C.struct_ib_uverbs_destroy_cq_resp
	resp.comp_events_reported, resp.async_events_reported = C.__u32(comp), C.__u32(async)
	return b.copyTo(C.UVERBS_ATTR_DESTROY_CQ_RESP, bytesOf(&resp))
}
