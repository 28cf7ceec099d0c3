//go:build cgo && linux

package emulate

import (
	"encoding/binary"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// mlx5ResizeReq is a struct mlx5_ib_resize_cq.
func mlx5ResizeReq(ring uintptr, size uint16) []byte {
	b := make([]byte, mlx5ResizeCQSize)
	ne.PutUint64(b[0:], uint64(ring))
	ne.PutUint16(b[8:], size)
	return b
}

// resizeCQCmd sends RESIZE_CQ and returns the response's cqe.
func resizeCQCmd(k *kernel, a *arena, fd int, h, cqe uint32, vendor []byte) (uint32, syscall.Errno) {
	resp, respAddr := a.alloc(resizeCQRespSize)
	ne.PutUint32(resp, ^uint32(0))
	core := respCore(respAddr, make([]byte, 8)...)
	ne.PutUint32(core[8:], h)
	ne.PutUint32(core[12:], cqe)
	core = append(core, vendor...)
	buf, n := a.writeCmd(cmdResizeCQ, core, resizeCQRespSize/4)
	if _, en := k.write(fd, buf, n); en != 0 {
		return 0, en
	}
	return ne.Uint32(resp), 0
}

// setConsumer writes a consumer index to a CQ's doorbell record, as
// libmlx5 does (big-endian).
func setConsumer(db []byte, ci uint32) {
	binary.BigEndian.PutUint32(db, ci)
}

// injectReq writes the requester CQE of WQE counter n into CQ cqn.
func injectReq(t *testing.T, k *kernel, cqn uint32, n uint16) {
	t.Helper()
	var img [prm.CQE64Size]byte
	binary.BigEndian.PutUint16(img[prm.CQEWQECounter:], n)
	img[prm.CQEOpOwn] = prm.OpOwn(prm.CQEReq, prm.CQEFormatNone, false, 0)
	require.NoError(t, k.fabric.InjectCQE(cqn, img))
}

// cqeAt returns the op_own byte and WQE counter of entry i of a ring of
// 64-byte CQEs.
func cqeAt(ring []byte, i uint32) (opOwn byte, counter uint16) {
	e := ring[i*64 : i*64+64]
	return e[prm.CQEOpOwn], binary.BigEndian.Uint16(e[prm.CQEWQECounter:])
}

// TestKernelResizeCQ resizes a CQ through RESIZE_CQ as libmlx5 does and
// follows the model's CQEs: the resize CQE (opcode 5, the old ring's owner
// bit) at the old ring's next index, every later CQE in the new ring at
// the index after it with the owner bit of the new ring's lap, the
// overrun checked against the new size; then the refusals for too many
// CQEs outstanding and for a CQ in error.
func TestKernelResizeCQ(t *testing.T) {
	k, a, fd := objectKernel(t)
	ring16, db := cqMemory(t, 16, 64)
	h, cqe, cqn, en := createCQCmd(k, a, fd, 15, 0, -1, mlx5CQReq(addrOf(ring16), addrOf(db), 64), 8)
	require.Zero(t, en)
	require.Equal(t, uint32(15), cqe)

	// 20 CQEs, the consumer at 17: the producer is on the old ring's
	// second lap, 3 CQEs outstanding.
	for i := range 14 {
		injectReq(t, k, cqn, uint16(i))
	}
	setConsumer(db, 14)
	for i := 14; i < 20; i++ {
		injectReq(t, k, cqn, uint16(i))
	}
	setConsumer(db, 17)

	// Grow to 32 (cqe 31 asks for 32 entries).
	ring32, _ := cqMemory(t, 32, 64)
	cqe, en = resizeCQCmd(k, a, fd, h, 31, mlx5ResizeReq(addrOf(ring32), 64))
	require.Zero(t, en)
	require.Equal(t, uint32(31), cqe, "the response's cqe: the new entries less one")
	info, ok := simadopt.LookupCQ(k.fabric, cqn)
	require.True(t, ok)
	require.Equal(t, unsafe.Pointer(&ring32[0]), info.Ring, "the model writes into the new ring")
	require.Equal(t, uint32(32), info.Count)
	op, _ := cqeAt(ring16, 20&15)
	require.Equal(t, prm.OpOwn(prm.CQEResizeCQ, prm.CQEFormatNone, false, 1), op,
		"the resize CQE at index 20 of the old ring, owner bit of its second lap")
	op, _ = cqeAt(ring16, 21&15)
	require.Equal(t, byte(prm.OpOwn(prm.CQEReq, prm.CQEFormatNone, false, 0)), op, "the old ring has nothing after it")
	injectReq(t, k, cqn, 20)
	op, n := cqeAt(ring32, 21)
	require.Equal(t, prm.OpOwn(prm.CQEReq, prm.CQEFormatNone, false, 0), op, "index 21 of the new ring, its first lap")
	require.Equal(t, uint16(20), n)
	op, _ = cqeAt(ring32, 20)
	require.Equal(t, byte(0xf1), op, "the resize CQE's index in the new ring is left to the library's copy")

	// Shrink to 4 with one CQE outstanding: the producer at 23, the
	// new ring's sixth lap (owner bit 1).
	setConsumer(db, 21)
	ring4, _ := cqMemory(t, 4, 64)
	cqe, en = resizeCQCmd(k, a, fd, h, 3, mlx5ResizeReq(addrOf(ring4), 64))
	require.Zero(t, en)
	require.Equal(t, uint32(3), cqe)
	op, _ = cqeAt(ring32, 22)
	require.Equal(t, prm.OpOwn(prm.CQEResizeCQ, prm.CQEFormatNone, false, 0), op)
	injectReq(t, k, cqn, 21)
	op, n = cqeAt(ring4, 23&3)
	require.Equal(t, prm.OpOwn(prm.CQEReq, prm.CQEFormatNone, false, 1), op)
	require.Equal(t, uint16(21), n)
	injectReq(t, k, cqn, 22)
	op, n = cqeAt(ring4, 24&3)
	require.Equal(t, prm.OpOwn(prm.CQEReq, prm.CQEFormatNone, false, 0), op, "the next lap of the 4-entry ring")
	require.Equal(t, uint16(22), n)

	// 4 CQEs outstanding (21 to 24) in the ring of 4: full.
	ring8, _ := cqMemory(t, 8, 64)
	_, en = resizeCQCmd(k, a, fd, h, 1, mlx5ResizeReq(addrOf(ring8), 64))
	require.Equal(t, unix.EINVAL, en, "2 entries cannot hold 4 outstanding CQEs")
	_, en = resizeCQCmd(k, a, fd, h, 7, mlx5ResizeReq(addrOf(ring8), 64))
	require.Equal(t, unix.EINVAL, en, "no room in the full ring for the resize CQE")
	setConsumer(db, 22)
	_, en = resizeCQCmd(k, a, fd, h, 1, mlx5ResizeReq(addrOf(ring8), 64))
	require.Equal(t, unix.EINVAL, en, "3 unconsumed and the resize CQE do not fit 2 entries")
	cqe, en = resizeCQCmd(k, a, fd, h, 7, mlx5ResizeReq(addrOf(ring8), 64))
	require.Zero(t, en, "3 outstanding and the resize CQE in 8")
	require.Equal(t, uint32(7), cqe)
	info, _ = simadopt.LookupCQ(k.fabric, cqn)
	require.Equal(t, uint32(8), info.Count)

	// The overrun is the new ring's: 3 outstanding, the resize CQE, and
	// 4 more fill the 8 entries; the next one overruns.
	for i := range 4 {
		injectReq(t, k, cqn, uint16(23+i))
	}
	var img [prm.CQE64Size]byte
	require.Error(t, k.fabric.InjectCQE(cqn, img), "the ninth entry of 8 overruns")
	require.Error(t, k.fabric.CQError(cqn), "the CQ is in error")
	ring64, _ := cqMemory(t, 64, 64)
	setConsumer(db, 30)
	_, en = resizeCQCmd(k, a, fd, h, 63, mlx5ResizeReq(addrOf(ring64), 64))
	require.Equal(t, unix.EINVAL, en, "a CQ in error takes no resize CQE")
	_, _, en = destroyCQCmd(k, a, fd, h)
	require.Zero(t, en)
}

// TestKernelResizeCQRefusals sends RESIZE_CQ requests mlx5_ib refuses,
// each with its errno, and requires the CQ unchanged after them; a
// request for the size the CQ has succeeds without reading the driver
// data, as mlx5_ib_resize_cq returns before it.
func TestKernelResizeCQRefusals(t *testing.T) {
	k, a, fd := objectKernel(t)
	ring, db := cqMemory(t, 16, 64)
	h, _, cqn, en := createCQCmd(k, a, fd, 15, 0, -1, mlx5CQReq(addrOf(ring), addrOf(db), 64), 8)
	require.Zero(t, en)
	newRing, _ := cqMemory(t, 64, 128)
	addr := addrOf(newRing)
	good := func() []byte { return mlx5ResizeReq(addr, 64) }
	with := func(off int, v ...byte) []byte { b := good(); copy(b[off:], v); return b }
	limit := uint32(cqLimit(k.devs[0].Attr.MaxCQE))
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)

	for name, c := range map[string]struct {
		handle, cqe uint32
		vendor      []byte
		want        syscall.Errno
	}{
		"unknown handle":               {0xbeef, 63, good(), unix.EINVAL},
		"a PD handle":                  {pd, 63, good(), unix.EINVAL},
		"no entries":                   {h, 0, good(), unix.EINVAL},
		"negative entries":             {h, 0xffffffff, good(), unix.EINVAL},
		"entries above the limit":      {h, limit + 1, good(), unix.EINVAL},
		"rounding above the limit":     {h, limit, good(), unix.EINVAL},
		"no driver data":               {h, 63, nil, unix.EINVAL},
		"driver data cut short":        {h, 63, good()[:8], unix.EINVAL},
		"reserved0":                    {h, 63, with(10, 1), unix.EINVAL},
		"reserved1":                    {h, 63, with(12, 1), unix.EINVAL},
		"CQE size 0":                   {h, 63, mlx5ResizeReq(addr, 0), unix.EINVAL},
		"CQE size 128 on a 64-byte CQ": {h, 63, mlx5ResizeReq(addr, 128), unix.EINVAL},
		"CQE size 32":                  {h, 63, mlx5ResizeReq(addr, 32), unix.EINVAL},
		"ring not mapped":              {h, 63, mlx5ResizeReq(4096, 64), unix.EFAULT},
		"ring past the guard page":     {h, 63, mlx5ResizeReq(a.guard-2048, 64), unix.EFAULT},
		"ring misaligned":              {h, 63, mlx5ResizeReq(addr+8, 64), unix.EINVAL},
	} {
		_, en := resizeCQCmd(k, a, fd, c.handle, c.cqe, c.vendor)
		require.Equal(t, c.want, en, name)
	}
	info, ok := simadopt.LookupCQ(k.fabric, cqn)
	require.True(t, ok)
	require.Equal(t, unsafe.Pointer(&ring[0]), info.Ring, "refusals leave the ring")
	require.Equal(t, uint32(16), info.Count)

	// The CQ's own size (cqe 8 to 15 round up to 16): success, nothing
	// read or changed.
	for _, n := range []uint32{8, 15} {
		cqe, en := resizeCQCmd(k, a, fd, h, n, nil)
		require.Zero(t, en, "cqe %d", n)
		require.Equal(t, uint32(15), cqe)
	}
	injectReq(t, k, cqn, 0)
	op, _ := cqeAt(ring, 0)
	require.Equal(t, prm.OpOwn(prm.CQEReq, prm.CQEFormatNone, false, 0), op, "no resize CQE written")
	require.Equal(t, 2, k.calls["write RESIZE_CQ"])
}
