//go:build cgo && linux

package emulate

/*
#include "uverbs_abi.h"
*/
import "C"

import (
	"encoding/binary"
	"math"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The ioctl framework of the uverbs core (RDMA_VERBS_IOCTL): a header
// naming an object and a method, then attributes. The checks and the
// errnos are the kernel's: a header of the wrong length is EINVAL, set
// reserved fields EPROTONOSUPPORT, an unknown method EPROTONOSUPPORT (the
// answer that makes libibverbs fall back to a write command), an unknown
// attribute flagged mandatory EPROTONOSUPPORT and one not flagged is
// ignored, a duplicate attribute or one of the wrong length EINVAL, a
// missing mandatory attribute EINVAL, an address that cannot be read or
// written EFAULT.

// Attribute kinds.
type attrKind uint8

const (
	attrPtrIn  attrKind = iota + 1 // input bytes, inline when 8 or fewer
	attrPtrOut                     // output buffer
	attrFDNew                      // a descriptor the method creates
	attrFDIn                       // a descriptor the caller names
	attrIDRIn                      // an object handle the caller names
	attrIDRNew                     // an object handle the method creates
)

// attrSpec is what a method accepts for one attribute id.
type attrSpec struct {
	id        uint16
	kind      attrKind
	minLen    int
	maxLen    int
	mandatory bool
}

func constIn(id uint16, mandatory bool) attrSpec {
	return attrSpec{id: id, kind: attrPtrIn, minLen: 8, maxLen: 8, mandatory: mandatory}
}

func flagsIn(id uint16, mandatory bool) attrSpec {
	return attrSpec{id: id, kind: attrPtrIn, minLen: 4, maxLen: 8, mandatory: mandatory}
}

func ptrOut(id uint16, minLen, maxLen int, mandatory bool) attrSpec {
	return attrSpec{id: id, kind: attrPtrOut, minLen: minLen, maxLen: maxLen, mandatory: mandatory}
}

// structOut is an output declared with UVERBS_ATTR_STRUCT: at least size
// bytes, and any more (zero_trailing: uverbs_process_attr checks no upper
// bound for an output), which the method zero-fills.
func structOut(id uint16, size int, mandatory bool) attrSpec {
	return ptrOut(id, size, math.MaxUint16, mandatory)
}

// The driver data of methods that carry it (UVERBS_ATTR_UHW).
var uhwSpecs = []attrSpec{
	{id: C.UVERBS_ATTR_UHW_IN, kind: attrPtrIn, minLen: 0, maxLen: math.MaxUint16},
	{id: C.UVERBS_ATTR_UHW_OUT, kind: attrPtrOut, minLen: 0, maxLen: math.MaxUint16},
}

// method is one ioctl method the model implements.
type method struct {
	name    string
	attrs   []attrSpec
	udata   bool // carries UHW_IN / UHW_OUT
	context bool // needs the context GET_CONTEXT created
	run     func(k *kernel, f *ufile, b *bundle) syscall.Errno
}

type methodKey struct{ object, method uint16 }

// ioctlMethods are the methods the model answers; every other one gets
// EPROTONOSUPPORT, as from a kernel without it.
var ioctlMethods = map[methodKey]*method{
	{C.UVERBS_OBJECT_DEVICE, C.UVERBS_METHOD_GET_CONTEXT}: {
		name: "GET_CONTEXT", udata: true,
		attrs: []attrSpec{
			ptrOut(C.UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS, 4, 4, false),
			ptrOut(C.UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT, 8, 8, false),
		},
		run: (*kernel).ioctlGetContext,
	},
	{C.UVERBS_OBJECT_DEVICE, C.UVERBS_METHOD_QUERY_PORT}: {
		name: "QUERY_PORT", context: true,
		attrs: []attrSpec{
			constIn(C.UVERBS_ATTR_QUERY_PORT_PORT_NUM, true),
			structOut(C.UVERBS_ATTR_QUERY_PORT_RESP, C.mk_query_port_resp_ex_size, true),
		},
		run: (*kernel).ioctlQueryPort,
	},
	{C.UVERBS_OBJECT_DEVICE, C.UVERBS_METHOD_QUERY_GID_TABLE}: {
		name: "QUERY_GID_TABLE", context: true,
		attrs: []attrSpec{
			constIn(C.UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE, true),
			flagsIn(C.UVERBS_ATTR_QUERY_GID_TABLE_FLAGS, false),
			ptrOut(C.UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES, 0, math.MaxUint16, true),
			ptrOut(C.UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES, 8, 8, true),
		},
		run: (*kernel).ioctlQueryGIDTable,
	},
	{C.UVERBS_OBJECT_DEVICE, C.UVERBS_METHOD_QUERY_GID_ENTRY}: {
		name: "QUERY_GID_ENTRY", context: true,
		attrs: []attrSpec{
			constIn(C.UVERBS_ATTR_QUERY_GID_ENTRY_PORT, true),
			constIn(C.UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX, true),
			flagsIn(C.UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS, true),
			structOut(C.UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY, C.mk_gid_entry_size, true),
		},
		run: (*kernel).ioctlQueryGIDEntry,
	},
	{C.UVERBS_OBJECT_ASYNC_EVENT, C.UVERBS_METHOD_ASYNC_EVENT_ALLOC}: {
		name: "ASYNC_EVENT_ALLOC", context: true,
		attrs: []attrSpec{
			{id: C.UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE, kind: attrFDNew, mandatory: true},
		},
		run: (*kernel).ioctlAsyncEventAlloc,
	},
	{C.UVERBS_OBJECT_PD, C.UVERBS_METHOD_PD_DESTROY}: {
		name:  "PD_DESTROY",
		attrs: []attrSpec{{id: C.UVERBS_ATTR_DESTROY_PD_HANDLE, kind: attrIDRIn, mandatory: true}},
		run: func(k *kernel, f *ufile, b *bundle) syscall.Errno {
			return k.destroyPD(f, b.get(C.UVERBS_ATTR_DESTROY_PD_HANDLE).data)
		},
	},
	{C.UVERBS_OBJECT_MR, C.UVERBS_METHOD_MR_DESTROY}: {
		name:  "MR_DESTROY",
		attrs: []attrSpec{{id: C.UVERBS_ATTR_DESTROY_MR_HANDLE, kind: attrIDRIn, mandatory: true}},
		run: func(k *kernel, f *ufile, b *bundle) syscall.Errno {
			return k.destroyMR(f, b.get(C.UVERBS_ATTR_DESTROY_MR_HANDLE).data)
		},
	},
	{C.UVERBS_OBJECT_CQ, C.UVERBS_METHOD_CQ_CREATE}: {
		name: "CQ_CREATE", context: true, udata: true,
		attrs: []attrSpec{
			{id: C.UVERBS_ATTR_CREATE_CQ_HANDLE, kind: attrIDRNew, mandatory: true},
			{id: C.UVERBS_ATTR_CREATE_CQ_CQE, kind: attrPtrIn, minLen: 4, maxLen: 4, mandatory: true},
			constIn(C.UVERBS_ATTR_CREATE_CQ_USER_HANDLE, true),
			{id: C.UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL, kind: attrFDIn},
			{id: C.UVERBS_ATTR_CREATE_CQ_COMP_VECTOR, kind: attrPtrIn, minLen: 4, maxLen: 4, mandatory: true},
			flagsIn(C.UVERBS_ATTR_CREATE_CQ_FLAGS, false),
			ptrOut(C.UVERBS_ATTR_CREATE_CQ_RESP_CQE, 4, 4, true),
			{id: C.UVERBS_ATTR_CREATE_CQ_EVENT_FD, kind: attrFDIn},
		},
		run: (*kernel).ioctlCreateCQ,
	},
	{C.UVERBS_OBJECT_CQ, C.UVERBS_METHOD_CQ_DESTROY}: {
		name: "CQ_DESTROY",
		attrs: []attrSpec{
			{id: C.UVERBS_ATTR_DESTROY_CQ_HANDLE, kind: attrIDRIn, mandatory: true},
			ptrOut(C.UVERBS_ATTR_DESTROY_CQ_RESP, C.sizeof_struct_ib_uverbs_destroy_cq_resp, C.sizeof_struct_ib_uverbs_destroy_cq_resp, true),
		},
		run: (*kernel).ioctlDestroyCQ,
	},
}

// uattr is one attribute as the caller sent it.
type uattr struct {
	index    int // position in the caller's array
	id       uint16
	length   uint16
	flags    uint16
	attrData uint16
	data     uint64
	spec     *attrSpec
	written  bool  // an output the method wrote (UVERBS_ATTR_F_VALID_OUTPUT)
	flagged  bool  // the caller's attribute already says so (setOutput)
	newFD    int   // the descriptor an attrFDNew attribute returns
	newID    int64 // the handle an attrIDRNew attribute returns
}

// bundle is a call's attributes by id.
type bundle struct {
	attrsAddr uintptr // the caller's attribute array
	attrs     map[uint16]*uattr
}

func (b *bundle) get(id uint16) *uattr { return b.attrs[id] }

// inBytes returns an input attribute's bytes: inline when 8 or fewer,
// read from the caller's memory otherwise.
func (b *bundle) inBytes(a *uattr) ([]byte, syscall.Errno) {
	buf := make([]byte, a.length)
	if a.length <= 8 {
		var d [8]byte
		binary.NativeEndian.PutUint64(d[:], a.data)
		copy(buf, d[:])
		return buf, 0
	}
	return buf, copyIn(buf, uintptr(a.data))
}

// constValue reads a UVERBS_ATTR_CONST_IN value no larger than max.
func (b *bundle) constValue(id uint16, max uint64) (uint64, syscall.Errno) {
	a := b.get(id)
	if a == nil {
		return 0, unix.EINVAL
	}
	if a.data > max {
		return 0, unix.EINVAL
	}
	return a.data, 0
}

// flags32 reads an optional UVERBS_ATTR_FLAGS_IN value (4 or 8 bytes; 0
// when absent) and refuses bits outside allowed.
func (b *bundle) flags32(id uint16, allowed uint64) (uint32, syscall.Errno) {
	a := b.get(id)
	if a == nil {
		return 0, 0
	}
	v := a.data
	switch a.length {
	case 8:
	case 4:
		v &= math.MaxUint32
	default:
		return 0, unix.EINVAL
	}
	if v&^allowed != 0 || v > math.MaxUint32 {
		return 0, unix.EINVAL
	}
	return uint32(v), 0
}

// copyTo writes an output attribute: as much of src as its buffer holds
// (uverbs_copy_to), then marks it written in the caller's attribute at
// once, as uverbs_set_output does, so that an attribute array that cannot
// be written back fails the method before it goes on. An absent attribute
// is no error.
func (b *bundle) copyTo(id uint16, src []byte) syscall.Errno {
	a := b.get(id)
	if a == nil {
		return 0
	}
	n := min(int(a.length), len(src))
	if en := copyOut(uintptr(a.data), src[:n]); en != 0 {
		return en
	}
	a.written = true
	return b.setOutput(a)
}

// setOutput sets UVERBS_ATTR_F_VALID_OUTPUT in the caller's copy of a.
func (b *bundle) setOutput(a *uattr) syscall.Errno {
	var fl [2]byte
	binary.NativeEndian.PutUint16(fl[:], a.flags|C.UVERBS_ATTR_F_VALID_OUTPUT)
	at := b.attrsAddr + uintptr(a.index*C.mk_attr_size)
	if en := copyOut(at+C.mk_attr_off_flags, fl[:]); en != 0 {
		return en
	}
	a.flagged = true
	return 0
}

// copyToStructOrZero writes src and zeroes the rest of a longer buffer
// (uverbs_copy_to_struct_or_zero).
func (b *bundle) copyToStructOrZero(id uint16, src []byte) syscall.Errno {
	a := b.get(id)
	if a == nil {
		return 0
	}
	if int(a.length) > len(src) {
		if en := clearOut(uintptr(a.data)+uintptr(len(src)), int(a.length)-len(src)); en != 0 {
			return en
		}
	}
	return b.copyTo(id, src)
}

// udata returns the driver data of a call: the input bytes and where the
// output goes (address and length), empty when absent.
func (b *bundle) udata() (in []byte, outAddr uintptr, outLen int, en syscall.Errno) {
	if a := b.get(C.UVERBS_ATTR_UHW_IN); a != nil {
		if in, en = b.inBytes(a); en != 0 {
			return nil, 0, 0, en
		}
	}
	if a := b.get(C.UVERBS_ATTR_UHW_OUT); a != nil {
		outAddr, outLen = uintptr(a.data), int(a.length)
	}
	return in, outAddr, outLen, 0
}

// ioctl runs an ioctl on a descriptor of the kernel.
func (k *kernel) ioctl(fd int, request uint, arg uintptr) syscall.Errno {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.events[fd]; ok {
		return unix.ENOTTY
	}
	f, ok := k.files[fd]
	if !ok {
		return unix.EBADF
	}
	if k.noIoctl || request != uint(C.mk_rdma_verbs_ioctl()) {
		return unix.ENOTTY
	}
	var hdr [C.mk_ioctl_hdr_size]byte
	if en := copyIn(hdr[:], arg); en != 0 {
		return en
	}
	ne := binary.NativeEndian
	length := int(ne.Uint16(hdr[C.mk_ioctl_hdr_off_length:]))
	numAttrs := int(ne.Uint16(hdr[C.mk_ioctl_hdr_off_num_attrs:]))
	if length > k.pageSize || length != C.mk_ioctl_hdr_size+numAttrs*C.mk_attr_size {
		return unix.EINVAL
	}
	if ne.Uint64(hdr[C.mk_ioctl_hdr_off_reserved1:]) != 0 || ne.Uint32(hdr[C.mk_ioctl_hdr_off_reserved2:]) != 0 {
		return unix.EPROTONOSUPPORT
	}
	if ne.Uint32(hdr[C.mk_ioctl_hdr_off_driver_id:]) != C.RDMA_DRIVER_MLX5 {
		return unix.EINVAL
	}
	m := ioctlMethods[methodKey{ne.Uint16(hdr[C.mk_ioctl_hdr_off_object:]), ne.Uint16(hdr[C.mk_ioctl_hdr_off_method:])}]
	if m == nil {
		return unix.EPROTONOSUPPORT
	}
	raw := make([]byte, numAttrs*C.mk_attr_size)
	attrsAddr := arg + C.mk_ioctl_hdr_size
	if en := copyIn(raw, attrsAddr); en != 0 {
		return en
	}
	b := &bundle{attrsAddr: attrsAddr, attrs: map[uint16]*uattr{}}
	for i := 0; i < numAttrs; i++ {
		r := raw[i*C.mk_attr_size:]
		a := &uattr{
			index:    i,
			id:       ne.Uint16(r[C.mk_attr_off_id:]),
			length:   ne.Uint16(r[C.mk_attr_off_len:]),
			flags:    ne.Uint16(r[C.mk_attr_off_flags:]),
			attrData: ne.Uint16(r[C.mk_attr_off_attr_data:]),
			data:     ne.Uint64(r[C.mk_attr_off_data:]),
			newFD:    -1,
			newID:    -1,
		}
		if en := m.accept(b, a); en != 0 {
			return en
		}
	}
	for i := range m.specs() {
		s := &m.specs()[i]
		if s.mandatory && b.attrs[s.id] == nil {
			return unix.EINVAL
		}
	}
	if m.context && f.uctx == nil {
		return unix.EINVAL
	}
	en := m.run(k, f, b)
	if en == 0 {
		en = b.finish()
	}
	if en == 0 {
		k.calls["ioctl "+m.name]++
	}
	if en != 0 {
		for _, a := range b.attrs {
			if a.newID >= 0 && f.uctx != nil {
				// An object created before writing its handle back
				// failed: destroyed as its destroy method does, so
				// that nothing of it (its async event source) stays.
				k.abortObject(f, uint32(a.newID))
			}
			if a.newFD >= 0 {
				if e, ok := k.events[a.newFD]; ok {
					if f.uctx != nil {
						f.uctx.async.removeFile(e)
					}
					k.dropEventFile(e)
				}
			}
		}
	}
	return en
}

// abortObject destroys an object a method created when the call fails
// afterwards, as the kernel aborts a new uobject: through its kind's
// destroy, which releases what the object holds (its async event source,
// its parents' counts of users), as a destroy command would.
func (k *kernel) abortObject(f *ufile, h uint32) {
	o, ok := f.uctx.objects[h]
	if !ok {
		return
	}
	id := uint64(h)
	switch o.kind {
	case objCQ:
		_, _, _ = k.destroyCQ(f, id)
	case objQP:
		_, _ = k.destroyQP(f, id)
	case objSRQ:
		_, _ = k.destroySRQ(f, id)
	case objMR:
		_ = k.destroyMR(f, id)
	case objAH:
		_ = k.destroyAH(f, id)
	case objPD:
		_ = k.destroyPD(f, id)
	default:
		o.close()
		f.uctx.removeObject(h)
	}
}

// specs returns every attribute the method accepts.
func (m *method) specs() []attrSpec {
	if !m.udata {
		return m.attrs
	}
	return append(append([]attrSpec(nil), m.attrs...), uhwSpecs...)
}

// accept checks one attribute against the method's specification
// (uverbs_set_attr, uverbs_process_attr).
func (m *method) accept(b *bundle, a *uattr) syscall.Errno {
	specs := m.specs()
	var s *attrSpec
	for i := range specs {
		if specs[i].id == a.id {
			s = &specs[i]
		}
	}
	if s == nil {
		if a.flags&C.UVERBS_ATTR_F_MANDATORY != 0 {
			return unix.EPROTONOSUPPORT
		}
		return 0
	}
	if b.attrs[a.id] != nil {
		return unix.EINVAL
	}
	switch s.kind {
	case attrPtrIn, attrPtrOut:
		if int(a.length) < s.minLen || int(a.length) > s.maxLen || a.attrData != 0 {
			return unix.EINVAL
		}
	case attrFDNew, attrFDIn, attrIDRIn, attrIDRNew:
		if a.attrData != 0 || a.length != 0 {
			return unix.EINVAL
		}
	}
	a.spec = s
	b.attrs[a.id] = a
	return 0
}

// finish writes back what the kernel writes into the caller's attribute
// array: the descriptors created and the flags of the outputs written.
func (b *bundle) finish() syscall.Errno {
	ne := binary.NativeEndian
	for _, a := range b.attrs {
		at := b.attrsAddr + uintptr(a.index*C.mk_attr_size)
		if a.newFD >= 0 || a.newID >= 0 {
			v := int64(a.newFD)
			if a.newID >= 0 {
				v = a.newID
			}
			var d [8]byte
			ne.PutUint64(d[:], uint64(v))
			if en := copyOut(at+C.mk_attr_off_data, d[:]); en != 0 {
				return en
			}
		}
		if a.written && !a.flagged {
			if en := b.setOutput(a); en != 0 {
				return en
			}
		}
	}
	return 0
}

func (k *kernel) ioctlGetContext(f *ufile, b *bundle) syscall.Errno {
	in, outAddr, outLen, en := b.udata()
	if en != 0 {
		return en
	}
	uc, resp, en := k.allocUcontext(f, in)
	if en != 0 {
		return en
	}
	numComp := uint32(f.dev.Attr.CompVectors)
	coreSupport := uint64(C.IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS)
	if en = b.copyTo(C.UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS, bytesOf(&numComp)); en == 0 {
		en = b.copyTo(C.UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT, bytesOf(&coreSupport))
	}
	if en == 0 {
		en = writeUcontextResp(resp, outAddr, outLen)
	}
	if en != 0 {
		_ = uc.dev.Close()
		return en
	}
	if a := b.get(C.UVERBS_ATTR_UHW_OUT); a != nil {
		a.written = true
	}
	f.uctx = uc
	return 0
}

func (k *kernel) ioctlQueryPort(f *ufile, b *bundle) syscall.Errno {
	port, en := b.constValue(C.UVERBS_ATTR_QUERY_PORT_PORT_NUM, math.MaxUint8)
	if en != 0 {
		return en
	}
	resp, en := liveQueryPortResp(f, uint8(port))
	if en != 0 {
		return en
	}
	var ex C.struct_ib_uverbs_query_port_resp_ex
	ex.legacy_resp = resp
	// The method answers the active speed again, 32 bits wide and whole
	// (active_speed_ex, added with the XDR speed, which the legacy
	// field answers as NDR), in what older headers, the package's among
	// them, call reserved[2:6]; libibverbs from v49 reads it.
	binary.NativeEndian.PutUint32(bytesOf(&ex)[activeSpeedExOffset:], f.dev.Ports[port-1].ActiveSpeed)
	return b.copyToStructOrZero(C.UVERBS_ATTR_QUERY_PORT_RESP, bytesOf(&ex))
}

// activeSpeedExOffset is where struct ib_uverbs_query_port_resp_ex holds
// active_speed_ex: after port_cap_flags2 and two reserved bytes.
const activeSpeedExOffset = unsafe.Offsetof(C.struct_ib_uverbs_query_port_resp_ex{}.port_cap_flags2) + 4

func (k *kernel) ioctlQueryGIDEntry(f *ufile, b *bundle) syscall.Errno {
	if _, en := b.flags32(C.UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS, 0); en != 0 {
		return en
	}
	port, en := b.constValue(C.UVERBS_ATTR_QUERY_GID_ENTRY_PORT, math.MaxUint32)
	if en != 0 {
		return en
	}
	index, en := b.constValue(C.UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX, math.MaxUint32)
	if en != 0 {
		return en
	}
	if port < 1 || port > uint64(len(f.dev.Ports)) {
		return unix.EINVAL
	}
	if index >= uint64(f.dev.Ports[port-1].GIDTableLen) {
		return unix.EINVAL
	}
	e, ok := f.dev.gidAt(uint8(port), int(index))
	if !ok {
		return unix.ENODATA
	}
	entry := gidEntry(e)
	return b.copyToStructOrZero(C.UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY, bytesOf(&entry))
}

func (k *kernel) ioctlQueryGIDTable(f *ufile, b *bundle) syscall.Errno {
	if _, en := b.flags32(C.UVERBS_ATTR_QUERY_GID_TABLE_FLAGS, 0); en != 0 {
		return en
	}
	entrySize, en := b.constValue(C.UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE, math.MaxUint64)
	if en != 0 {
		return en
	}
	if entrySize == 0 {
		return unix.EINVAL
	}
	out := b.get(C.UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES)
	if uint64(out.length)%entrySize != 0 {
		return unix.EINVAL
	}
	maxEntries := int(uint64(out.length) / entrySize)
	if maxEntries == 0 {
		return unix.EINVAL
	}
	var entries []C.struct_ib_uverbs_gid_entry
	for p := range f.dev.Ports {
		for _, e := range f.dev.GIDs[p] {
			if e.GID == ([16]byte{}) {
				continue
			}
			if len(entries) >= maxEntries {
				return unix.EINVAL
			}
			entries = append(entries, gidEntry(e))
		}
	}
	for i := range entries {
		at := uintptr(out.data) + uintptr(uint64(i)*entrySize)
		src := bytesOf(&entries[i])
		n := min(len(src), int(entrySize))
		if en := copyOut(at, src[:n]); en != 0 {
			return en
		}
		if int(entrySize) > len(src) {
			if en := clearOut(at+uintptr(len(src)), int(entrySize)-len(src)); en != 0 {
				return en
			}
		}
	}
	out.written = true
	num := uint64(len(entries))
	return b.copyTo(C.UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES, bytesOf(&num))
}

func (k *kernel) ioctlAsyncEventAlloc(f *ufile, b *bundle) syscall.Errno {
	e, en := k.newEventFile()
	if en != 0 {
		return en
	}
	e.owner = f
	b.get(C.UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE).newFD = e.fd
	f.uctx.async.addFile(e)
	return 0
}
