//go:build cgo && linux

package emulate

/*
#include "uverbs_abi.h"

enum {
	mk_create_ah_off_pd = offsetof(struct ib_uverbs_create_ah, pd_handle),
	mk_create_ah_off_attr = offsetof(struct ib_uverbs_create_ah, attr),
	mk_ah_attr_off_dgid = offsetof(struct ib_uverbs_ah_attr, grh.dgid),
	mk_ah_attr_off_sgid_index = offsetof(struct ib_uverbs_ah_attr, grh.sgid_index),
	mk_ah_attr_off_dlid = offsetof(struct ib_uverbs_ah_attr, dlid),
	mk_ah_attr_off_is_global = offsetof(struct ib_uverbs_ah_attr, is_global),
	mk_ah_attr_off_port_num = offsetof(struct ib_uverbs_ah_attr, port_num),
	mk_ah_attr_off_static_rate = offsetof(struct ib_uverbs_ah_attr, static_rate),
	mk_mlx5_ah_resp_off_dmac = offsetof(struct mlx5_ib_create_ah_resp, dmac),
};
*/
import "C"

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// Address handles. libmlx5 builds a UD address vector itself and asks the
// kernel only on Ethernet ports, where the destination MAC must be
// resolved from the destination GID (mlx5_create_ah calls CREATE_AH since
// the context announced MLX5_USER_CMDS_SUPP_UHW_CREATE_AH and copies the
// dmac of mlx5's response into the address vector); on InfiniBand no
// command reaches the kernel. The kernel object only holds the PD.

// objAH is the kind of an address handle; numbered apart from the kinds
// declared with the other objects.
const objAH objKind = 32

func init() {
	writeCmds[C.IB_USER_VERBS_CMD_CREATE_AH] = &writeCmd{
		name: "CREATE_AH", reqSize: C.sizeof_struct_ib_uverbs_create_ah, udata: true,
		respSize: C.sizeof_struct_ib_uverbs_create_ah_resp, context: true,
		run: (*kernel).writeCreateAH,
	}
	writeCmds[C.IB_USER_VERBS_CMD_DESTROY_AH] = &writeCmd{
		name: "DESTROY_AH", reqSize: C.sizeof_struct_ib_uverbs_destroy_ah,
		run: (*kernel).writeDestroyAH,
	}
	ioctlMethods[methodKey{C.UVERBS_OBJECT_AH, C.UVERBS_METHOD_AH_DESTROY}] = &method{
		name:  "AH_DESTROY",
		attrs: []attrSpec{{id: C.UVERBS_ATTR_DESTROY_AH_HANDLE, kind: attrIDRIn, mandatory: true}},
		run: func(k *kernel, f *ufile, b *bundle) syscall.Errno {
			return k.destroyAH(f, b.get(C.UVERBS_ATTR_DESTROY_AH_HANDLE).data)
		},
	}
}

// resolveDMAC finds the destination MAC of a RoCE address as
// ib_resolve_eth_dmac does (addrvec.ResolveMAC, with the fabric's GID
// tables as the neighbour table); a resolution that fails is ETIMEDOUT,
// as an unanswered neighbour request.
func (k *kernel) resolveDMAC(g ctx.GID) ([6]byte, syscall.Errno) {
	mac, ok := addrvec.ResolveMAC(g, func(g ctx.GID) ([6]byte, bool) { return simadopt.NeighbourMAC(k.fabric, g) })
	if !ok {
		return mac, unix.ETIMEDOUT
	}
	return mac, 0
}

// createAH is ib_uverbs_create_ah with mlx5_ib_create_ah: the port must
// exist (EINVAL), the PD too (EINVAL); an Ethernet port needs a GRH
// (EINVAL, rdma_check_ah_attr); a GRH's source GID index must be inside the
// port's table (EINVAL) and name an entry (ENODATA), as rdma_get_gid_attr
// answers; an Ethernet port resolves the destination MAC (EINVAL for a
// source and destination GID of different IP families,
// addrvec.FamiliesDiffer; ETIMEDOUT when nothing answers), and only then
// needs room (udataLen bytes) for mlx5_ib_create_ah_resp up to the MAC
// (EINVAL): an InfiniBand port answers nothing of the driver's. Last,
// create_ib_ah refuses a static rate mlx5r_ib_rate has no code for
// (EINVAL, qpstate.StaticRateValid), on either link layer.
func (k *kernel) createAH(f *ufile, pdHandle uint32, attr *C.struct_ib_uverbs_ah_attr, udataLen int) (uint32, [6]byte, bool, syscall.Errno) {
	var dmac [6]byte
	port := int(attr.port_num)
	if port < 1 || port > len(f.dev.Ports) {
		return 0, dmac, false, unix.EINVAL
	}
	p, en := f.uctx.object(pdHandle, objPD)
	if en != 0 {
		return 0, dmac, false, en
	}
	eth := f.dev.Ports[port-1].LinkLayer == ctx.LinkLayerEthernet
	if eth && attr.is_global == 0 {
		return 0, dmac, false, unix.EINVAL
	}
	var sgid ctx.GIDEntry
	if attr.is_global != 0 {
		if int(attr.grh.sgid_index) >= f.dev.Ports[port-1].GIDTableLen {
			return 0, dmac, false, unix.EINVAL
		}
		var ok bool
		if sgid, ok = f.dev.gidAt(uint8(port), int(attr.grh.sgid_index)); !ok {
			return 0, dmac, false, unix.ENODATA
		}
	}
	if eth {
		var g ctx.GID
		for i := range g {
			g[i] = byte(attr.grh.dgid[i])
		}
		if addrvec.FamiliesDiffer(sgid, g) {
			return 0, dmac, false, unix.EINVAL
		}
		if dmac, en = k.resolveDMAC(g); en != 0 {
			return 0, dmac, false, en
		}
		if udataLen < ahRespRoom {
			return 0, dmac, false, unix.EINVAL
		}
	}
	if !qpstate.StaticRateValid(uint8(attr.static_rate)) {
		return 0, dmac, false, unix.EINVAL
	}
	p.users++
	h := f.uctx.addObject(&uobject{kind: objAH, owner: pdHandle})
	return h, dmac, eth, 0
}

func (k *kernel) destroyAH(f *ufile, h uint64) syscall.Errno {
	o, en := f.uctx.destroyable(h, objAH)
	if en != 0 {
		return en
	}
	f.uctx.removeObject(uint32(h))
	if p, ok := f.uctx.objects[o.owner]; ok {
		p.users--
	}
	return 0
}

// ahRespRoom is the room mlx5_ib needs for its answer to CREATE_AH on an
// Ethernet port: struct mlx5_ib_create_ah_resp up to the MAC.
const ahRespRoom = int(unsafe.Offsetof(C.struct_mlx5_ib_create_ah_resp{}.dmac) + unsafe.Sizeof(C.struct_mlx5_ib_create_ah_resp{}.dmac))

func (k *kernel) writeCreateAH(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_create_ah
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	h, dmac, eth, en := k.createAH(f, uint32(req.pd_handle), &req.attr, c.udataLen)
	if en != 0 {
		return en
	}
	resp := C.struct_ib_uverbs_create_ah_resp{ah_handle: C.__u32(h)}
	if en = c.response(bytesOf(&resp)); en == 0 && eth {
		// mlx5_ib answers the MAC on an Ethernet port only.
		var vendor C.struct_mlx5_ib_create_ah_resp
		vendor.response_length = C.__u32(ahRespRoom)
		for i, b := range dmac {
			vendor.dmac[i] = C.__u8(b)
		}
		en = copyOut(c.udataOut, bytesOf(&vendor)[:ahRespRoom])
	}
	if en != 0 {
		_ = k.destroyAH(f, uint64(h))
	}
	return en
}

func (k *kernel) writeDestroyAH(f *ufile, c *writeCall) syscall.Errno {
	var req C.struct_ib_uverbs_destroy_ah
	if en := c.request(bytesOf(&req)); en != 0 {
		return en
	}
	return k.destroyAH(f, uint64(req.ah_handle))
}

// The address handle ABI as Go constants for the tests.
const (
	cmdCreateAH        = C.IB_USER_VERBS_CMD_CREATE_AH
	cmdDestroyAH       = C.IB_USER_VERBS_CMD_DESTROY_AH
	createAHSize       = C.sizeof_struct_ib_uverbs_create_ah
	createAHRespSize   = C.sizeof_struct_ib_uverbs_create_ah_resp
	mlx5CreateAHResp   = C.sizeof_struct_mlx5_ib_create_ah_resp
	createAHOffPD      = C.mk_create_ah_off_pd
	createAHOffAttr    = C.mk_create_ah_off_attr
	ahAttrOffDGID      = C.mk_ah_attr_off_dgid
	ahAttrOffSGIDIndex = C.mk_ah_attr_off_sgid_index
	ahAttrOffDLID      = C.mk_ah_attr_off_dlid
	ahAttrOffIsGlobal  = C.mk_ah_attr_off_is_global
	ahAttrOffPort      = C.mk_ah_attr_off_port_num
	ahAttrOffRate      = C.mk_ah_attr_off_static_rate
	mlx5AHRespOffDMAC  = C.mk_mlx5_ah_resp_off_dmac
)
