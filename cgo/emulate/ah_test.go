//go:build cgo && linux

package emulate

import (
	"math/rand"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// ahReq is what CREATE_AH carries.
type ahReq struct {
	pd        uint32
	port      uint8
	global    bool
	dgid      ctx.GID
	sgidIndex uint8
	dlid      uint16
	rate      uint8 // static_rate
	udataOut  int   // bytes of driver response room
}

// createAHCmd sends CREATE_AH and returns the handle and the MAC of
// mlx5's response.
func createAHCmd(k *kernel, a *arena, fd int, r ahReq) (h uint32, dmac [6]byte, respLen uint32, en syscall.Errno) {
	resp, respAddr := a.alloc(createAHRespSize + r.udataOut)
	core := respCore(respAddr, make([]byte, createAHSize-8)...)
	ne.PutUint32(core[createAHOffPD:], r.pd)
	attr := core[createAHOffAttr:]
	copy(attr[ahAttrOffDGID:], r.dgid[:])
	attr[ahAttrOffSGIDIndex] = r.sgidIndex
	ne.PutUint16(attr[ahAttrOffDLID:], r.dlid)
	if r.global {
		attr[ahAttrOffIsGlobal] = 1
	}
	attr[ahAttrOffPort] = r.port
	attr[ahAttrOffRate] = r.rate
	buf, n := a.writeCmd(cmdCreateAH, core, (createAHRespSize+r.udataOut)/4)
	if _, en = k.write(fd, buf, n); en != 0 {
		return 0, dmac, 0, en
	}
	if r.udataOut < mlx5AHRespOffDMAC+len(dmac) {
		return ne.Uint32(resp), dmac, 0, 0 // no room for the driver's answer
	}
	copy(dmac[:], resp[createAHRespSize+mlx5AHRespOffDMAC:])
	return ne.Uint32(resp), dmac, ne.Uint32(resp[createAHRespSize:]), 0
}

func contextKernel(t *testing.T, ll ctx.LinkLayer) (*kernel, *arena, int) {
	k := testKernel(t, ll)
	a := newArena(t)
	fd := openNode(t, k, 0)
	en, _, _ := getContext(k, a, fd, ucontextReq(4, 0, 0))
	require.Zero(t, en)
	return k, a, fd
}

// TestKernelAddressHandles creates address handles through CREATE_AH on
// RoCE and InfiniBand ports: the destination MAC the kernel resolves
// (the port of the fabric that has the GID, a multicast mapping), and
// each refusal with its errno, creating nothing.
func TestKernelAddressHandles(t *testing.T) {
	k, a, fd := contextKernel(t, ctx.LinkLayerEthernet)
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	gids := k.devs[1].GIDs[0]
	want, ok := k.fabric.PortMAC(k.devs[1].Name())
	require.True(t, ok)
	room := (mlx5CreateAHResp + 3) / 4 * 4
	base := ahReq{pd: pd, port: 1, global: true, dgid: gids[3].GID, sgidIndex: 3, udataOut: room}

	h, dmac, n, en := createAHCmd(k, a, fd, base)
	require.Zero(t, en)
	require.Equal(t, want, dmac, "the MAC of the port whose GID table has the destination")
	require.Equal(t, uint32(mlx5AHRespOffDMAC+6), n, "response_length up to dmac")
	own, _ := k.fabric.PortMAC(k.devs[0].Name())
	require.NotEqual(t, own, dmac)

	mc := base
	mc.dgid = ctx.GID{0xff, 0x02, 15: 0x01}
	_, dmac, _, en = createAHCmd(k, a, fd, mc)
	require.Zero(t, en)
	require.Equal(t, [6]byte{0x33, 0x33, 0, 0, 0, 1}, dmac, "IPv6 multicast MAC")
	mc.dgid = ctx.GID{10: 0xff, 11: 0xff, 12: 239, 13: 0x81, 14: 2, 15: 3}
	_, dmac, _, en = createAHCmd(k, a, fd, mc)
	require.Zero(t, en)
	require.Equal(t, [6]byte{0x01, 0x00, 0x5e, 0x01, 2, 3}, dmac, "IPv4 multicast MAC")

	objects := len(k.files[fd].uctx.objects)
	for _, c := range []struct {
		name string
		mod  func(r *ahReq)
		want syscall.Errno
	}{
		{"no GRH on RoCE", func(r *ahReq) { r.global = false }, unix.EINVAL},
		{"port 0", func(r *ahReq) { r.port = 0 }, unix.EINVAL},
		{"port 2", func(r *ahReq) { r.port = 2 }, unix.EINVAL},
		{"unknown PD", func(r *ahReq) { r.pd = 0xdead }, unix.EINVAL},
		{"SGID index outside the table", func(r *ahReq) { r.sgidIndex = uint8(len(gids)) }, unix.EINVAL},
		// ib_resolve_eth_dmac: rdma_resolve_ip refuses addresses of
		// two families; a RoCE v2 link-local destination is resolved
		// by IP too.
		{"IPv6 source, IPv4 destination", func(r *ahReq) { r.sgidIndex = 5 }, unix.EINVAL},
		{"IPv4 source, link-local destination", func(r *ahReq) { r.dgid = gids[1].GID }, unix.EINVAL},
		{"no neighbour", func(r *ahReq) { r.dgid = ctx.GID{10: 0xff, 11: 0xff, 12: 10, 13: 99, 14: 99, 15: 99} }, unix.ETIMEDOUT},
		{"no room for the MAC", func(r *ahReq) { r.udataOut = 4 }, unix.EINVAL},
		// The room is looked at after the address is resolved, as
		// mlx5_ib_create_ah runs after rdma_create_user_ah's checks.
		{"no neighbour, no room", func(r *ahReq) {
			r.dgid = ctx.GID{10: 0xff, 11: 0xff, 12: 10, 13: 99, 14: 99, 15: 99}
			r.udataOut = 0
		}, unix.ETIMEDOUT},
		// create_ib_ah, last: mlx5r_ib_rate takes 0 and 2 to 25.
		{"static rate 1", func(r *ahReq) { r.rate = 1 }, unix.EINVAL},
		{"static rate 26", func(r *ahReq) { r.rate = 26 }, unix.EINVAL},
		{"static rate 1, no neighbour", func(r *ahReq) {
			r.dgid = ctx.GID{10: 0xff, 11: 0xff, 12: 10, 13: 99, 14: 99, 15: 99}
			r.rate = 1
		}, unix.ETIMEDOUT},
	} {
		r := base
		c.mod(&r)
		_, _, _, en := createAHCmd(k, a, fd, r)
		require.Equal(t, c.want, en, c.name)
	}
	require.Len(t, k.files[fd].uctx.objects, objects, "a refused CREATE_AH creates nothing")

	require.Equal(t, unix.EBUSY, handleCmd(k, a, fd, cmdDeallocPD, pd), "an AH holds its PD")
	require.Zero(t, handleCmd(k, a, fd, cmdDestroyAH, h))
	require.Equal(t, unix.ENOENT, handleCmd(k, a, fd, cmdDestroyAH, h), "destroyed twice")
	require.Equal(t, unix.EINVAL, handleCmd(k, a, fd, cmdDestroyAH, pd), "a PD is not an AH")
	for h, o := range k.files[fd].uctx.objects {
		if o.kind == objAH {
			require.Zero(t, handleCmd(k, a, fd, cmdDestroyAH, h))
		}
	}
	require.Zero(t, handleCmd(k, a, fd, cmdDeallocPD, pd))
	require.Equal(t, 3, k.callCount("write CREATE_AH"))

	// InfiniBand: no GRH needed, no MAC.
	k, a, fd = contextKernel(t, ctx.LinkLayerInfiniBand)
	pd, _, en = allocPDCmd(k, a, fd)
	require.Zero(t, en)
	h, dmac, _, en = createAHCmd(k, a, fd, ahReq{pd: pd, port: 1, dlid: 2, udataOut: room})
	require.Zero(t, en)
	require.Equal(t, [6]byte{}, dmac)
	h2, _, _, en := createAHCmd(k, a, fd, ahReq{pd: pd, port: 1, dlid: 3})
	require.Zero(t, en, "an InfiniBand port needs no room: mlx5_ib answers nothing of its own")
	require.Zero(t, handleCmd(k, a, fd, cmdDestroyAH, h2))
	_, _, _, en = createAHCmd(k, a, fd, ahReq{pd: pd, port: 1, global: true, sgidIndex: 1, udataOut: room})
	require.Equal(t, unix.EINVAL, en, "an InfiniBand port's table has one GID (rdma_get_gid_attr: index >= table->sz)")
	// create_ib_ah checks the static rate on either link layer (libmlx5
	// sends no InfiniBand CREATE_AH, but the command is there).
	for rate, want := range map[uint8]syscall.Errno{1: unix.EINVAL, 26: unix.EINVAL, 255: unix.EINVAL, 0: 0, 2: 0, 25: 0} {
		h3, _, _, en := createAHCmd(k, a, fd, ahReq{pd: pd, port: 1, dlid: 3, rate: rate})
		require.Equal(t, want, en, "InfiniBand, static rate %d", rate)
		if en == 0 {
			require.Zero(t, handleCmd(k, a, fd, cmdDestroyAH, h3))
		}
	}
	require.Zero(t, handleCmd(k, a, fd, cmdDestroyAH, h))
}

// TestKernelRandomAHCommands sends CREATE_AH and DESTROY_AH with random
// fields and raw random bodies (response addresses into a test arena or
// nowhere) and requires an errno of the kernel's, never a crash; the AHs
// created are then all destroyable and the PD free again.
func TestKernelRandomAHCommands(t *testing.T) {
	k, a, fd := contextKernel(t, ctx.LinkLayerEthernet)
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	gids := k.devs[1].GIDs[0]
	rng := rand.New(rand.NewSource(19))
	allowed := map[syscall.Errno]bool{0: true, unix.EINVAL: true, unix.EFAULT: true, unix.ENOENT: true,
		unix.EBUSY: true, unix.ENODATA: true, unix.ETIMEDOUT: true, unix.ENOSPC: true, unix.EOPNOTSUPP: true}
	for i := 0; i < 2000; i++ {
		var en syscall.Errno
		switch rng.Intn(3) {
		case 0:
			r := ahReq{pd: []uint32{pd, rng.Uint32()}[rng.Intn(2)], port: uint8(rng.Intn(3)), global: rng.Intn(4) != 0,
				sgidIndex: uint8(rng.Intn(len(gids) + 2)), dlid: uint16(rng.Uint32()), udataOut: 4 * rng.Intn(6)}
			if rng.Intn(2) == 0 {
				r.dgid = gids[rng.Intn(len(gids))].GID
			} else {
				rng.Read(r.dgid[:])
			}
			_, _, _, en = createAHCmd(k, a, fd, r)
		case 1:
			en = handleCmd(k, a, fd, cmdDestroyAH, []uint32{pd, rng.Uint32(), uint32(rng.Intn(16))}[rng.Intn(3)])
		case 2:
			core := make([]byte, 8+rng.Intn(64))
			rng.Read(core)
			ne.PutUint64(core, a.sanitize(ne.Uint64(core)))
			buf, n := a.writeCmd([]uint32{cmdCreateAH, cmdDestroyAH}[rng.Intn(2)], core, rng.Intn(6))
			_, en = k.write(fd, buf, n)
		}
		require.True(t, allowed[en], "errno %v", en)
	}
	for h, o := range k.files[fd].uctx.objects {
		if o.kind == objAH {
			require.Zero(t, handleCmd(k, a, fd, cmdDestroyAH, h))
		}
	}
	require.Zero(t, handleCmd(k, a, fd, cmdDeallocPD, pd), "no AH holds the PD any more")
}
