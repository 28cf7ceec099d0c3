package sim

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestDrainNewSenderWhileActiveStreams: process a reads the records of b,
// which keeps sending; c sends its first record. c's first send sets its
// bit in a's senders word, so a's next drain reads it although b's ring
// has a record every round.
func TestDrainNewSenderWhileActiveStreams(t *testing.T) {
	m := joinMembers(t, 3)
	a, b, c := m[0], m[1], m[2]
	pad := func(h *wireHdr, _ []byte) {} // Kind wirePad: drain skips it
	require.True(t, b.send(a.slot, 0, pad))
	require.True(t, a.drain(nil)) // b is a sender now
	require.True(t, c.send(a.slot, 0, pad))
	require.True(t, b.send(a.slot, 0, pad))
	require.True(t, a.drain(nil))
	require.False(t, a.in.ready(c.slot), "c's record unread after a drain")
	require.Equal(t, atomic.LoadUint64(a.in.tail(c.slot)), atomic.LoadUint64(a.in.head(c.slot)))
}

// TestDrainReadsOnlyMarkedRecords: a record whose mark is not yet
// published is not read, however far the tail says the ring goes; one
// with the mark of an earlier lap is not read either.
func TestDrainReadsOnlyMarkedRecords(t *testing.T) {
	m := joinMembers(t, 2)
	a, b := m[0], m[1]
	pad := func(h *wireHdr, _ []byte) {} // Kind wirePad: drain skips it
	require.True(t, b.send(a.slot, 0, pad))
	head := atomic.LoadUint64(a.in.head(b.slot))
	mark := a.in.mark(b.slot, head)
	published := atomic.LoadUint64(mark)
	require.Equal(t, head+1, published)

	atomic.StoreUint64(mark, 0) // not yet published
	require.False(t, a.drain(nil))
	require.Equal(t, head, atomic.LoadUint64(a.in.head(b.slot)))
	atomic.StoreUint64(mark, published+ringDataSize) // the next lap's
	require.False(t, a.drain(nil))
	atomic.StoreUint64(mark, published)
	require.True(t, a.drain(nil))
	require.Equal(t, atomic.LoadUint64(a.in.tail(b.slot)), atomic.LoadUint64(a.in.head(b.slot)))
}

// joinMembers joins n members to a fresh shared fabric, in this process.
func joinMembers(t *testing.T, n int) []*shmFabric {
	name := testFabricName(t)
	m := make([]*shmFabric, n)
	for i := range m {
		s, err := joinShared(name, ctx.LinkLayerInfiniBand)
		require.NoError(t, err)
		t.Cleanup(s.leave)
		m[i] = s
	}
	return m
}

// walkRing calls fn for each record of the process in slot from waiting
// in ring file rf (pads included), with its payload.
func walkRing(rf *ringFile, from int, fn func(h *wireHdr, payload []byte)) {
	tail, head := atomic.LoadUint64(rf.tail(from)), atomic.LoadUint64(rf.head(from))
	data := rf.data(from)
	for head != tail {
		pos := head & (ringDataSize - 1)
		h := (*wireHdr)(unsafe.Pointer(&data[pos+ringMarkSize]))
		fn(h, data[pos+uint64(ringRecHdr):pos+uint64(h.Len)])
		head += uint64(h.Len)
	}
}

// TestSleepWakesOnRecord: an engine asleep on its ring file (sleep) wakes
// when a peer publishes a record, long before its sleep would end; one
// that has a record waiting does not sleep at all.
func TestSleepWakesOnRecord(t *testing.T) {
	m := joinMembers(t, 2)
	a, b := m[0], m[1]
	pad := func(h *wireHdr, _ []byte) {} // Kind wirePad: drain skips it

	done := make(chan time.Duration, 1)
	go func() {
		t0 := time.Now()
		a.in.sleep(time.Minute)
		done <- time.Since(t0)
	}()
	for atomic.LoadUint32(a.in.u32(ringFileSleeping)) == 0 {
		runtime.Gosched()
	}
	time.Sleep(10 * time.Millisecond) // past sleepGuard: on the futex
	require.True(t, b.send(a.slot, 0, pad))
	select {
	case d := <-done:
		require.Less(t, d, 30*time.Second)
	case <-time.After(30 * time.Second):
		t.Fatal("sleep did not end when a record was published")
	}
	require.Zero(t, atomic.LoadUint32(a.in.u32(ringFileSleeping)))

	t0 := time.Now() // the record is still unread
	a.in.sleep(time.Minute)
	require.Less(t, time.Since(t0), 30*time.Second)
}
