//go:build cgo && linux

package emulate

import (
	"encoding/binary"
	"math/rand"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/sim"
)

var ne = binary.NativeEndian

// arena is memory for the commands a test sends: mmap'd (it never moves),
// with an inaccessible guard page right after it, whose address stands
// for memory the caller does not have.
type arena struct {
	mem   []byte
	base  uintptr
	guard uintptr
	next  int
}

const arenaSize = 1 << 16

func newArena(t testing.TB) *arena {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, arenaSize+4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	require.NoError(t, unix.Mprotect(mem[arenaSize:], unix.PROT_NONE))
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	a := &arena{mem: mem[:arenaSize]}
	a.base = addrOf(a.mem)
	a.guard = a.base + arenaSize
	return a
}

// alloc returns n zeroed bytes of the arena (8-byte aligned) and their
// address.
func (a *arena) alloc(n int) ([]byte, uintptr) {
	a.next = (a.next + 7) &^ 7
	if a.next+n > arenaSize {
		a.next = 0
	}
	b := a.mem[a.next : a.next+n]
	clear(b)
	addr := a.base + uintptr(a.next)
	a.next += n
	return b, addr
}

// put copies b into the arena.
func (a *arena) put(b []byte) uintptr {
	dst, addr := a.alloc(len(b))
	copy(dst, b)
	return addr
}

// testAttr is an ioctl attribute as the caller lays it out.
type testAttr struct {
	id, length, flags, attrData uint16
	data                        uint64
}

func inline(id uint16, v uint64) testAttr {
	return testAttr{id: id, length: 8, flags: attrFlagMandatory, data: v}
}

func out(id uint16, addr uintptr, n int) testAttr {
	return testAttr{id: id, length: uint16(n), flags: attrFlagMandatory, data: uint64(addr)}
}

// ioctlCmd lays out an ioctl header and its attributes in the arena and
// returns the header's address and the attributes' bytes (to read what
// the kernel wrote back).
func (a *arena) ioctlCmd(object, method uint16, attrs ...testAttr) (uintptr, []byte) {
	n := ioctlHdrSize + len(attrs)*attrSize
	b, addr := a.alloc(n)
	ne.PutUint16(b[ioctlOffLength:], uint16(n))
	ne.PutUint16(b[ioctlOffObject:], object)
	ne.PutUint16(b[ioctlOffMethod:], method)
	ne.PutUint16(b[ioctlOffNumAttrs:], uint16(len(attrs)))
	ne.PutUint32(b[ioctlOffDriverID:], driverMLX5)
	for i, at := range attrs {
		r := b[ioctlHdrSize+i*attrSize:]
		ne.PutUint16(r[attrOffID:], at.id)
		ne.PutUint16(r[attrOffLen:], at.length)
		ne.PutUint16(r[attrOffFlags:], at.flags)
		ne.PutUint16(r[attrOffAttrData:], at.attrData)
		ne.PutUint64(r[attrOffData:], at.data)
	}
	return addr, b[ioctlHdrSize:]
}

func attrFlags(attrs []byte, i int) uint16 { return ne.Uint16(attrs[i*attrSize+attrOffFlags:]) }
func attrData(attrs []byte, i int) uint64  { return ne.Uint64(attrs[i*attrSize+attrOffData:]) }

// testKernel is a kernel of its own over a manual Fabric, not the
// process's: its descriptors are not known to the interposer.
func testKernel(t testing.TB, ll ctx.LinkLayer) *kernel {
	t.Helper()
	return testKernelWith(t, sim.Options{LinkLayer: ll})
}

// testKernelWith is testKernel over a Fabric with the options given.
func testKernelWith(t testing.TB, opts sim.Options) *kernel {
	t.Helper()
	f := sim.New(opts)
	devs, err := describeFabric(f)
	require.NoError(t, err)
	cdev, err := charDevNumber(backingDevice)
	require.NoError(t, err)
	k := newKernel(f, devs, backingDevice, cdev)
	t.Cleanup(func() {
		k.mu.Lock()
		var fds []int
		for fd := range k.files {
			fds = append(fds, fd)
		}
		for fd := range k.events {
			fds = append(fds, fd)
		}
		k.mu.Unlock()
		for _, fd := range fds {
			_ = k.close(fd)
		}
		_ = f.Close()
	})
	return k
}

func openNode(t testing.TB, k *kernel, n int) int {
	t.Helper()
	fd, en := k.open("/dev/infiniband/uverbs"+itoa(n), unix.O_RDWR|unix.O_CLOEXEC)
	require.Zero(t, en)
	return fd
}

func itoa(n int) string { return string(rune('0' + n)) }

// ucontextReq is a mlx5_ib_alloc_ucontext_req_v2 as libmlx5 sends it.
func ucontextReq(total, lowLat uint32, flags uint32) []byte {
	b := make([]byte, ucontextReqV2Size)
	ne.PutUint32(b[0:], total)
	ne.PutUint32(b[4:], lowLat)
	ne.PutUint32(b[8:], flags)
	b[16] = 1               // max_cqe_version
	ne.PutUint64(b[24:], 3) // lib_caps: 4K UAR, dynamic UAR
	return b
}

// getContext runs GET_CONTEXT through the ioctl method with the given
// driver request and returns the errno and the driver response.
func getContext(k *kernel, a *arena, fd int, req []byte) (syscall.Errno, []byte, []byte) {
	resp, respAddr := a.alloc(ucontextRespSize)
	_, ncAddr := a.alloc(4)
	hdr, attrs := a.ioctlCmd(objectDevice, methodGetContext,
		out(attrNumCompVectors, ncAddr, 4),
		testAttr{id: attrUHWIn, length: uint16(len(req)), flags: attrFlagMandatory, data: uint64(a.put(req))},
		out(attrUHWOut, respAddr, ucontextRespSize))
	return k.ioctl(fd, rdmaVerbsIoctl, hdr), resp, attrs
}

func TestKernelOpensOnlyItsNodes(t *testing.T) {
	k := testKernel(t, ctx.LinkLayerInfiniBand)
	for _, p := range []string{"/dev/infiniband/uverbs9", "/dev/infiniband/uverbs", "/dev/infiniband/uverbs01",
		"/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0x", "/dev/null"} {
		_, en := k.open(p, unix.O_RDWR)
		require.Equal(t, unix.ENOENT, en, p)
		_, en = k.lookup(p)
		require.Equal(t, unix.ENOENT, en, p)
	}
	_, en := k.open("/dev/infiniband/uverbs0", unix.O_RDWR|unix.O_DIRECTORY)
	require.Equal(t, unix.ENOTDIR, en)
	backing, en := k.lookup("/dev/infiniband/uverbs1")
	require.Zero(t, en)
	require.Equal(t, backingDevice, backing)

	fd := openNode(t, k, 0)
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(fd, &st))
	require.Equal(t, uint32(unix.S_IFCHR), st.Mode&unix.S_IFMT)
	require.Equal(t, k.cdev, devNumber{unix.Major(st.Rdev), unix.Minor(st.Rdev)}, "fstat agrees with sysfs dev")
	require.Zero(t, k.close(fd))
	require.Equal(t, unix.EBADF, k.close(fd), "closed twice")
}

// TestKernelRdmaCMNotice: opening librdmacm's node is refused with ENOENT,
// as on a host without rdma_ucm, and the emulation says once, on its
// notices (standard error), that rdma_cm is not emulated; other absent
// nodes are refused without a word.
func TestKernelRdmaCMNotice(t *testing.T) {
	k := testKernel(t, ctx.LinkLayerInfiniBand)
	var notices strings.Builder
	k.notices = &notices
	_, en := k.open("/dev/infiniband/uverbs9", unix.O_RDWR)
	require.Equal(t, unix.ENOENT, en)
	require.Empty(t, notices.String())
	for range 2 {
		_, en := k.open("/dev/infiniband/rdma_cm", unix.O_RDWR|unix.O_CLOEXEC)
		require.Equal(t, unix.ENOENT, en)
	}
	require.Equal(t, "mlx5kit emulate: /dev/infiniband/rdma_cm: rdma_cm (librdmacm) is not emulated; use the program's TCP exchange (perftest without -R)\n", notices.String())
}

func TestKernelGetContext(t *testing.T) {
	k := testKernel(t, ctx.LinkLayerInfiniBand)
	a := newArena(t)
	fd := openNode(t, k, 0)
	attr := k.devs[0].Attr

	// Refused requests leave no context behind.
	for _, c := range []struct {
		name string
		req  []byte
		want syscall.Errno
	}{
		{"DEVX on a device without it", ucontextReq(16, 4, uctxDEVX), unix.EINVAL},
		{"unknown flag", ucontextReq(16, 4, 2), unix.EOPNOTSUPP},
		{"request between v0 and v2", ucontextReq(16, 4, 0)[:12], unix.EINVAL},
		{"no bfregs", ucontextReq(0, 0, 0), unix.EINVAL},
		{"every bfreg low-latency", ucontextReq(16, 16, 0), unix.EINVAL},
		{"more bfregs than the device has", ucontextReq(2048, 4, 0), unix.ENOMEM},
		{"reserved field set", func() []byte { b := ucontextReq(16, 4, 0); b[17] = 1; return b }(), unix.EOPNOTSUPP},
	} {
		en, _, _ := getContext(k, a, fd, c.req)
		require.Equal(t, c.want, en, c.name)
		require.Nil(t, k.files[fd].uctx, c.name)
	}

	en, resp, attrs := getContext(k, a, fd, ucontextReq(15, 4, 0))
	require.Zero(t, en)
	require.NotNil(t, k.files[fd].uctx)
	require.Equal(t, uint16(attrFlagMandatory|attrFlagValidOut), attrFlags(attrs, 0), "NUM_COMP_VECTORS written")
	require.Equal(t, uint16(attrFlagMandatory|attrFlagValidOut), attrFlags(attrs, 2), "UHW_OUT written")
	r := ucontextRespField(resp)
	require.Equal(t, uint64(16), r["tot_bfregs"], "rounded up to whole UAR pages")
	require.Equal(t, uint64(2*attr.BlueFlameSize), r["bf_reg_size"])
	require.Equal(t, uint64(attr.MaxSendWQESize), r["max_sq_desc_sz"])
	require.Equal(t, uint64(attr.MaxSGE*16), r["max_rq_desc_sz"])
	require.Equal(t, uint64(attr.MaxQPWR), r["max_send_wqebb"])
	require.Equal(t, uint64(attr.MaxQPWR), r["max_recv_wr"])
	require.Equal(t, uint64(attr.MaxSRQWR+1), r["max_srq_recv_wr"])
	require.Equal(t, uint64(attr.MaxQP), r["qp_tab_size"])
	require.Equal(t, uint64(1), r["num_ports"])
	require.Equal(t, uint64(0), r["cqe_version"])
	require.Equal(t, uint64(3), r["cmds_supp_uhw"], "QUERY_DEVICE and CREATE_AH carry driver data")
	require.Equal(t, uint64(0), r["comp_mask"], "no core clock, dump-fill key, ECE, real-time timestamps")
	require.Equal(t, uint64(1), r["clock_info_versions"], "the clock info page, version 1")
	require.Equal(t, uint64(ucontextRespSize), r["response_length"])
	require.Equal(t, uint64(1), r["num_uars_per_page"])
	require.Equal(t, uint64(1024), r["num_dyn_bfregs"])
	require.Equal(t, uint64(0), r["eth_min_inline"], "InfiniBand")

	en, _, _ = getContext(k, a, fd, ucontextReq(16, 4, 0))
	require.Equal(t, unix.EINVAL, en, "a second context on one descriptor")

	// An Ethernet device has no minimum inline headers.
	ke := testKernel(t, ctx.LinkLayerEthernet)
	fde := openNode(t, ke, 0)
	en, resp, _ = getContext(ke, a, fde, ucontextReq(16, 4, 0))
	require.Zero(t, en)
	require.Equal(t, uint64(1), ucontextRespField(resp)["eth_min_inline"], "MLX5_USER_INLINE_MODE_NONE")
}

// TestKernelQueryPortSpeed: the 8-bit active_speed of QUERY_PORT holds
// speeds up to NDR (128); the kernel answers NDR there for a faster port
// (copy_port_attr_to_resp) and the speed itself, XDR (256), in the QUERY_PORT
// method's active_speed_ex (UVERBS_METHOD_QUERY_PORT). A port up to NDR
// answers its speed in both.
func TestKernelQueryPortSpeed(t *testing.T) {
	for _, c := range []struct{ speed, legacy uint32 }{{32, 32}, {128, 128}, {256, 128}} {
		k := testKernel(t, ctx.LinkLayerInfiniBand)
		k.devs[0].Ports[0].ActiveSpeed = c.speed
		a := newArena(t)
		fd := openNode(t, k, 0)
		en, _, _ := getContext(k, a, fd, ucontextReq(16, 4, 0))
		require.Zero(t, en)

		resp, respAddr := a.alloc(queryPortExSize)
		hdr, _ := a.ioctlCmd(objectDevice, methodQueryPort, inline(attrQueryPortNum, 1), out(attrQueryPortResp, respAddr, queryPortExSize))
		require.Zero(t, k.ioctl(fd, rdmaVerbsIoctl, hdr))
		require.Equal(t, uint8(c.legacy), resp[queryPortOffSpeed], "speed %d: active_speed", c.speed)
		require.Equal(t, c.speed, ne.Uint32(resp[activeSpeedExOffset:]), "speed %d: active_speed_ex", c.speed)

		buf, n := a.writeCmd(cmdQueryPort, respCore(respAddr, 1, 0, 0, 0, 0, 0, 0, 0), queryPortRespSize/4)
		_, en = k.write(fd, buf, n)
		require.Zero(t, en)
		require.Equal(t, uint8(c.legacy), resp[queryPortOffSpeed], "speed %d: the write command's active_speed", c.speed)
	}
	require.Equal(t, "800 Gb/sec (4X XDR)", rateString(256, 2), "sysfs rate of a 4X XDR port")
}

func TestKernelRefusesMalformedIoctls(t *testing.T) {
	k := testKernel(t, ctx.LinkLayerInfiniBand)
	a := newArena(t)
	fd := openNode(t, k, 0)
	respBuf, respAddr := a.alloc(256)

	require.Equal(t, unix.ENOTTY, k.ioctl(fd, 0x5401, a.base), "not RDMA_VERBS_IOCTL")
	require.Equal(t, unix.EFAULT, k.ioctl(fd, rdmaVerbsIoctl, a.guard), "header where nothing is mapped")
	require.Equal(t, unix.EFAULT, k.ioctl(fd, rdmaVerbsIoctl, 0), "NULL header")
	require.Equal(t, unix.EBADF, k.ioctl(fd+1000, rdmaVerbsIoctl, a.base), "not a descriptor of the kernel")

	port := func() (uintptr, []byte) {
		return a.ioctlCmd(objectDevice, methodQueryPort, inline(attrQueryPortNum, 1), out(attrQueryPortResp, respAddr, queryPortExSize))
	}
	hdr, _ := port()
	require.Equal(t, unix.EINVAL, k.ioctl(fd, rdmaVerbsIoctl, hdr), "QUERY_PORT without a context")
	en, _, _ := getContext(k, a, fd, ucontextReq(16, 4, 0))
	require.Zero(t, en)
	hdr, _ = port()
	require.Zero(t, k.ioctl(fd, rdmaVerbsIoctl, hdr), "the well-formed command the cases below break")
	legacy, _ := queryPortResp(&k.devs[0], 1)
	require.Equal(t, bytesOf(&legacy), respBuf[:queryPortRespSize])
	require.Equal(t, uint32(legacy.active_speed), ne.Uint32(respBuf[activeSpeedExOffset:]),
		"active_speed_ex, which the method answers since the XDR speed")

	mutate := func(name string, want syscall.Errno, edit func(h []byte)) {
		t.Helper()
		hdr, _ := port()
		h := a.mem[hdr-a.base : hdr-a.base+ioctlHdrSize+2*attrSize]
		edit(h)
		require.Equal(t, want, k.ioctl(fd, rdmaVerbsIoctl, hdr), name)
	}
	mutate("length one short", unix.EINVAL, func(h []byte) { ne.PutUint16(h[ioctlOffLength:], ioctlHdrSize+2*attrSize-1) })
	mutate("more attributes than the length", unix.EINVAL, func(h []byte) { ne.PutUint16(h[ioctlOffNumAttrs:], 3) })
	mutate("longer than a page", unix.EINVAL, func(h []byte) {
		ne.PutUint16(h[ioctlOffNumAttrs:], 300)
		ne.PutUint16(h[ioctlOffLength:], ioctlHdrSize+300*attrSize)
	})
	mutate("reserved1 set", unix.EPROTONOSUPPORT, func(h []byte) { h[ioctlOffReserved1] = 1 })
	mutate("reserved2 set", unix.EPROTONOSUPPORT, func(h []byte) { h[ioctlOffReserved2] = 1 })
	mutate("another driver", unix.EINVAL, func(h []byte) { ne.PutUint32(h[ioctlOffDriverID:], driverMLX5+1) })
	mutate("unknown method", unix.EPROTONOSUPPORT, func(h []byte) { ne.PutUint16(h[ioctlOffMethod:], 99) })
	mutate("INVOKE_WRITE, which the model does not do", unix.EPROTONOSUPPORT, func(h []byte) { ne.PutUint16(h[ioctlOffMethod:], methodInvokeWrite) })
	mutate("another object", unix.EPROTONOSUPPORT, func(h []byte) { ne.PutUint16(h[ioctlOffObject:], objectPD) })
	at := func(i, off int) int { return ioctlHdrSize + i*attrSize + off }
	mutate("unknown mandatory attribute", unix.EPROTONOSUPPORT, func(h []byte) { ne.PutUint16(h[at(0, attrOffID):], 77) })
	mutate("duplicate attribute", unix.EINVAL, func(h []byte) { ne.PutUint16(h[at(1, attrOffID):], attrQueryPortNum) })
	mutate("constant of 4 bytes", unix.EINVAL, func(h []byte) { ne.PutUint16(h[at(0, attrOffLen):], 4) })
	mutate("reserved attribute data", unix.EINVAL, func(h []byte) { ne.PutUint16(h[at(0, attrOffAttrData):], 1) })
	mutate("response one byte short", unix.EINVAL, func(h []byte) { ne.PutUint16(h[at(1, attrOffLen):], queryPortExSize-1) })
	mutate("response one byte long (UVERBS_ATTR_STRUCT: zero-filled)", 0, func(h []byte) { ne.PutUint16(h[at(1, attrOffLen):], queryPortExSize+1) })
	mutate("response where nothing is mapped", unix.EFAULT, func(h []byte) { ne.PutUint64(h[at(1, attrOffData):], uint64(a.guard)) })
	mutate("missing mandatory response", unix.EINVAL, func(h []byte) {
		ne.PutUint16(h[at(1, attrOffID):], 77)
		ne.PutUint16(h[at(1, attrOffFlags):], 0)
	})
	mutate("port 0", unix.EINVAL, func(h []byte) { ne.PutUint64(h[at(0, attrOffData):], 0) })
	mutate("port 2", unix.EINVAL, func(h []byte) { ne.PutUint64(h[at(0, attrOffData):], 2) })
	mutate("port 257 (not a u8)", unix.EINVAL, func(h []byte) { ne.PutUint64(h[at(0, attrOffData):], 257) })
	hdr, _ = a.ioctlCmd(objectDevice, methodQueryPort, inline(attrQueryPortNum, 1),
		out(attrQueryPortResp, respAddr, queryPortExSize), testAttr{id: 77, length: 8})
	require.Zero(t, k.ioctl(fd, rdmaVerbsIoctl, hdr), "an unknown attribute not flagged mandatory is ignored")

	// Attributes that run into unmapped memory.
	n := 2
	hdrAddr := a.guard - ioctlHdrSize - attrSize // room for the header and one attribute
	h := a.mem[hdrAddr-a.base:]
	clear(h)
	ne.PutUint16(h[ioctlOffLength:], uint16(ioctlHdrSize+n*attrSize))
	ne.PutUint16(h[ioctlOffMethod:], methodQueryPort)
	ne.PutUint16(h[ioctlOffNumAttrs:], uint16(n))
	ne.PutUint32(h[ioctlOffDriverID:], driverMLX5)
	require.Equal(t, unix.EFAULT, k.ioctl(fd, rdmaVerbsIoctl, hdrAddr), "attribute array past the mapping")

	// GID queries.
	entry, entryAddr := a.alloc(gidEntrySize)
	gid := func(port, index uint64, flags testAttr, n int) syscall.Errno {
		hdr, _ := a.ioctlCmd(objectDevice, methodQueryGIDEntry, inline(attrGIDEntryPort, port),
			inline(attrGIDEntryIndex, index), flags, out(attrGIDEntryResp, entryAddr, n))
		return k.ioctl(fd, rdmaVerbsIoctl, hdr)
	}
	noFlags := testAttr{id: attrGIDEntryFlags, length: 4, flags: attrFlagMandatory}
	require.Zero(t, gid(1, 0, noFlags, gidEntrySize))
	require.Equal(t, k.devs[0].GIDs[0][0].GID[:], entry[:16])
	require.Equal(t, unix.EINVAL, gid(1, 0, testAttr{id: attrGIDEntryFlags, length: 4, flags: attrFlagMandatory, data: 1}, gidEntrySize), "unknown flag")
	require.Equal(t, unix.EINVAL, gid(1, 0, testAttr{id: attrGIDEntryFlags, length: 2, flags: attrFlagMandatory}, gidEntrySize), "flags of 2 bytes")
	require.Equal(t, unix.EINVAL, gid(1, 0, testAttr{id: 55}, gidEntrySize), "flags missing")
	require.Equal(t, unix.EINVAL, gid(1, uint64(k.devs[0].Ports[0].GIDTableLen), noFlags, gidEntrySize), "index past the table")
	require.Equal(t, unix.EINVAL, gid(1, 1<<32, noFlags, gidEntrySize), "index not a u32")
	require.Equal(t, unix.EINVAL, gid(0, 0, noFlags, gidEntrySize), "port 0")
	require.Equal(t, unix.EINVAL, gid(1, 0, noFlags, gidEntrySize-4), "short entry")

	table := func(entrySize uint64, n int) (syscall.Errno, []byte) {
		buf, bufAddr := a.alloc(max(n, 8))
		num, numAddr := a.alloc(8)
		hdr, _ := a.ioctlCmd(objectDevice, methodQueryGIDTable, inline(attrGIDTableEntrySize, entrySize),
			out(attrGIDTableEntries, bufAddr, n), out(attrGIDTableNum, numAddr, 8))
		en := k.ioctl(fd, rdmaVerbsIoctl, hdr)
		if en == 0 {
			require.Equal(t, uint64(len(k.devs[0].GIDs[0])), ne.Uint64(num))
		}
		return en, buf
	}
	en, buf := table(gidEntrySize+8, 4*(gidEntrySize+8))
	require.Zero(t, en, "entries larger than the kernel's are zero-filled")
	require.Equal(t, make([]byte, 8), buf[gidEntrySize:gidEntrySize+8])
	en, _ = table(0, 64)
	require.Equal(t, unix.EINVAL, en, "entry size 0")
	en, _ = table(gidEntrySize, gidEntrySize+1)
	require.Equal(t, unix.EINVAL, en, "buffer not a whole number of entries")
	en, _ = table(gidEntrySize, 0)
	require.Equal(t, unix.EINVAL, en, "no room for an entry")

	// The event descriptor and the ABI without ioctls.
	hdr, attrs := a.ioctlCmd(objectAsync, methodAsyncAlloc, testAttr{id: attrAsyncFD, flags: attrFlagMandatory})
	require.Zero(t, k.ioctl(fd, rdmaVerbsIoctl, hdr))
	evfd := int(int64(attrData(attrs, 0)))
	require.Contains(t, k.events, evfd)
	require.Equal(t, unix.ENOTTY, k.ioctl(evfd, rdmaVerbsIoctl, hdr), "event descriptors take no ioctl")
	n2, en2 := k.write(evfd, a.base, 8)
	require.Equal(t, unix.EBADF, en2, "nor a write, opened read-only (%d)", n2)
	_, en = k.mmap(0, 4096, unix.PROT_READ, unix.MAP_SHARED, evfd, 0)
	require.Equal(t, unix.ENODEV, en, "nor an mmap")
	require.Zero(t, k.close(evfd))
	hdr, _ = a.ioctlCmd(objectAsync, methodAsyncAlloc, testAttr{id: attrAsyncFD, length: 4, flags: attrFlagMandatory})
	require.Equal(t, unix.EINVAL, k.ioctl(fd, rdmaVerbsIoctl, hdr), "descriptor attribute with a length")

	k.noIoctl = true
	hdr, _ = port()
	require.Equal(t, unix.ENOTTY, k.ioctl(fd, rdmaVerbsIoctl, hdr), "a kernel without the ioctl framework")
}

// writeCmd lays out a legacy write command: header, core request (whose
// first field is the response address), driver data.
func (a *arena) writeCmd(command uint32, core []byte, outWords int) (uintptr, int) {
	n := cmdHdrSize + len(core)
	b, addr := a.alloc(n)
	ne.PutUint32(b[0:], command)
	ne.PutUint16(b[4:], uint16(n/4))
	ne.PutUint16(b[6:], uint16(outWords))
	copy(b[cmdHdrSize:], core)
	return addr, n
}

// writeExCmd lays out an extended write command.
func (a *arena) writeExCmd(command uint32, core, driver []byte, resp uintptr, outWords, driverOutWords int) (uintptr, int, []byte) {
	n := cmdHdrSize + exCmdHdrSize + len(core) + len(driver)
	b, addr := a.alloc(n)
	ne.PutUint32(b[0:], cmdFlagExtended|command)
	ne.PutUint16(b[4:], uint16(len(core)/8))
	ne.PutUint16(b[6:], uint16(outWords))
	ne.PutUint64(b[8:], uint64(resp))
	ne.PutUint16(b[16:], uint16(len(driver)/8))
	ne.PutUint16(b[18:], uint16(driverOutWords))
	copy(b[cmdHdrSize+exCmdHdrSize:], core)
	copy(b[cmdHdrSize+exCmdHdrSize+len(core):], driver)
	return addr, n, b
}

func respCore(resp uintptr, rest ...byte) []byte {
	b := make([]byte, 8, 8+len(rest))
	ne.PutUint64(b, uint64(resp))
	return append(b, rest...)
}

func TestKernelWriteCommands(t *testing.T) {
	k := testKernel(t, ctx.LinkLayerEthernet)
	a := newArena(t)
	fd := openNode(t, k, 1)
	dev := &k.devs[1]

	resp, respAddr := a.alloc(512)
	// Before GET_CONTEXT only GET_CONTEXT works.
	buf, n := a.writeCmd(cmdQueryDevice, respCore(respAddr), queryDevRespSize/4)
	_, en := k.write(fd, buf, n)
	require.Equal(t, unix.EINVAL, en, "QUERY_DEVICE without a context")

	getCtx := func(respAt uintptr, driver []byte) (int, syscall.Errno) {
		buf, n := a.writeCmd(cmdGetContext, append(respCore(respAt), driver...), (getContextRespSize+ucontextRespSize)/4)
		return k.write(fd, buf, n)
	}
	_, en = getCtx(a.guard, ucontextReq(16, 4, 0))
	require.Equal(t, unix.EFAULT, en, "response where nothing is mapped")
	require.Nil(t, k.files[fd].uctx, "and no context")
	require.Empty(t, k.events, "nor an event descriptor")
	_, en = getCtx(respAddr, ucontextReq(16, 4, uctxDEVX))
	require.Equal(t, unix.EINVAL, en)
	got, en := getCtx(respAddr, ucontextReq(16, 4, 0))
	require.Zero(t, en)
	require.Equal(t, cmdHdrSize+8+ucontextReqV2Size, got, "write returns the bytes written")
	asyncFD := int(ne.Uint32(resp[0:]))
	require.Contains(t, k.events, asyncFD, "the async event descriptor")
	require.Equal(t, dev.Attr.CompVectors, ne.Uint32(resp[4:]))
	require.Equal(t, uint64(16), ucontextRespField(resp[getContextRespSize:])["tot_bfregs"])
	_, en = getCtx(respAddr, ucontextReq(16, 4, 0))
	require.Equal(t, unix.EINVAL, en, "a second context")

	buf, n = a.writeCmd(cmdQueryDevice, respCore(respAddr), queryDevRespSize/4)
	_, en = k.write(fd, buf, n)
	require.Zero(t, en)
	want := queryDeviceResp(dev)
	require.Equal(t, bytesOf(&want), resp[:queryDevRespSize])

	buf, n = a.writeCmd(cmdQueryPort, respCore(respAddr, 1, 0, 0, 0, 0, 0, 0, 0), queryPortRespSize/4)
	_, en = k.write(fd, buf, n)
	require.Zero(t, en)
	wantPort, _ := queryPortResp(dev, 1)
	require.Equal(t, bytesOf(&wantPort), resp[:queryPortRespSize])
	buf, n = a.writeCmd(cmdQueryPort, respCore(respAddr, 2, 0, 0, 0, 0, 0, 0, 0), queryPortRespSize/4)
	_, en = k.write(fd, buf, n)
	require.Equal(t, unix.EINVAL, en, "port 2")
	buf, n = a.writeCmd(cmdQueryPort, respCore(respAddr, 1, 0, 0, 0, 0, 0, 0, 0), queryPortRespSize/4-1)
	_, en = k.write(fd, buf, n)
	require.Equal(t, unix.ENOSPC, en, "response buffer too short")
	buf, n = a.writeCmd(cmdQueryPort, respCore(respAddr), queryPortRespSize/4)
	_, en = k.write(fd, buf, n)
	require.Equal(t, unix.ENOSPC, en, "request too short")

	// Legacy header checks.
	buf, n = a.writeCmd(cmdQueryDevice, respCore(respAddr), queryDevRespSize/4)
	_, en = k.write(fd, buf, n-4)
	require.Equal(t, unix.EINVAL, en, "in_words disagrees with the length")
	_, en = k.write(fd, buf, 4)
	require.Equal(t, unix.EINVAL, en, "shorter than the header")
	_, en = k.write(fd, a.guard, 16)
	require.Equal(t, unix.EFAULT, en, "header where nothing is mapped")
	buf, n = a.writeCmd(cmdAttachMcast, make([]byte, 24), 0)
	_, en = k.write(fd, buf, n)
	require.Equal(t, unix.EOPNOTSUPP, en, "a command the model does not do")
	buf, n = a.writeCmd(cmdQueryDevice|0x100, respCore(respAddr), queryDevRespSize/4)
	_, en = k.write(fd, buf, n)
	require.Equal(t, unix.EINVAL, en, "bits outside the command")

	// Extended QUERY_DEVICE with mlx5's vendor response.
	exResp, exAddr := a.alloc(queryDevExRespSize + mlx5QueryDevResp)
	exQuery := func(core, driver []byte, resp uintptr, outWords, driverOut int) syscall.Errno {
		buf, n, _ := a.writeExCmd(exCmdQueryDevice, core, driver, resp, outWords, driverOut)
		_, en := k.write(fd, buf, n)
		return en
	}
	require.Zero(t, exQuery(make([]byte, 8), nil, exAddr, queryDevExRespSize/8, (mlx5QueryDevResp+7)/8))
	wantEx := queryDeviceExResp(dev)
	require.Equal(t, bytesOf(&wantEx.base), exResp[:queryDevRespSize])
	require.Equal(t, uint32(queryDevExRespSize), ne.Uint32(exResp[queryDevRespSize+4:]), "response_length")
	vendor := exResp[queryDevExRespSize:]
	require.Equal(t, uint32(mlx5QueryDevRespLen), ne.Uint32(vendor[4:]), "vendor response_length: every field")
	wantVendor := mlx5QueryDeviceResp(dev)
	require.Equal(t, bytesOf(&wantVendor)[8:mlx5QueryDevRespLen], vendor[8:mlx5QueryDevRespLen])
	require.Zero(t, exQuery(make([]byte, 8), nil, exAddr, queryDevExRespSize/8, 2))
	require.Equal(t, uint32(16), ne.Uint32(vendor[4:]), "only the fields that fit: comp_mask, length, tso_caps")

	require.Equal(t, unix.EINVAL, exQuery([]byte{1, 0, 0, 0, 0, 0, 0, 0}, nil, exAddr, queryDevExRespSize/8, 0), "comp_mask")
	require.Equal(t, unix.EINVAL, exQuery([]byte{0, 0, 0, 0, 1, 0, 0, 0}, nil, exAddr, queryDevExRespSize/8, 0), "reserved")
	require.Equal(t, unix.EOPNOTSUPP, exQuery(append(make([]byte, 8), 1, 0, 0, 0, 0, 0, 0, 0), nil, exAddr, queryDevExRespSize/8, 0), "request longer than the kernel's, not zero")
	require.Equal(t, unix.EINVAL, exQuery(make([]byte, 8), []byte{1, 0, 0, 0, 0, 0, 0, 0}, exAddr, queryDevExRespSize/8, 1), "driver input not zero")
	require.Equal(t, unix.EINVAL, exQuery(make([]byte, 8), nil, 0, queryDevExRespSize/8, 0), "outputs without a response address")
	require.Equal(t, unix.EINVAL, exQuery(make([]byte, 8), nil, exAddr, 0, 0), "a response address without outputs")
	require.Equal(t, unix.EFAULT, exQuery(make([]byte, 8), nil, a.guard, queryDevExRespSize/8, 0), "response where nothing is mapped")
	buf, n, raw := a.writeExCmd(exCmdQueryDevice, make([]byte, 8), nil, exAddr, queryDevExRespSize/8, 0)
	ne.PutUint32(raw[20:], 1)
	_, en = k.write(fd, buf, n)
	require.Equal(t, unix.EINVAL, en, "cmd_hdr_reserved")
	_, en = k.write(fd, buf, n-8)
	require.Equal(t, unix.EINVAL, en, "words disagree with the length")
	_, en = k.write(fd, buf, cmdHdrSize+4)
	require.Equal(t, unix.EINVAL, en, "shorter than both headers")
	buf, n, _ = a.writeExCmd(cmdQueryPort, make([]byte, 8), nil, exAddr, 1, 0)
	_, en = k.write(fd, buf, n)
	require.Equal(t, unix.EOPNOTSUPP, en, "no extended QUERY_PORT")

	require.Equal(t, 1, k.callCount("write GET_CONTEXT"))
	require.Equal(t, 2, k.callCount("write EX_QUERY_DEVICE"))
}

func TestKernelMapsUARPages(t *testing.T) {
	k := testKernel(t, ctx.LinkLayerInfiniBand)
	a := newArena(t)
	fd := openNode(t, k, 0)
	page := uintptr(k.pageSize)
	// The page offset of a command and index, the index's high byte in
	// bits 16-23 as libmlx5 lays out extended indexes.
	off := func(cmd, index int) int64 { return int64((index>>8)<<16|cmd<<8|index&0xff) * int64(page) }
	mmap := func(length uintptr, flags int, o int64) (uintptr, syscall.Errno) {
		return k.mmap(0, length, unix.PROT_WRITE, flags, fd, o)
	}
	_, en := mmap(page, unix.MAP_SHARED, 0)
	require.Equal(t, unix.EINVAL, en, "no context yet")
	en, _, _ = getContext(k, a, fd, ucontextReq(16, 4, 0))
	require.Zero(t, en)

	var got []uintptr
	for i := 0; i < 8; i++ {
		p, en := mmap(page, unix.MAP_SHARED, off(mmapRegular, i))
		require.Zero(t, en, "static UAR page %d", i)
		got = append(got, p)
	}
	require.Equal(t, 8, k.mappingCount())
	for _, c := range []struct {
		name   string
		length uintptr
		flags  int
		off    int64
		want   syscall.Errno
	}{
		{"ninth static page", page, unix.MAP_SHARED, off(mmapRegular, 8), unix.EINVAL},
		{"two pages", 2 * page, unix.MAP_SHARED, 0, unix.EINVAL},
		{"private", page, unix.MAP_PRIVATE, 0, unix.EINVAL},
		{"offset not a page", page, unix.MAP_SHARED, 100, unix.EINVAL},
		{"core clock, not modelled", page, unix.MAP_SHARED, off(mmapClock, 0), unix.EINVAL},
		{"contiguous pages", page, unix.MAP_SHARED, off(1, 0), unix.ENOSYS},
		{"dynamic page past the last", page, unix.MAP_SHARED, off(mmapAllocWC, 512), unix.EINVAL},
	} {
		_, en := mmap(c.length, c.flags, c.off)
		require.Equal(t, c.want, en, c.name)
	}
	p, en := mmap(page, unix.MAP_SHARED, off(mmapNC, 3))
	require.Zero(t, en, "a static page again, non-cached")
	got = append(got, p)
	p, en = mmap(page, unix.MAP_SHARED, off(mmapAllocWC, 0))
	require.Zero(t, en, "first dynamic page")
	got = append(got, p)
	_, en = mmap(page, unix.MAP_SHARED, off(mmapAllocWC, 0))
	require.Equal(t, unix.EINVAL, en, "a dynamic page taken")

	// The pages are memory the library can write its doorbells into.
	for _, p := range got {
		require.Zero(t, copyOut(p+0x800, []byte{1, 2, 3, 4}))
	}
	k.munmap(got[0], page)
	require.Equal(t, len(got)-1, k.mappingCount())
	require.NoError(t, rawMunmap(got[0], page))
	require.Zero(t, k.close(fd))
	require.Zero(t, k.mappingCount(), "closing the device forgets its pages")
	for _, p := range got[1:] {
		require.NoError(t, rawMunmap(p, page))
	}
}

// TestKernelRandomCommands sends random ioctl and write commands (seeded;
// addresses only into the arena, into its guard page or inline values) and
// checks that every one gets one of the kernel's errnos or succeeds, that
// nothing panics, and that descriptors stay accounted for.
func TestKernelRandomCommands(t *testing.T) {
	k := testKernel(t, ctx.LinkLayerEthernet)
	a := newArena(t)
	fd := openNode(t, k, 0)
	rng := rand.New(rand.NewSource(7))
	iters := 20000
	if testing.Short() {
		iters = 3000
	}
	for i := 0; i < iters; i++ {
		if i == iters/2 {
			en, _, _ := getContext(k, a, fd, ucontextReq(16, 4, 0))
			require.Zero(t, en)
		}
		raw := make([]byte, rng.Intn(400))
		rng.Read(raw)
		if rng.Intn(2) == 0 {
			runIoctlBytes(t, k, a, fd, raw, rng.Intn(4) != 0)
		} else {
			runWriteBytes(t, k, a, fd, raw, rng.Intn(4) != 0)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for efd := range k.events {
		var st unix.Stat_t
		require.NoError(t, unix.Fstat(efd, &st), "event descriptor %d is open", efd)
	}
}

// allowedErrnos are the answers the kernel gives to commands it refuses.
var allowedErrnos = map[syscall.Errno]bool{
	0: true, unix.EINVAL: true, unix.EFAULT: true, unix.EPROTONOSUPPORT: true, unix.EOPNOTSUPP: true,
	unix.ENOSPC: true, unix.ENODATA: true, unix.ENOTTY: true, unix.ENOMEM: true,
	// Object commands: a handle that names nothing, an object in use, a
	// descriptor that is not a completion channel.
	unix.ENOENT: true, unix.EBUSY: true, unix.EBADF: true,
	// A raw packet QP or a controlled Q_Key without CAP_NET_RAW.
	unix.EPERM: true,
}

// sanitize makes an address field of a random command point into the
// arena, at its guard page, or nowhere.
func (a *arena) sanitize(v uint64) uint64 {
	switch v % 4 {
	case 0:
		return uint64(a.base) + (v>>2)%arenaSize
	case 1:
		return uint64(a.guard) + (v>>2)%4096
	case 2:
		return 0
	}
	return v >> 56 // small: inline data
}

// runIoctlBytes sends raw as an ioctl: a header with a plausible length
// (when fix) and attributes whose data are sanitised.
func runIoctlBytes(t testing.TB, k *kernel, a *arena, fd int, raw []byte, fix bool) {
	hdr := make([]byte, ioctlHdrSize)
	copy(hdr, raw)
	rest := raw[min(len(raw), ioctlHdrSize):]
	nattrs := len(rest) / attrSize
	attrs := make([]byte, nattrs*attrSize)
	copy(attrs, rest)
	for i := 0; i < nattrs; i++ {
		d := attrs[i*attrSize+attrOffData:]
		ne.PutUint64(d, a.sanitize(ne.Uint64(d)))
		if fix {
			// Known attribute ids and objects make the checks past the
			// header reachable.
			id := ne.Uint16(attrs[i*attrSize+attrOffID:])
			ne.PutUint16(attrs[i*attrSize+attrOffID:], id%5|id&attrUHWIn)
		}
	}
	if fix {
		ne.PutUint16(hdr[ioctlOffLength:], uint16(ioctlHdrSize+nattrs*attrSize))
		ne.PutUint16(hdr[ioctlOffNumAttrs:], uint16(nattrs))
		ne.PutUint64(hdr[ioctlOffReserved1:], 0)
		ne.PutUint32(hdr[ioctlOffReserved2:], 0)
		ne.PutUint32(hdr[ioctlOffDriverID:], driverMLX5)
		obj := ne.Uint16(hdr[ioctlOffObject:])
		if obj%2 == 0 {
			ne.PutUint16(hdr[ioctlOffObject:], objectDevice)
		} else {
			ne.PutUint16(hdr[ioctlOffObject:], objectAsync)
		}
		ne.PutUint16(hdr[ioctlOffMethod:], ne.Uint16(hdr[ioctlOffMethod:])%8)
	}
	addr := a.put(append(hdr, attrs...))
	en := k.ioctl(fd, rdmaVerbsIoctl, addr)
	if !allowedErrnos[en] {
		t.Fatalf("ioctl %x: errno %v", append(hdr, attrs...), en)
	}
}

// runWriteBytes sends raw as a write command: a header whose word counts
// agree with the length (when fix) and a sanitised response address.
func runWriteBytes(t testing.TB, k *kernel, a *arena, fd int, raw []byte, fix bool) {
	b := append([]byte(nil), raw...)
	if len(b) >= cmdHdrSize && fix {
		cmd := ne.Uint32(b)
		cmd &= cmdFlagExtended | 0x3f
		ne.PutUint32(b, cmd)
		if cmd&cmdFlagExtended == 0 {
			b = b[:len(b)/4*4]
			ne.PutUint16(b[4:], uint16(len(b)/4))
			if len(b) >= cmdHdrSize+8 {
				ne.PutUint64(b[cmdHdrSize:], a.sanitize(ne.Uint64(b[cmdHdrSize:])))
			}
		} else if len(b) >= cmdHdrSize+exCmdHdrSize {
			b = b[:cmdHdrSize+exCmdHdrSize+(len(b)-cmdHdrSize-exCmdHdrSize)/8*8]
			words := (len(b) - cmdHdrSize - exCmdHdrSize) / 8
			core := int(b[4]) % (words + 1)
			ne.PutUint16(b[4:], uint16(core))
			ne.PutUint16(b[16:], uint16(words-core))
			ne.PutUint64(b[8:], a.sanitize(ne.Uint64(b[8:])))
		}
	}
	addr := a.put(b)
	n, en := k.write(fd, addr, len(b))
	if !allowedErrnos[en] || (en == 0 && n != len(b)) {
		t.Fatalf("write %x: %d, errno %v", b, n, en)
	}
}

func FuzzIoctl(f *testing.F) {
	f.Add([]byte{}, true)
	f.Add(make([]byte, ioctlHdrSize+2*attrSize), true)
	f.Fuzz(func(t *testing.T, raw []byte, fix bool) {
		k := testKernel(t, ctx.LinkLayerEthernet)
		a := newArena(t)
		fd := openNode(t, k, 0)
		if len(raw) > 0 && raw[0]&1 == 1 {
			en, _, _ := getContext(k, a, fd, ucontextReq(16, 4, 0))
			require.Zero(t, en)
		}
		if len(raw) > 4096 {
			raw = raw[:4096]
		}
		runIoctlBytes(t, k, a, fd, raw, fix)
	})
}

func FuzzWrite(f *testing.F) {
	f.Add([]byte{}, true)
	f.Add(make([]byte, cmdHdrSize+16), true)
	f.Fuzz(func(t *testing.T, raw []byte, fix bool) {
		k := testKernel(t, ctx.LinkLayerInfiniBand)
		a := newArena(t)
		fd := openNode(t, k, 0)
		if len(raw) > 0 && raw[0]&1 == 1 {
			en, _, _ := getContext(k, a, fd, ucontextReq(16, 4, 0))
			require.Zero(t, en)
		}
		if len(raw) > 4096 {
			raw = raw[:4096]
		}
		runWriteBytes(t, k, a, fd, raw, fix)
	})
}

// TestMunmapRefusedKeepsMapping: a munmap the kernel refuses (EINVAL: an
// address that is not page-aligned, no length, a range past the end of
// the address space) unmaps nothing, so the mappings it names stay known.
func TestMunmapRefusedKeepsMapping(t *testing.T) {
	k := testKernel(t, ctx.LinkLayerInfiniBand)
	a := newArena(t)
	fd := openNode(t, k, 0)
	en, _, _ := getContext(k, a, fd, ucontextReq(4, 0, 0))
	require.Zero(t, en)
	page := uintptr(k.pageSize)
	p, en := k.mmap(0, page, unix.PROT_WRITE, unix.MAP_SHARED, fd, 0)
	require.Zero(t, en)
	defer func() { _, _, _ = unix.Syscall(unix.SYS_MUNMAP, p, page, 0) }()

	k.munmap(p-1, page)
	require.Equal(t, 1, k.mappingCount(), "munmap of an address that is not page-aligned")
	k.munmap(p-page, ^uintptr(0)-(p-page)+2)
	require.Equal(t, 1, k.mappingCount(), "munmap of a range past the end of the address space")
	k.munmap(p, 0)
	require.Equal(t, 1, k.mappingCount(), "munmap of no bytes")
	k.munmap(p, 1)
	require.Zero(t, k.mappingCount(), "munmap of part of the page unmaps the page")
}
