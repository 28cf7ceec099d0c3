//go:build cgo && linux

package emulate

import (
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestKernelWatchesTheBfregRegister: in strict mode the model checks a QP
// created through CREATE_QP against the doorbell register libmlx5 rings
// for the QP's bfreg, in the UAR page the library mapped: bfreg 0 (a QP
// created without MLX5_QP_FLAG_BFREG_INDEX) at offset 0x800 of static page
// 0, 8-byte doorbells only; an odd legacy dynamic bfreg at 0x800 + 512 of
// its MLX5_IB_MMAP_ALLOC_WC page, with two BlueFlame buffers of 256 bytes.
// A send doorbell record moved with no write there (another bfreg's
// register written instead) is sim.ViolationDoorbellRecordOnly; a write
// to either buffer of the QP's register is a doorbell. Once the library
// unmaps the page the model stops reading it.
func TestKernelWatchesTheBfregRegister(t *testing.T) {
	k := testKernelWith(t, sim.Options{LinkLayer: ctx.LinkLayerInfiniBand, Strict: true})
	a := newArena(t)
	fd := openNode(t, k, 0)
	en, _, _ := getContext(k, a, fd, ucontextReq(4, 0, 0))
	require.Zero(t, en)
	page := uintptr(k.pageSize)
	off := func(cmd, index int) int64 { return int64(cmd<<8|index) * int64(page) }
	static0, en := k.mmap(0, page, unix.PROT_WRITE, unix.MAP_SHARED, fd, off(mmapRegular, 0))
	require.Zero(t, en)
	dyn0, en := k.mmap(0, page, unix.PROT_WRITE, unix.MAP_SHARED, fd, off(mmapAllocWC, 0))
	require.Zero(t, en)
	t.Cleanup(func() { _ = rawMunmap(dyn0, page) })
	pd, cq := pdAndCQ(t, k, a, fd)
	f := k.fabric
	// reported returns the kinds of the violations recorded since the
	// last call.
	seen := 0
	reported := func() []sim.ViolationKind {
		var out []sim.ViolationKind
		v := f.Violations()
		for _, x := range v[seen:] {
			out = append(out, x.Kind)
		}
		seen = len(v)
		return out
	}

	type qpUnderTest struct {
		h, qpn uint32
		buf    []byte
		db     []byte
		pi     uint16
	}
	const sqCnt = 16
	create := func(flags, bfreg uint32) *qpUnderTest {
		q := &qpUnderTest{}
		q.buf, q.db = qpMemory(t, 0, sqCnt)
		var en syscall.Errno
		q.h, q.qpn, _, en = createQPCmd(k, a, fd, pd, cq, cq, qptUD, qpCaps{sendWR: 8, sendSGE: 1},
			mlx5QPReq(addrOf(q.buf), addrOf(q.db), sqCnt, 0, 0, flags, bfreg))
		require.Zero(t, en)
		require.Zero(t, modifyQPCmd(k, a, fd, modifyQP{h: q.h, mask: mmState | mmPKey | mmPort | mmQKey, state: 1, port: 1, qkey: 0x11}))
		require.Zero(t, modifyQPCmd(k, a, fd, modifyQP{h: q.h, mask: mmState, state: 2}))
		require.Zero(t, modifyQPCmd(k, a, fd, modifyQP{h: q.h, mask: mmState | mmSQPSN, state: 3}))
		return q
	}
	// post writes a signaled NOP (with the address vector a UD WQE
	// carries) and its doorbell record; ring, when not 0, is where its
	// first 8 bytes go as the doorbell.
	post := func(q *qpUnderTest, ring uintptr) {
		slot := unsafe.Pointer(&q.buf[int(q.pi%sqCnt)*prm.WQEBBSize])
		clear(unsafe.Slice((*byte)(slot), prm.WQEBBSize))
		prm.PutCtrl(slot, q.pi, prm.OpNop, 0, q.qpn, prm.FlagCQUpdate, 4, 0, 0)
		q.pi++
		prm.Store32(unsafe.Pointer(&q.db[prm.DoorbellRecordSendB]), uint32(q.pi))
		if ring != 0 {
			require.Zero(t, copyOut(ring, unsafe.Slice((*byte)(slot), 8)))
		}
		require.NoError(t, f.RunUntilIdle())
	}

	for _, c := range []struct {
		name        string
		flags       uint32
		bfreg       uint32
		reg, other  uintptr
		secondBlock uintptr // the register's second buffer, 0 for none
	}{
		{"bfreg 0 of static page 0", 0, 0, static0 + 0x800, static0 + 0xa00, 0},
		{"dynamic bfreg 1", mlx5QPFlagBfreg, 1, dyn0 + 0xa00, dyn0 + 0x800, dyn0 + 0xb00},
	} {
		q := create(c.flags, c.bfreg)
		post(q, c.reg)
		require.Empty(t, reported(), "%s: the record, then the register", c.name)
		if c.secondBlock != 0 {
			post(q, c.secondBlock)
			require.Empty(t, reported(), "%s: the register's second buffer", c.name)
		}
		post(q, c.other)
		require.Equal(t, []sim.ViolationKind{sim.ViolationDoorbellRecordOnly}, reported(), "%s: another bfreg's register", c.name)
		post(q, 0)
		require.Equal(t, []sim.ViolationKind{sim.ViolationDoorbellRecordOnly}, reported(), "%s: the record alone", c.name)
	}

	// The library unmaps page 0: the model stops watching it before the
	// page goes, and a record moved alone is then not checked.
	q := create(0, 0)
	k.munmap(static0, page)
	require.NoError(t, rawMunmap(static0, page))
	post(q, 0)
	require.Empty(t, reported(), "the register is no longer watched")
	require.Zero(t, destroyQPCmd(k, a, fd, q.h))
}
