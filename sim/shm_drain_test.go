package sim

import (
	"encoding/binary"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
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

// TestRingStalePayloadIsNoMark: a record of an earlier lap whose payload
// holds, where a later lap's record ends, the very mark the consumer will
// expect there: after the ring is recycled, the consumer must stop at
// the end of the records written, not take that payload for a record.
func TestRingStalePayloadIsNoMark(t *testing.T) {
	m := joinMembers(t, 2)
	a, b := m[0], m[1]
	pad := func(h *wireHdr, _ []byte) {}
	// Lap 1: a 256-byte record; ring position 128 is its payload's
	// offset 16, where it writes lap 2's mark for 128 and a pad's Len.
	require.True(t, b.send(a.slot, 256-ringRecHdr, func(h *wireHdr, p []byte) {
		binary.LittleEndian.PutUint64(p[128-ringRecHdr:], ringDataSize+128+1)
		binary.LittleEndian.PutUint32(p[128-ringRecHdr+ringMarkSize:], 128)
	}))
	require.True(t, a.drain(nil))
	for atomic.LoadUint64(a.in.tail(b.slot))&(ringDataSize-1) < ringRecycle {
		require.True(t, b.send(a.slot, 0, pad))
		require.True(t, a.drain(nil))
	}
	require.True(t, b.send(a.slot, 0, pad)) // recycles: lap 2 from position 0
	require.True(t, a.drain(nil))
	tail, head := atomic.LoadUint64(a.in.tail(b.slot)), atomic.LoadUint64(a.in.head(b.slot))
	require.Equal(t, tail, head, "the consumer's head %#x is past the tail %#x", head, tail)
}

// TestRingNewOwnerAfterProducerDiedMidPublish: a producer dies between
// its record's mark and its tail store, and the consumer reads the
// record; the next owner of the producer's slot must write where the
// consumer looks, so that every record it sends arrives.
func TestRingNewOwnerAfterProducerDiedMidPublish(t *testing.T) {
	a := joinMembers(t, 1)[0]
	b, err := joinShared(a.name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	p := b.peer(a.slot)
	p.announce(b.slot)
	rec, at, err := p.reserve(b.slot, ringRecHdr)
	require.NoError(t, err)
	(*wireHdr)(unsafe.Pointer(&rec[ringMarkSize])).Len = uint32(len(rec))
	storeRelease64(p.mark(b.slot, at), at+1) // dies here: no tail store
	require.True(t, a.drain(nil))
	b.leave()

	c, err := joinShared(a.name, ctx.LinkLayerInfiniBand, 0) // b's slot
	require.NoError(t, err)
	t.Cleanup(c.leave)
	require.Equal(t, b.slot, c.slot)
	got := 0
	for i := 0; i < 20; i++ {
		require.True(t, c.send(a.slot, 96, func(h *wireHdr, _ []byte) {}))
		if a.drain(nil) {
			got++
		}
	}
	require.Equal(t, 20, got, "records of the slot's new owner read")
}

// joinMembers joins n members to a fresh shared fabric, in this process.
func joinMembers(t *testing.T, n int) []*shmFabric {
	name := testFabricName(t)
	m := make([]*shmFabric, n)
	for i := range m {
		s, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
		require.NoError(t, err)
		t.Cleanup(s.leave)
		m[i] = s
	}
	return m
}

// walkRing calls fn for each record of the process in slot from waiting
// in ring file rf (pads included), with its payload; a one-line record as
// the wireHdr it expands to (its generations the low 32 bits it carries).
func walkRing(rf *ringFile, from int, fn func(h *wireHdr, payload []byte)) {
	tail, head := atomic.LoadUint64(rf.tail(from)), atomic.LoadUint64(rf.head(from))
	data := rf.data(from)
	for head != tail {
		pos := head & (ringDataSize - 1)
		h := (*wireHdr)(unsafe.Pointer(&data[pos+ringMarkSize]))
		n := uint64(h.Len)
		if h.Kind == wireSmall {
			c := *(*wireSmallHdr)(unsafe.Pointer(h))
			var x, a wireHdr
			c.expand(&x, uint64(c.SrcGen), uint64(c.DstGen))
			if c.NSL&wireSmallAck != 0 {
				c.carriedAck(&a, &x) // taken ahead of the request
				fn(&a, nil)
			}
			fn(&x, c.Data[:x.Seg])
		} else {
			fn(h, data[pos+uint64(ringRecHdr):pos+n])
		}
		head += n
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
		a.in.sleep(a.slot, time.Minute)
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
	a.in.sleep(a.slot, time.Minute)
	require.Less(t, time.Since(t0), 30*time.Second)
}

// TestHeldAcksGoWithTheWire: ACKs a full ring still keeps when a Fabric
// closes go with its wire: a QP closed after its Fabric finds none to
// send through the shared fabric it has left.
func TestHeldAcksGoWithTheWire(t *testing.T) {
	e1, e2, a, _, s2 := fullUDPair(t, 0)
	e1.f.mu.Lock()
	e1.f.wireAcks = append(e1.f.wireAcks, wireHeldAck{slot: s2, gen: e2.f.shm.gen, op: 0x09, dst: 0x40, src: a.qp.QPN(), psn: 3})
	e1.f.mu.Unlock()
	require.NoError(t, e1.f.Close())
	e1.f.mu.Lock()
	require.Nil(t, e1.f.shm)
	require.Empty(t, e1.f.wireAcks, "held past Close")
	require.False(t, e1.f.wireAcksBlocked)
	e1.f.mu.Unlock()
	require.NotPanics(t, func() { _ = a.qp.Close() })
}

// TestSharedCloseFlushesAcksThePeerTakes: a process that closes its
// Fabric right after its last receive flushes the ACK it holds into the
// requester's ring and frees its slot; the requester still takes that
// ACK, and its WRITE completes. Before, it dropped every record of a slot
// no longer held (a generation of no live owner), and the WRITE ended in
// RETRY_EXC_ERR once its retries found the peer gone (perftest's server
// against a kit client that closed as it exited: "Failed status 12").
func TestSharedCloseFlushesAcksThePeerTakes(t *testing.T) {
	e1, e2, a, q := heldRCPair(t)
	q.postRecv()
	a.postWQE(writeImmWQE(a, e2.addr(0), e2.mr.RKey()), 7)
	stepRound(e1.f)
	stepRound(e2.f)
	c, ok := q.rcq.poll()
	require.True(t, ok, "the WRITE reached the responder")
	require.Equal(t, prm.CQERespWrImm, c.op)
	require.NoError(t, e2.f.Close())
	_, slot2 := e2.f.SharedFabric()
	require.Equal(t, -1, slot2, "the responder left")
	stepRound(e1.f)
	c, ok = a.scq.poll()
	require.True(t, ok, "the ACK the responder flushed as it left was dropped")
	require.Equal(t, prm.CQEReq, c.op)
}
