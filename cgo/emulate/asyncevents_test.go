//go:build cgo && linux

package emulate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// The verbs event numbers (enum ibv_event_type, the kernel's enum
// ib_event_type) the tests expect.
const (
	evCQErr        = 0
	evQPFatal      = 1
	evPortActive   = 9
	evSRQLimit     = 15
	evQPLastWQE    = 16
	asyncDescBytes = 16 // struct ib_uverbs_async_event_desc
)

// allocAsyncFD runs ASYNC_EVENT_ALLOC and returns the descriptor.
func allocAsyncFD(t *testing.T, k *kernel, a *arena, fd int) int {
	t.Helper()
	hdr, attrs := a.ioctlCmd(objectAsync, methodAsyncAlloc, testAttr{id: attrAsyncFD, flags: attrFlagMandatory})
	require.Zero(t, k.ioctl(fd, rdmaVerbsIoctl, hdr))
	evfd := int(int64(attrData(attrs, 0)))
	t.Cleanup(func() { _ = k.close(evfd) })
	return evfd
}

// readAsync reads one event record: the element and the event type.
func readAsync(t *testing.T, evfd int) (element uint64, typ uint32) {
	t.Helper()
	var b [asyncDescBytes]byte
	n, err := unix.Read(evfd, b[:])
	require.NoError(t, err)
	require.Equal(t, asyncDescBytes, n)
	require.Zero(t, ne.Uint32(b[12:]), "reserved")
	return ne.Uint64(b[:]), ne.Uint32(b[8:])
}

// readable polls evfd for up to wait.
func readable(t *testing.T, evfd int, wait time.Duration) bool {
	t.Helper()
	p := []unix.PollFd{{Fd: int32(evfd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, int(wait.Milliseconds()))
	require.NoError(t, err)
	return n == 1 && p[0].Revents&unix.POLLIN != 0
}

// destroyReported sends a DESTROY_QP or DESTROY_SRQ and returns the
// response's events_reported.
func destroyReported(t *testing.T, k *kernel, a *arena, fd int, cmd, h uint32) uint32 {
	t.Helper()
	resp, respAddr := a.alloc(4)
	ne.PutUint32(resp, 0xdead)
	core := respCore(respAddr, make([]byte, 8)...)
	ne.PutUint32(core[8:], h)
	buf, n := a.writeCmd(cmd, core, 1)
	_, en := k.write(fd, buf, n)
	require.Zero(t, en)
	return ne.Uint32(resp)
}

// TestKernelAsyncEvents drives the model's async events to the async event
// descriptors of an emulated context: a QP fatal error (FailQP) of a QP on
// an SRQ gives QP_FATAL then QP_LAST_WQE_REACHED naming the QP's user
// handle; the descriptor reads as the kernel's event file does (poll
// readiness, EAGAIN when empty and non-blocking, a blocked read woken by
// an event); an object's events go to the default (first) descriptor and
// port events to every one; DESTROY_QP, DESTROY_SRQ and DESTROY_CQ report
// the events read, taking the unread ones out of the descriptor.
func TestKernelAsyncEvents(t *testing.T) {
	k, a, fd := objectKernel(t)
	evfd := allocAsyncFD(t, k, a, fd)
	second := allocAsyncFD(t, k, a, fd)

	// Nothing yet: not readable, EAGAIN without blocking.
	require.False(t, readable(t, evfd, 0))
	require.NoError(t, unix.SetNonblock(evfd, true))
	var b [asyncDescBytes]byte
	_, err := unix.Read(evfd, b[:])
	require.ErrorIs(t, err, unix.EAGAIN)

	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	ringCQ, cqdb := cqMemory(t, 64, 64)
	cq, _, cqn, en := createCQCmd(k, a, fd, 63, 0, -1, mlx5CQReq(addrOf(ringCQ), addrOf(cqdb), 64), 8)
	require.Zero(t, en)
	ring, db := srqMemory(t, 16, 32)
	srq, _, _, srqn, en := createSRQCmd(k, a, fd, pd, 15, 1, mlx5SRQReq(addrOf(ring), addrOf(db), 0))
	require.Zero(t, en)
	caps := qpCaps{sendWR: 8, recvWR: 8, sendSGE: 1, recvSGE: 1}
	newQP := func() (h, qpn uint32) {
		qbuf, qdb := qpMemory(t, 0, 16)
		h, qpn, en := createQPOnSRQ(k, a, fd, pd, cq, srq, qptRC, caps, mlx5QPReq(addrOf(qbuf), addrOf(qdb), 16, 0, 0, 0, 0))
		require.Zero(t, en)
		return h, qpn
	}
	q1, qpn1 := newQP()
	q2, qpn2 := newQP()

	// A fatal error of q1: QP_FATAL, then QP_LAST_WQE_REACHED (it is on
	// an SRQ), both naming the user handle of CREATE_QP.
	require.NoError(t, k.fabric.FailQP(qpn1))
	require.True(t, readable(t, evfd, 5*time.Second))
	el, typ := readAsync(t, evfd)
	require.Equal(t, []uint64{qpUserHandle, evQPFatal}, []uint64{el, uint64(typ)})
	el, typ = readAsync(t, evfd)
	require.Equal(t, []uint64{qpUserHandle, evQPLastWQE}, []uint64{el, uint64(typ)})
	_, err = unix.Read(evfd, b[:])
	require.ErrorIs(t, err, unix.EAGAIN, "two events, two records")
	require.False(t, readable(t, second, 0), "object events go to the default descriptor only")
	require.Equal(t, uint32(2), destroyReported(t, k, a, fd, cmdDestroyQP, q1), "both read")

	// q2 fails too; one event read, one left unread: DESTROY_QP reports
	// the one read and takes the other out of the descriptor.
	require.NoError(t, k.fabric.FailQP(qpn2))
	require.True(t, readable(t, evfd, 5*time.Second))
	el, typ = readAsync(t, evfd)
	require.Equal(t, []uint64{qpUserHandle, evQPFatal}, []uint64{el, uint64(typ)})
	require.Equal(t, uint32(1), destroyReported(t, k, a, fd, cmdDestroyQP, q2))
	require.False(t, readable(t, evfd, 0), "the unread event went with the QP")

	// A blocked read (the second descriptor blocks) is woken by a port
	// event, which every descriptor receives.
	got := make(chan [asyncDescBytes]byte, 1)
	go func() {
		var r [asyncDescBytes]byte
		_, _ = unix.Read(second, r[:])
		got <- r
	}()
	uc := k.files[fd].uctx
	uc.async.post(ctx.AsyncEvent{Type: ctx.EventPortActive, Port: 1})
	select {
	case r := <-got:
		require.Equal(t, []uint64{1, evPortActive}, []uint64{ne.Uint64(r[:]), uint64(ne.Uint32(r[8:]))})
	case <-time.After(5 * time.Second):
		t.Fatal("the blocked read was not woken")
	}
	el, typ = readAsync(t, evfd)
	require.Equal(t, []uint64{1, evPortActive}, []uint64{el, uint64(typ)})

	// SRQ and CQ events as the model raises them (SRQ limit, CQ error):
	// DESTROY_SRQ's events_reported and DESTROY_CQ's async_events_reported
	// count the read ones.
	uc.async.post(ctx.AsyncEvent{Type: ctx.EventSRQLimitReached, SRQN: srqn})
	uc.async.post(ctx.AsyncEvent{Type: ctx.EventCQError, CQN: cqn})
	uc.async.post(ctx.AsyncEvent{Type: ctx.EventSRQLimitReached, SRQN: srqn})
	uc.async.post(ctx.AsyncEvent{Type: ctx.EventSRQLimitReached, SRQN: srqn + 1000}) // no such SRQ: dropped
	el, typ = readAsync(t, evfd)
	require.Equal(t, []uint64{srqUserHandle, evSRQLimit}, []uint64{el, uint64(typ)})
	require.Equal(t, uint32(1), destroyReported(t, k, a, fd, cmdDestroySRQ, srq))
	el, typ = readAsync(t, evfd)
	require.Equal(t, []uint64{cqUserHandle, evCQErr}, []uint64{el, uint64(typ)}, "the SRQ's unread event is gone, the CQ's kept")
	comp, async, en := destroyCQCmd(k, a, fd, cq)
	require.Zero(t, en)
	require.Equal(t, []uint32{0, 1}, []uint32{comp, async})
	require.False(t, readable(t, evfd, 0))
	require.Zero(t, handleCmd(k, a, fd, cmdDeallocPD, pd))
}

// TestKernelSRQLimit: MODIFY_SRQ with IBV_SRQ_LIMIT arms the model's
// limit, which QUERY_SRQ reads back; 0 disarms; a limit at the WQE count
// is EINVAL and changes nothing.
func TestKernelSRQLimit(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	ring, db := srqMemory(t, 16, 32)
	h, _, _, _, en := createSRQCmd(k, a, fd, pd, 15, 1, mlx5SRQReq(addrOf(ring), addrOf(db), 0))
	require.Zero(t, en)
	limit := func() uint32 {
		_, _, l, en := querySRQCmd(k, a, fd, h)
		require.Zero(t, en)
		return l
	}
	require.Zero(t, modifySRQCmd(k, a, fd, h, srqAttrLimit, 0, 4))
	require.Equal(t, uint32(4), limit())
	require.Equal(t, unix.EINVAL, modifySRQCmd(k, a, fd, h, srqAttrLimit, 0, 16))
	require.Equal(t, uint32(4), limit(), "a refused limit changes nothing")
	require.Zero(t, modifySRQCmd(k, a, fd, h, srqAttrLimit, 0, 0))
	require.Zero(t, limit())
	require.Zero(t, destroySRQCmd(k, a, fd, h))
	require.Zero(t, handleCmd(k, a, fd, cmdDeallocPD, pd))
}

// The user handles the test commands give CREATE_CQ, CREATE_SRQ and
// CREATE_QP (on an SRQ).
const (
	cqUserHandle  = 0x1234
	srqUserHandle = 0x55
	qpUserHandle  = 0x66
)

// TestAsyncAllocFailedWriteBack: an ASYNC_EVENT_ALLOC whose descriptor
// cannot be written back (the attribute array is read-only) fails with
// EFAULT and leaves nothing behind: the descriptor is not the context's
// default, and no event goes to its numbers, which the program's next
// descriptors take (as the kernel aborts the new file). Before, the
// closed file stayed the default, and the next port event was written
// into whatever pipe took its write end's number. A later ALLOC works.
func TestAsyncAllocFailedWriteBack(t *testing.T) {
	k, a, fd := objectKernel(t)
	page, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer func() { _ = unix.Munmap(page) }()
	ne.PutUint16(page[ioctlOffLength:], uint16(ioctlHdrSize+attrSize))
	ne.PutUint16(page[ioctlOffObject:], objectAsync)
	ne.PutUint16(page[ioctlOffMethod:], methodAsyncAlloc)
	ne.PutUint16(page[ioctlOffNumAttrs:], 1)
	ne.PutUint32(page[ioctlOffDriverID:], driverMLX5)
	r := page[ioctlHdrSize:]
	ne.PutUint16(r[attrOffID:], attrAsyncFD)
	ne.PutUint16(r[attrOffFlags:], attrFlagMandatory)
	require.NoError(t, unix.Mprotect(page, unix.PROT_READ))
	require.Equal(t, unix.EFAULT, k.ioctl(fd, rdmaVerbsIoctl, addrOf(page)))

	uc := k.files[fd].uctx
	require.Empty(t, uc.async.files, "the failed descriptor is the context's default")
	var p [2]int
	require.NoError(t, unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC)) // may take the freed numbers
	defer func() { _ = unix.Close(p[0]); _ = unix.Close(p[1]) }()
	uc.async.post(ctx.AsyncEvent{Type: ctx.EventPortActive, Port: 1})
	var b [64]byte
	n, _ := unix.Read(p[0], b[:])
	require.LessOrEqual(t, n, 0, "an event record went into an unrelated descriptor")

	evfd := allocAsyncFD(t, k, a, fd)
	uc.async.post(ctx.AsyncEvent{Type: ctx.EventPortActive, Port: 1})
	_, typ := readAsync(t, evfd)
	require.Equal(t, uint32(evPortActive), typ)
}

// TestAsyncEventNumbers pins the verbs number and element class the
// emulated kernel writes for every type of the model's events: the QP, CQ
// and SRQ events name their object, the port and device events a port
// number; WQ_FATAL (the model has no work queues) and types without a
// number are not written.
func TestAsyncEventNumbers(t *testing.T) {
	want := map[ctx.AsyncEventType]struct {
		typ   uint32
		class asyncClass
	}{
		ctx.EventCQError: {0, asyncCQ}, ctx.EventQPFatal: {1, asyncQP}, ctx.EventQPRequestError: {2, asyncQP},
		ctx.EventQPAccessError: {3, asyncQP}, ctx.EventCommEstablished: {4, asyncQP}, ctx.EventSQDrained: {5, asyncQP},
		ctx.EventPathMigrated: {6, asyncQP}, ctx.EventPathMigrationError: {7, asyncQP}, ctx.EventDeviceFatal: {8, asyncPort},
		ctx.EventPortActive: {9, asyncPort}, ctx.EventPortError: {10, asyncPort}, ctx.EventLIDChange: {11, asyncPort},
		ctx.EventPKeyChange: {12, asyncPort}, ctx.EventSMChange: {13, asyncPort}, ctx.EventSRQError: {14, asyncSRQ},
		ctx.EventSRQLimitReached: {15, asyncSRQ}, ctx.EventQPLastWQEReached: {16, asyncQP},
		ctx.EventClientReregister: {17, asyncPort}, ctx.EventGIDChange: {18, asyncPort},
	}
	for typ := ctx.AsyncEventType(0); typ < 32; typ++ {
		n, class, ok := asyncEventType(typ)
		w, known := want[typ]
		require.Equal(t, known, ok, "%v", typ)
		if known {
			require.Equal(t, w.typ, n, "%v", typ)
			require.Equal(t, w.class, class, "%v", typ)
		}
	}
}
