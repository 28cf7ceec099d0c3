//go:build cgo && linux

package emulate

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// D1: a legacy write command without driver data (UAPI_DEF_WRITE_I/_IO)
// hands the whole input to uverbs_request, which refuses non-zero bytes
// beyond the kernel's struct with EOPNOTSUPP (uverbs_cmd.c uverbs_request).
func TestWriteCommandTrailingBytesWithoutDriverData(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)

	core := make([]byte, 8) // pd_handle, then 4 bytes the kernel does not know
	ne.PutUint32(core, pd)
	core[4] = 1
	buf, n := a.writeCmd(cmdDeallocPD, core, 0)
	_, en = k.write(fd, buf, n)
	require.Equal(t, unix.EOPNOTSUPP, en, "DEALLOC_PD with non-zero trailing bytes")
	require.Contains(t, k.files[fd].uctx.objects, pd, "and the PD is not destroyed")

	core[4] = 0
	buf, n = a.writeCmd(cmdDeallocPD, core, 0)
	_, en = k.write(fd, buf, n)
	require.Zero(t, en, "trailing zeros are accepted")
}

// D2: ib_uverbs_modify_qp refuses mask bits beyond
// IB_QP_ATTR_STANDARD_BITS with EOPNOTSUPP, before it looks the QP up.
func TestModifyQPMaskBeyondStandardBits(t *testing.T) {
	k, a, fd := objectKernel(t)
	require.Equal(t, unix.EOPNOTSUPP, modifyQPCmd(k, a, fd, modifyQP{h: 0xbeef, mask: 1 | 1<<21, state: 1}),
		"IB_QP_ATTR_STANDARD_BITS exceeded")
	require.Equal(t, unix.EOPNOTSUPP, modifyQPCmd(k, a, fd, modifyQP{h: 0xbeef, mask: 1 | 1<<25, state: 1}),
		"IB_QP_RATE_LIMIT is only for EX_MODIFY_QP")
}

// D3: a completion channel or async event descriptor is an fd uobject of
// the uverbs file that created it; lookup_get_fd_uobject (rdma_core.c)
// answers EBADF when uobject->ufile is another file.
func TestCQNamesEventFileOfAnotherContext(t *testing.T) {
	k, a, fd := objectKernel(t)
	other := openNode(t, k, 0)
	en, _, _ := getContext(k, a, other, ucontextReq(4, 0, 0))
	require.Zero(t, en)

	ch, en := createCompChannelCmd(k, a, fd)
	require.Zero(t, en)
	ring, db := cqMemory(t, 64, 64)
	_, _, _, en = createCQCmd(k, a, other, 63, 0, int32(ch), mlx5CQReq(addrOf(ring), addrOf(db), 64), 8)
	require.Equal(t, unix.EBADF, en, "write CREATE_CQ with the other context's completion channel")

	en, _, _, _ = ioctlCreateCQ(k, a, other, 63, mlx5CQReq(addrOf(ring), addrOf(db), 64),
		testAttr{id: attrCreateCQChannel, flags: attrFlagMandatory, data: uint64(ch)})
	require.Equal(t, unix.EBADF, en, "CQ_CREATE with the other context's completion channel")

	evfd := allocAsyncFD(t, k, a, fd)
	en, _, _, _ = ioctlCreateCQ(k, a, other, 63, mlx5CQReq(addrOf(ring), addrOf(db), 64),
		testAttr{id: attrCreateCQEventFD, flags: attrFlagMandatory, data: uint64(evfd)})
	require.Equal(t, unix.EBADF, en, "CQ_CREATE with the other context's async event descriptor")
	require.Empty(t, k.files[other].uctx.objects, "no CQ made")
}

// D4: verify_hdr (uverbs_main.c) answers ENOSPC for an extended command
// whose core input is shorter than req_size or whose core output is
// shorter than resp_size (offsetofend(..., response_length)).
func TestExtendedCommandShortCore(t *testing.T) {
	k, a, fd := objectKernel(t)
	_, exAddr := a.alloc(queryDevExRespSize)
	exQuery := func(core []byte, outWords int) syscall.Errno {
		buf, n, _ := a.writeExCmd(exCmdQueryDevice, core, nil, exAddr, outWords, 0)
		_, en := k.write(fd, buf, n)
		return en
	}
	require.Equal(t, unix.ENOSPC, exQuery(nil, queryDevExRespSize/8), "no core request (req_size 8)")
	require.Equal(t, unix.ENOSPC, exQuery(make([]byte, 8), 1), "8 bytes of core response (resp_size 184)")
	require.Zero(t, exQuery(make([]byte, 8), queryDevExRespSize/8))
}

// D5: the write and ioctl destroys look the handle up in the file's
// (empty) handle table without needing a context: ENOENT
// (rdma_core.c lookup_get_idr_uobject; ib_uverbs_write does not check
// for a context).
func TestDestroyBeforeContext(t *testing.T) {
	k := testKernel(t, ctx.LinkLayerInfiniBand)
	a := newArena(t)
	fd := openNode(t, k, 0)
	require.Equal(t, unix.ENOENT, handleCmd(k, a, fd, cmdDeallocPD, 0), "DEALLOC_PD")
	hdr, _ := a.ioctlCmd(objectPD, methodPDDestroy, handleAttr(attrDestroyPDHandle, 0))
	require.Equal(t, unix.ENOENT, k.ioctl(fd, rdmaVerbsIoctl, hdr), "PD_DESTROY")
}

// TestWriteResponseTailZeroed: a write command without driver data owns
// the whole response buffer its header names; what its response does not
// fill is zeroed, as uverbs_response does, not left as it was.
func TestWriteResponseTailZeroed(t *testing.T) {
	k, a, fd := objectKernel(t)
	const extra = 16
	resp, respAddr := a.alloc(queryPortRespSize + extra)
	for i := range resp {
		resp[i] = 0xff
	}
	buf, n := a.writeCmd(cmdQueryPort, respCore(respAddr, 1, 0, 0, 0, 0, 0, 0, 0), (queryPortRespSize+extra)/4)
	_, en := k.write(fd, buf, n)
	require.Zero(t, en)
	require.Equal(t, make([]byte, extra), resp[queryPortRespSize:], "the response buffer past the response")
}

// TestCQDescriptorAttributeNotAnInt: CQ_CREATE's descriptor attributes
// (completion channel, async event descriptor) hold an int: a value that
// is not one is EINVAL, one that names no descriptor EBADF, as
// lookup_get_fd_uobject answers.
func TestCQDescriptorAttributeNotAnInt(t *testing.T) {
	k, a, fd := objectKernel(t)
	ch, en := createCompChannelCmd(k, a, fd)
	require.Zero(t, en)
	ring, db := cqMemory(t, 64, 64)
	for _, id := range []uint16{attrCreateCQChannel, attrCreateCQEventFD} {
		en, _, _, _ = ioctlCreateCQ(k, a, fd, 63, mlx5CQReq(addrOf(ring), addrOf(db), 64),
			testAttr{id: id, flags: attrFlagMandatory, data: 1<<32 | uint64(ch)})
		require.Equal(t, unix.EINVAL, en, "attribute %d: a descriptor wider than an int", id)
		en, _, _, _ = ioctlCreateCQ(k, a, fd, 63, mlx5CQReq(addrOf(ring), addrOf(db), 64),
			testAttr{id: id, flags: attrFlagMandatory, data: 1<<31 - 1})
		require.Equal(t, unix.EBADF, en, "attribute %d: no such descriptor", id)
	}
	require.Len(t, k.files[fd].uctx.objects, 0, "no CQ made")
}

// TestWriteTrailingBytesQueryDeviceCompChannel: QUERY_DEVICE and
// CREATE_COMP_CHANNEL have no driver data (UAPI_DEF_WRITE_IO); their
// handlers read the request with uverbs_request, which refuses non-zero
// bytes beyond the struct with EOPNOTSUPP.
func TestWriteTrailingBytesQueryDeviceCompChannel(t *testing.T) {
	k, a, fd := objectKernel(t)
	_, devAddr := a.alloc(queryDevRespSize)
	core := respCore(devAddr, 0, 0, 0, 1, 0, 0, 0, 0)
	buf, n := a.writeCmd(cmdQueryDevice, core, queryDevRespSize/4)
	_, en := k.write(fd, buf, n)
	require.Equal(t, unix.EOPNOTSUPP, en, "QUERY_DEVICE with non-zero trailing bytes")
	core[11] = 0
	buf, n = a.writeCmd(cmdQueryDevice, core, queryDevRespSize/4)
	_, en = k.write(fd, buf, n)
	require.Zero(t, en, "trailing zeros are accepted")

	events := len(k.events)
	_, chAddr := a.alloc(8)
	buf, n = a.writeCmd(cmdCreateCompChannel, respCore(chAddr, 1, 0, 0, 0, 0, 0, 0, 0), 1)
	_, en = k.write(fd, buf, n)
	require.Equal(t, unix.EOPNOTSUPP, en, "CREATE_COMP_CHANNEL with non-zero trailing bytes")
	require.Len(t, k.events, events, "no channel made")
}
