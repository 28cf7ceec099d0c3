package transport

import (
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// ring is receive-ring memory for the unit tests (Go memory: nothing but
// the test reads it).
type ring struct {
	mem   []byte
	buf   unsafe.Pointer
	dbrec []byte
}

func newTestRing(bytes int) *ring {
	mem := make([]byte, bytes+64)
	p := unsafe.Pointer(unsafe.SliceData(mem))
	off := (64 - uintptr(p)%64) % 64
	return &ring{mem: mem[off : off+uintptr(bytes)], buf: unsafe.Add(p, off), dbrec: make([]byte, 8)}
}

var be = binary.BigEndian

// setTestErrors gives r the errors an owner gives it: "full" (its
// refusal, the only one a bare ring has), "sge" and "stale".
func setTestErrors(r *recvRing) {
	r.errFull, r.errSGE, r.errStale = errors.New("full"), errors.New("sge"), errors.New("stale")
	r.refusal = func() error { return r.errFull }
}

// full reports whether the ring has no free slot, as the owners'
// BeginRecv check it.
func (r *recvRing) full() bool {
	if r.srq {
		return r.head == r.tail
	}
	return r.head-r.tail > r.mask
}

// testBegin begins a receive WQE as an owner's BeginRecv does: refused
// when the ring is full, else at the next free slot.
func (r *recvRing) testBegin(wrid uint64) RecvStage {
	if r.full() {
		return r.refuse()
	}
	return r.begin(wrid)
}

func (r *ring) seg(stride, idx, k int) []byte {
	return r.mem[stride*idx+prm.DataSize*k:][:prm.DataSize]
}

func TestReceiveQueueLayout(t *testing.T) {
	const cnt, stride = 8, 64 // four data segments per WQE
	rg := newTestRing(cnt * stride)
	for i := range rg.mem {
		rg.mem[i] = 0xee
	}
	r, err := newRecvRing(rg.buf, unsafe.Pointer(&rg.dbrec[0]), cnt, stride, 0, false, 0, 0)
	require.NoError(t, err)
	setTestErrors(r)
	require.Equal(t, uint32(4), r.maxSGE)

	// Two buffers and a zero-length one, which is skipped: then the
	// terminator, and the fourth segment is not touched.
	require.NoError(t, r.testBegin(77).SGE(0x1000, 100, 0x11).SGE(0x2000, 0, 0x22).SGE(0x3000, 300, 0x33).Finish())
	require.Equal(t, uint32(100), be.Uint32(rg.seg(stride, 0, 0)[0:]))
	require.Equal(t, uint32(0x11), be.Uint32(rg.seg(stride, 0, 0)[4:]))
	require.Equal(t, uint64(0x1000), be.Uint64(rg.seg(stride, 0, 0)[8:]))
	require.Equal(t, uint32(300), be.Uint32(rg.seg(stride, 0, 1)[0:]))
	require.Equal(t, uint32(0x33), be.Uint32(rg.seg(stride, 0, 1)[4:]))
	require.Equal(t, uint64(0x3000), be.Uint64(rg.seg(stride, 0, 1)[8:]))
	require.Equal(t, uint32(0), be.Uint32(rg.seg(stride, 0, 2)[0:]))
	require.Equal(t, uint32(prm.InvalidLKey), be.Uint32(rg.seg(stride, 0, 2)[4:]))
	require.Equal(t, uint64(0), be.Uint64(rg.seg(stride, 0, 2)[8:]))
	require.Equal(t, []byte{0xee, 0xee, 0xee, 0xee}, rg.seg(stride, 0, 3)[:4])

	// The doorbell record moves only at the doorbell, big-endian.
	require.Equal(t, uint32(0), be.Uint32(rg.dbrec))
	r.ringDoorbell()
	require.Equal(t, uint32(1), be.Uint32(rg.dbrec))
	require.Equal(t, uint32(0), be.Uint32(rg.dbrec[4:]), "word 1 is the send queue's")

	// A full list of four has no terminator; five is an error that writes
	// nothing.
	require.NoError(t, r.testBegin(78).SGE(1, 1, 1).SGE(2, 2, 2).SGE(3, 3, 3).SGE(4, 4, 4).Finish())
	require.Equal(t, uint32(4), be.Uint32(rg.seg(stride, 1, 3)[4:]))
	outside := append(append([]byte(nil), rg.mem[:2*stride]...), rg.mem[3*stride:]...)
	require.EqualError(t, r.testBegin(79).SGE(1, 1, 1).SGE(2, 2, 2).SGE(3, 3, 3).SGE(4, 4, 4).SGE(5, 5, 5).Finish(), "sge")
	require.Equal(t, outside, append(append([]byte(nil), rg.mem[:2*stride]...), rg.mem[3*stride:]...),
		"a failed WQE writes only inside its own slot")
	require.Equal(t, uint32(2), r.posted, "and is not posted")
	require.Equal(t, uint32(2), r.head)
	r.ringDoorbell()
	require.Equal(t, uint32(2), be.Uint32(rg.dbrec))

	// Fill it, then it is full; completions come back in order only.
	for i := range cnt - 2 {
		require.NoError(t, r.testBegin(uint64(80+i)).Finish())
	}
	require.EqualError(t, r.testBegin(99).Finish(), "full")
	r.ringDoorbell()
	require.Equal(t, uint32(cnt), be.Uint32(rg.dbrec))
	_, ok := r.take(1)
	require.False(t, ok, "out of order")
	for i := range cnt {
		w, ok := r.take(uint16(i))
		require.True(t, ok)
		require.Equal(t, []uint64{77, 78, 80, 81, 82, 83, 84, 85}[i], w)
	}
	_, ok = r.take(uint16(cnt))
	require.False(t, ok, "nothing outstanding")

	// The counter is free-running; the record holds its low 16 bits.
	r.counter, r.head, r.tail = 0xfffe, 0xfffe, 0xfffe
	require.NoError(t, r.testBegin(1).Finish())
	require.NoError(t, r.testBegin(2).Finish())
	r.ringDoorbell()
	require.Equal(t, uint32(0), be.Uint32(rg.dbrec))
	w, ok := r.take(0xfffe)
	require.True(t, ok)
	require.Equal(t, uint64(1), w)
	w, ok = r.take(0xffff)
	require.True(t, ok)
	require.Equal(t, uint64(2), w)
}

func TestSharedReceiveQueueFreeList(t *testing.T) {
	const cnt, stride = 4, 32 // the next segment and one data segment
	rg := newTestRing(cnt * stride)
	next := func(i int) uint16 { return be.Uint16(rg.mem[stride*i+prm.SRQNextWQEIndex:]) }
	for i := range cnt - 1 {
		be.PutUint16(rg.mem[stride*i+prm.SRQNextWQEIndex:], uint16(i+1))
	}
	r, err := newRecvRing(rg.buf, unsafe.Pointer(&rg.dbrec[0]), cnt, stride, 0, true, 0, cnt-1)
	require.NoError(t, err)
	setTestErrors(r)
	require.Equal(t, uint32(1), r.maxSGE)

	// Three may be posted (the tail is the free list's anchor).
	for i := range 3 {
		require.NoError(t, r.testBegin(uint64(10+i)).SGE(uint64(0x100*i), 64, 7).Finish())
		seg := rg.mem[stride*i+prm.SRQNextSize:]
		require.Equal(t, uint32(64), be.Uint32(seg))
		require.Equal(t, uint64(0x100*i), be.Uint64(seg[8:]))
	}
	require.EqualError(t, r.testBegin(13).Finish(), "full")
	r.ringDoorbell()
	require.Equal(t, uint32(3), be.Uint32(rg.dbrec))

	// Completions in any order put their slot after the tail.
	w, ok := r.take(1)
	require.True(t, ok)
	require.Equal(t, uint64(11), w)
	require.Equal(t, uint16(1), next(3), "slot 1 linked after the old tail")
	_, ok = r.take(1)
	require.False(t, ok, "slot 1 is free: a duplicate completion is refused")
	_, ok = r.take(3)
	require.False(t, ok, "slot 3 was never posted")
	w, ok = r.take(0)
	require.True(t, ok)
	require.Equal(t, uint64(10), w)
	require.Equal(t, uint16(0), next(1))

	// The next posts follow the free list: slot 3, then 1.
	require.NoError(t, r.testBegin(20).SGE(0x900, 8, 7).Finish())
	require.Equal(t, uint64(0x900), be.Uint64(rg.mem[stride*3+prm.SRQNextSize+8:]))
	require.NoError(t, r.testBegin(21).SGE(0xa00, 8, 7).Finish())
	require.Equal(t, uint64(0xa00), be.Uint64(rg.mem[stride*1+prm.SRQNextSize+8:]))
	require.EqualError(t, r.testBegin(22).Finish(), "full")
	for _, c := range []struct {
		slot uint16
		wrid uint64
	}{{3, 20}, {2, 12}, {1, 21}} {
		w, ok := r.take(c.slot)
		require.True(t, ok)
		require.Equal(t, c.wrid, w)
	}
	require.Zero(t, r.posted)
}

func TestScatterToBuffers(t *testing.T) {
	const cnt, stride = 2, 64
	rg := newTestRing(cnt * stride)
	r, err := newRecvRing(rg.buf, unsafe.Pointer(&rg.dbrec[0]), cnt, stride, 0, false, 0, 0)
	require.NoError(t, err)
	a, b := make([]byte, 8), make([]byte, 64)
	addr := func(p []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p)))) }
	require.NoError(t, r.testBegin(1).SGE(addr(a), 5, 1).SGE(addr(b), 64, 1).Finish())
	r.scatterTo(0, []byte("hello, world"))
	require.Equal(t, "hello\x00\x00\x00", string(a))
	require.Equal(t, ", world", string(b[:7]))
	require.Zero(t, b[7])
}

func TestMaxWQEBBs(t *testing.T) {
	for _, c := range []struct {
		typ       uint8
		sge, inl  uint32
		wantWQEBB uint32
	}{
		{1, 1, 0, 2},   // RC: ctrl, raddr, masked CS64 and its result
		{1, 4, 60, 2},  // RC: 6 segments
		{1, 6, 0, 2},   // RC: 8 segments
		{1, 7, 0, 3},   // RC: 9 segments
		{2, 1, 0, 2},   // UD: ctrl, AV, one SGE: 5 segments
		{2, 0, 444, 8}, // UD: ctrl, AV and 28 inline segments
		{3, 1, 0, 2},   // DCI: ctrl, AV, raddr, masked CS64 + result: 8
		{3, 4, 0, 3},   // DCI: 9 segments
		{1, 63, 0, 16}, // the 6-bit ds caps it
	} {
		require.Equal(t, c.wantWQEBB, maxWQEBBs(qpType(c.typ), c.sge, c.inl), "%+v", c)
	}
}

func qpType(t uint8) ctx.QPType { return ctx.QPType(t) }
