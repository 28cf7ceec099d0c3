//go:build cgo && linux

package emulate

/*
#include "uverbs_abi.h"
*/
import "C"

import (
	"encoding/binary"
	"syscall"

	"golang.org/x/sys/unix"
)

// The write commands of the uverbs core (write() on the device node), the
// path libibverbs takes when an ioctl method is missing: struct
// ib_uverbs_cmd_hdr, then the command (whose first field is where the
// response goes), then driver data; extended commands add struct
// ib_uverbs_ex_cmd_hdr. The checks and the errnos are ib_uverbs_write's: a
// command that is not one gets EINVAL, an unknown one EOPNOTSUPP, a length
// that disagrees with the header EINVAL, a request or response buffer too
// short for the command ENOSPC.

// writeCmd is one write command the model implements.
type writeCmd struct {
	name     string
	reqSize  int // the core request (after the header)
	respSize int // the core response (legacy commands)
	// udata marks a legacy command with driver data after the core
	// request (UAPI_DEF_WRITE_UDATA_*); without it the whole input is
	// the core request, which uverbs_request checks.
	udata   bool
	context bool
	run     func(k *kernel, f *ufile, c *writeCall) syscall.Errno
}

// writeCall is a decoded write command: the core request, where the core
// response goes, and the driver data in and out.
type writeCall struct {
	req      []byte
	respAddr uintptr
	respLen  int
	udataIn  []byte
	udataOut uintptr
	udataLen int
}

var writeCmds = map[uint32]*writeCmd{
	C.IB_USER_VERBS_CMD_GET_CONTEXT: {
		name: "GET_CONTEXT", reqSize: C.sizeof_struct_ib_uverbs_get_context, udata: true,
		respSize: C.sizeof_struct_ib_uverbs_get_context_resp,
		run:      (*kernel).writeGetContext,
	},
	C.IB_USER_VERBS_CMD_QUERY_DEVICE: {
		name: "QUERY_DEVICE", reqSize: C.sizeof_struct_ib_uverbs_query_device,
		respSize: C.sizeof_struct_ib_uverbs_query_device_resp, context: true,
		run: (*kernel).writeQueryDevice,
	},
	C.IB_USER_VERBS_CMD_QUERY_PORT: {
		name: "QUERY_PORT", reqSize: C.sizeof_struct_ib_uverbs_query_port,
		respSize: C.sizeof_struct_ib_uverbs_query_port_resp, context: true,
		run: (*kernel).writeQueryPort,
	},
	C.IB_USER_VERBS_CMD_ALLOC_PD: {
		name: "ALLOC_PD", reqSize: C.sizeof_struct_ib_uverbs_alloc_pd, udata: true,
		respSize: C.sizeof_struct_ib_uverbs_alloc_pd_resp, context: true,
		run: (*kernel).writeAllocPD,
	},
	C.IB_USER_VERBS_CMD_DEALLOC_PD: {
		name: "DEALLOC_PD", reqSize: C.sizeof_struct_ib_uverbs_dealloc_pd,
		run: (*kernel).writeDeallocPD,
	},
	C.IB_USER_VERBS_CMD_REG_MR: {
		name: "REG_MR", reqSize: C.sizeof_struct_ib_uverbs_reg_mr, udata: true,
		respSize: C.sizeof_struct_ib_uverbs_reg_mr_resp, context: true,
		run: (*kernel).writeRegMR,
	},
	C.IB_USER_VERBS_CMD_DEREG_MR: {
		name: "DEREG_MR", reqSize: C.sizeof_struct_ib_uverbs_dereg_mr,
		run: (*kernel).writeDeregMR,
	},
	C.IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL: {
		name: "CREATE_COMP_CHANNEL", reqSize: C.sizeof_struct_ib_uverbs_create_comp_channel,
		respSize: C.sizeof_struct_ib_uverbs_create_comp_channel_resp, context: true,
		run: (*kernel).writeCreateCompChannel,
	},
	C.IB_USER_VERBS_CMD_CREATE_CQ: {
		name: "CREATE_CQ", reqSize: C.sizeof_struct_ib_uverbs_create_cq, udata: true,
		respSize: C.sizeof_struct_ib_uverbs_create_cq_resp, context: true,
		run: (*kernel).writeCreateCQ,
	},
	C.IB_USER_VERBS_CMD_RESIZE_CQ: {
		name: "RESIZE_CQ", reqSize: C.sizeof_struct_ib_uverbs_resize_cq, udata: true,
		respSize: C.sizeof_struct_ib_uverbs_resize_cq_resp, context: true,
		run: (*kernel).writeResizeCQ,
	},
	C.IB_USER_VERBS_CMD_DESTROY_CQ: {
		name: "DESTROY_CQ", reqSize: C.sizeof_struct_ib_uverbs_destroy_cq,
		respSize: C.sizeof_struct_ib_uverbs_destroy_cq_resp,
		run:      (*kernel).writeDestroyCQ,
	},
	C.IB_USER_VERBS_CMD_CREATE_QP: {
		name: "CREATE_QP", reqSize: C.sizeof_struct_ib_uverbs_create_qp, udata: true,
		respSize: C.sizeof_struct_ib_uverbs_create_qp_resp, context: true,
		run: (*kernel).writeCreateQP,
	},
	C.IB_USER_VERBS_CMD_MODIFY_QP: {
		name: "MODIFY_QP", reqSize: C.sizeof_struct_ib_uverbs_modify_qp, context: true,
		run: (*kernel).writeModifyQP,
	},
	C.IB_USER_VERBS_CMD_QUERY_QP: {
		name: "QUERY_QP", reqSize: C.sizeof_struct_ib_uverbs_query_qp,
		respSize: C.sizeof_struct_ib_uverbs_query_qp_resp, context: true,
		run: (*kernel).writeQueryQP,
	},
	C.IB_USER_VERBS_CMD_DESTROY_QP: {
		name: "DESTROY_QP", reqSize: C.sizeof_struct_ib_uverbs_destroy_qp,
		respSize: C.sizeof_struct_ib_uverbs_destroy_qp_resp,
		run:      (*kernel).writeDestroyQP,
	},
}

var writeExCmds = map[uint32]*writeCmd{
	C.IB_USER_VERBS_EX_CMD_QUERY_DEVICE: {
		name: "EX_QUERY_DEVICE", reqSize: C.sizeof_struct_ib_uverbs_ex_query_device, context: true,
		// offsetofend(struct ib_uverbs_ex_query_device_resp, response_length)
		respSize: C.sizeof_struct_ib_uverbs_query_device_resp + 8,
		run:      (*kernel).writeExQueryDevice,
	},
}

// write runs a write command; it returns the bytes consumed (all of them)
// or an errno.
func (k *kernel) write(fd int, buf uintptr, count int) (int, syscall.Errno) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.events[fd]; ok {
		// An event file is opened read-only (anon_inode_getfile with
		// O_RDONLY): vfs_write refuses it before any file operation.
		return 0, unix.EBADF
	}
	f, ok := k.files[fd]
	if !ok {
		return 0, unix.EBADF
	}
	if count < C.mk_cmd_hdr_size {
		return 0, unix.EINVAL
	}
	var hdr C.struct_ib_uverbs_cmd_hdr
	if en := copyIn(bytesOf(&hdr), buf); en != 0 {
		return 0, en
	}
	command := uint32(hdr.command)
	if command&^uint32(C.IB_USER_VERBS_CMD_FLAG_EXTENDED|C.IB_USER_VERBS_CMD_COMMAND_MASK) != 0 {
		return 0, unix.EINVAL
	}
	index := command & C.IB_USER_VERBS_CMD_COMMAND_MASK
	extended := command&C.IB_USER_VERBS_CMD_FLAG_EXTENDED != 0
	var cmd *writeCmd
	if extended {
		cmd = writeExCmds[index]
	} else {
		cmd = writeCmds[index]
	}
	if cmd == nil {
		return 0, unix.EOPNOTSUPP
	}
	var call *writeCall
	var en syscall.Errno
	if extended {
		call, en = decodeWriteEx(&hdr, cmd, buf, count)
	} else {
		call, en = decodeWrite(&hdr, cmd, buf, count)
	}
	if en != 0 {
		return 0, en
	}
	if cmd.context && f.uctx == nil {
		return 0, unix.EINVAL
	}
	if en := cmd.run(k, f, call); en != 0 {
		return 0, en
	}
	k.calls["write "+cmd.name]++
	return count, 0
}

// decodeWrite checks a legacy command's header against count and reads
// the core request; its first field is the response address.
func decodeWrite(hdr *C.struct_ib_uverbs_cmd_hdr, cmd *writeCmd, buf uintptr, count int) (*writeCall, syscall.Errno) {
	if int(hdr.in_words)*4 != count {
		return nil, unix.EINVAL
	}
	outLen := int(hdr.out_words) * 4
	if count < C.mk_cmd_hdr_size+cmd.reqSize {
		if uint32(hdr.command) != C.IB_USER_VERBS_CMD_DESTROY_CQ || count != 16 {
			return nil, unix.ENOSPC
		}
		// verify_hdr's allowance for rdma-core v18 and v19, which
		// write DESTROY_CQ with a count of 16: the request is read
		// whole (in_words 6) and out_words is not checked.
		count = C.mk_cmd_hdr_size + cmd.reqSize
	} else if outLen < cmd.respSize {
		return nil, unix.ENOSPC
	}
	inLen := count - C.mk_cmd_hdr_size
	in := make([]byte, inLen)
	if en := copyIn(in, buf+C.mk_cmd_hdr_size); en != 0 {
		return nil, en
	}
	c := &writeCall{req: in, respLen: cmd.respSize}
	if cmd.udata {
		c.req, c.udataIn = in[:cmd.reqSize], in[cmd.reqSize:]
	} else if cmd.respSize > 0 {
		// No driver data: the whole response buffer is the core
		// response's, and what the response does not fill is zeroed
		// (uverbs_response).
		c.respLen = outLen
	}
	if cmd.respSize > 0 {
		c.respAddr = uintptr(binary.NativeEndian.Uint64(in))
		c.udataOut = c.respAddr + uintptr(cmd.respSize)
		c.udataLen = outLen - cmd.respSize
	}
	return c, 0
}

// decodeWriteEx checks an extended command's headers against count and
// reads the core request.
func decodeWriteEx(hdr *C.struct_ib_uverbs_cmd_hdr, cmd *writeCmd, buf uintptr, count int) (*writeCall, syscall.Errno) {
	if count < C.mk_cmd_hdr_size+C.mk_ex_cmd_hdr_size {
		return nil, unix.EINVAL
	}
	var ex C.struct_ib_uverbs_ex_cmd_hdr
	if en := copyIn(bytesOf(&ex), buf+C.mk_cmd_hdr_size); en != 0 {
		return nil, en
	}
	coreIn := int(hdr.in_words) * 8
	driverIn := int(ex.provider_in_words) * 8
	if coreIn+driverIn != count-C.mk_cmd_hdr_size-C.mk_ex_cmd_hdr_size {
		return nil, unix.EINVAL
	}
	if coreIn < cmd.reqSize {
		return nil, unix.ENOSPC
	}
	if ex.cmd_hdr_reserved != 0 {
		return nil, unix.EINVAL
	}
	coreOut := int(hdr.out_words) * 8
	driverOut := int(ex.provider_out_words) * 8
	if ex.response != 0 {
		if coreOut == 0 && driverOut == 0 {
			return nil, unix.EINVAL
		}
		if coreOut < cmd.respSize {
			return nil, unix.ENOSPC
		}
	} else if coreOut != 0 || driverOut != 0 {
		return nil, unix.EINVAL
	}
	in := make([]byte, coreIn+driverIn)
	if en := copyIn(in, buf+C.mk_cmd_hdr_size+C.mk_ex_cmd_hdr_size); en != 0 {
		return nil, en
	}
	return &writeCall{
		req: in[:coreIn], respAddr: uintptr(ex.response), respLen: coreOut,
		udataIn: in[coreIn:], udataOut: uintptr(ex.response) + uintptr(coreOut), udataLen: driverOut,
	}, 0
}

// request copies the core request into dst as uverbs_request does: a
// shorter request is zero-extended, a longer one must be zero beyond what
// the kernel knows (EOPNOTSUPP otherwise).
func (c *writeCall) request(dst []byte) syscall.Errno {
	n := copy(dst, c.req)
	for _, b := range c.req[n:] {
		if b != 0 {
			return unix.EOPNOTSUPP
		}
	}
	return 0
}

// response writes the core response as uverbs_response does: as much as
// the response buffer holds, the rest of it zeroed.
func (c *writeCall) response(src []byte) syscall.Errno {
	n := min(len(src), c.respLen)
	if en := copyOut(c.respAddr, src[:n]); en != 0 {
		return en
	}
	return clearOut(c.respAddr+uintptr(n), c.respLen-n)
}

func (k *kernel) writeGetContext(f *ufile, c *writeCall) syscall.Errno {
	uc, vendor, en := k.allocUcontext(f, c.udataIn)
	if en != 0 {
		return en
	}
	ev, en := k.newEventFile()
	if en != 0 {
		_ = uc.dev.Close()
		return en
	}
	var resp C.struct_ib_uverbs_get_context_resp
	resp.async_fd = C.__u32(ev.fd)
	resp.num_comp_vectors = C.__u32(f.dev.Attr.CompVectors)
	if en = c.response(bytesOf(&resp)); en == 0 {
		en = writeUcontextResp(vendor, c.udataOut, c.udataLen)
	}
	if en != 0 {
		k.dropEventFile(ev)
		_ = uc.dev.Close()
		return en
	}
	ev.owner = f
	uc.async.addFile(ev)
	f.uctx = uc
	return 0
}

func (k *kernel) writeQueryDevice(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_query_device
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	resp := queryDeviceResp(f.dev)
	return c.response(bytesOf(&resp))
}

func (k *kernel) writeQueryPort(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_query_port
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	resp, en := liveQueryPortResp(f, uint8(req.port_num))
	if en != 0 {
		return en
	}
	return c.response(bytesOf(&resp))
}

func (k *kernel) writeExQueryDevice(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_ex_query_device
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	if req.comp_mask != 0 || req.reserved != 0 {
		return unix.EINVAL
	}
	for _, b := range c.udataIn {
		if b != 0 {
			return unix.EINVAL
		}
	}
	resp := queryDeviceExResp(f.dev)
	resp.response_length = C.__u32(min(c.respLen, int(C.sizeof_struct_ib_uverbs_ex_query_device_resp)))
	if en := c.response(bytesOf(&resp)); en != 0 {
		return en
	}
	return writeMLX5QueryDeviceResp(f.dev, c.udataOut, c.udataLen)
}
