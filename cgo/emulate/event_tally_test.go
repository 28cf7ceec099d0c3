//go:build cgo && linux

package emulate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestDestroyCQEventsOfSameUserHandle: two CQs of one completion channel
// and one async descriptor with the same user handle (createCQCmd gives
// every CQ the same one). The kernel ties each queued event to its CQ
// (ib_uverbs_comp_handler and ib_uverbs_async_handler link it on the
// object's list; ib_uverbs_release_ucq takes out only that list), so
// destroying one CQ neither takes out nor counts the other's unread
// events.
func TestDestroyCQEventsOfSameUserHandle(t *testing.T) {
	k, a, fd := objectKernel(t)
	ch, en := createCompChannelCmd(k, a, fd)
	require.Zero(t, en)
	ringA, dbA := cqMemory(t, 64, 64)
	ringB, dbB := cqMemory(t, 64, 64)
	hA, _, _, en := createCQCmd(k, a, fd, 63, 0, int32(ch), mlx5CQReq(addrOf(ringA), addrOf(dbA), 64), 8)
	require.Zero(t, en)
	hB, _, cqnB, en := createCQCmd(k, a, fd, 63, 0, int32(ch), mlx5CQReq(addrOf(ringB), addrOf(dbB), 64), 8)
	require.Zero(t, en)
	uc := k.files[fd].uctx
	uc.objects[hB].events.post()
	uc.async.post(ctx.AsyncEvent{Type: ctx.EventCQError, CQN: cqnB})

	comp, async, en := destroyCQCmd(k, a, fd, hA)
	require.Zero(t, en)
	require.Zero(t, comp, "CQ A's completion events reported")
	require.Zero(t, async, "CQ A's async events reported")
	require.True(t, readable(t, ch, 0), "CQ B's completion event is still in the channel")

	comp, async, en = destroyCQCmd(k, a, fd, hB)
	require.Zero(t, en)
	require.Zero(t, comp, "CQ B's unread completion event is not reported")
	require.Zero(t, async, "CQ B's unread async event is not reported")
	require.False(t, readable(t, ch, 0), "and it is taken out of the channel")
}

// TestDestroyCQAfterChannelClosed: closing a completion channel discards
// its unread events (ib_uverbs_free_event_queue unlinks them from their
// CQ), so DESTROY_CQ reports only the events that were read; reporting
// the discarded ones too would leave ibv_destroy_cq waiting for
// acknowledgements of events nobody can read.
func TestDestroyCQAfterChannelClosed(t *testing.T) {
	k, a, fd := objectKernel(t)
	ch, en := createCompChannelCmd(k, a, fd)
	require.Zero(t, en)
	ring, db := cqMemory(t, 64, 64)
	h, _, _, en := createCQCmd(k, a, fd, 63, 0, int32(ch), mlx5CQReq(addrOf(ring), addrOf(db), 64), 8)
	require.Zero(t, en)
	o := k.files[fd].uctx.objects[h]
	o.events.post()
	o.events.post()
	var rec [8]byte
	n, err := unix.Read(ch, rec[:])
	require.NoError(t, err)
	require.Equal(t, 8, n)
	require.Zero(t, k.close(ch))

	comp, _, en := destroyCQCmd(k, a, fd, h)
	require.Zero(t, en)
	require.Equal(t, uint32(1), comp, "the one event read")
}

// TestCloseEndsItsEventDescriptors: closing the device node cleans up
// every object of the file, its completion channels and async event
// descriptors included (uverbs_destroy_ufile_hw; both kinds end in
// ib_uverbs_free_event_queue), even while the program keeps those
// descriptors open: their unread events go, a destroyed CQ's with the
// rest (a record left behind names a CQ libibverbs has freed, which
// ibv_get_cq_event would hand the program), and a read finds the queue
// closed at once (EIO on a kernel, the end of the pipe here) instead of
// blocking; one blocked already is woken.
func TestCloseEndsItsEventDescriptors(t *testing.T) {
	k, a, fd := objectKernel(t)
	evfd := allocAsyncFD(t, k, a, fd)
	ch, en := createCompChannelCmd(k, a, fd)
	require.Zero(t, en)
	idle, en := createCompChannelCmd(k, a, fd)
	require.Zero(t, en)
	ring, db := cqMemory(t, 64, 64)
	h, _, cqn, en := createCQCmd(k, a, fd, 63, 0, int32(ch), mlx5CQReq(addrOf(ring), addrOf(db), 64), 8)
	require.Zero(t, en)
	uc := k.files[fd].uctx
	uc.objects[h].events.post()
	uc.async.post(ctx.AsyncEvent{Type: ctx.EventCQError, CQN: cqn})
	uc.async.post(ctx.AsyncEvent{Type: ctx.EventPortActive, Port: 1})
	require.True(t, readable(t, ch, 0))
	require.True(t, readable(t, evfd, 0))

	// A reader blocked on the channel no CQ writes to.
	woken := make(chan int, 1)
	go func() {
		var rec [8]byte
		n, _ := unix.Read(idle, rec[:])
		woken <- n
	}()

	require.Zero(t, k.close(fd))
	select {
	case n := <-woken:
		require.Zero(t, n, "no event read")
	case <-time.After(5 * time.Second):
		t.Fatal("the blocked read was not woken")
	}
	var b [asyncDescBytes]byte
	for _, evd := range []int{ch, evfd} {
		n, err := unix.Read(evd, b[:])
		require.NoError(t, err)
		require.Zero(t, n, "descriptor %d: its events went with the context, and the read does not block", evd)
	}
}
