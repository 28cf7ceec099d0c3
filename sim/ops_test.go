package sim

import (
	"bytes"
	"math/rand"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

func fill(b []byte, seed int64) {
	r := rand.New(rand.NewSource(seed))
	r.Read(b)
}

func TestRCWriteInlineAndSGE(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := e.rcPair(qpOpts{})
	fill(e.mem(0, 300), 1)
	msg := []byte("inline payload crossing nothing")
	i0 := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(1000), e.mr2.RKey()), inlineSeg(msg))
	// Two SGEs gathered into one remote range.
	i1 := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(2000), e.mr2.RKey()),
		dataSeg(100, e.mr.LKey(), e.addr(0)), dataSeg(200, e.mr.LKey(), e.addr(100)))
	e.run()
	c1 := a.scq.drain()
	require.Len(t, c1, 2)
	require.Equal(t, prm.CQEReq, c1[0].op)
	require.Equal(t, prm.OpRdmaWrite, c1[0].sendOp)
	require.Equal(t, uint16(0), i0)
	require.Equal(t, uint16(2), i1, "ctrl+raddr+inline(31) spans two WQEBBs")
	require.Equal(t, i0, c1[0].counter)
	require.Equal(t, a.qp.QPN(), c1[0].qpn)
	require.Equal(t, i1, c1[1].counter)
	require.Equal(t, msg, e.mem2(1000, len(msg)))
	require.Equal(t, e.mem(0, 300), e.mem2(2000, 300))
	require.Zero(t, e.mem2(1000+len(msg), 1)[0])
	require.Empty(t, b.rcq.drain(), "a plain write makes no receive completion")
}

func TestRCWriteImmediate(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := e.rcPair(qpOpts{})
	rIdx := b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(0)))
	a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate|prm.FlagSolicited, 0xdeadbeef, raddrSeg(e.addr2(4096), e.mr2.RKey()), inlineSeg([]byte("hello")))
	e.run()
	r := b.rcq.one(t)
	require.Equal(t, prm.CQERespWrImm, r.op)
	require.Equal(t, uint32(0xdeadbeef), r.imm)
	require.Equal(t, uint32(5), r.byteCnt)
	require.Equal(t, rIdx, r.counter)
	require.Equal(t, b.qp.QPN(), r.qpn)
	require.True(t, r.solicited)
	require.Equal(t, []byte("hello"), e.mem2(4096, 5))
	require.Zero(t, e.mem2(0, 1)[0], "the receive buffer of a write-with-immediate is not written")
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
}

func TestRCSendVariants(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := e.rcPair(qpOpts{})
	payload := make([]byte, 1000)
	fill(payload, 7)
	copy(e.mem(0, 1000), payload)
	for i := 0; i < 3; i++ {
		b.postRecv(dataSeg(600, e.mr2.LKey(), e.addr2(i*2048)), dataSeg(600, e.mr2.LKey(), e.addr2(i*2048+1024)))
	}
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dataSeg(1000, e.mr.LKey(), e.addr(0)))
	a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, 0x01020304, inlineSeg([]byte("imm")))
	a.post(prm.OpSendInval, 0, prm.FlagCQUpdate, 0xabcd12, inlineSeg([]byte("inv")))
	e.run()
	got := b.rcq.drain()
	require.Len(t, got, 3)
	require.Equal(t, prm.CQERespSend, got[0].op)
	require.Equal(t, uint32(1000), got[0].byteCnt)
	require.Equal(t, a.qp.QPN(), got[0].srcQPN)
	require.Equal(t, payload[:600], e.mem2(0, 600))
	require.Equal(t, payload[600:], e.mem2(1024, 400))
	require.Equal(t, prm.CQERespSendImm, got[1].op)
	require.Equal(t, uint32(0x01020304), got[1].imm)
	require.Equal(t, []byte("imm"), e.mem2(2048, 3))
	require.Equal(t, prm.CQERespSendInv, got[2].op)
	require.Equal(t, uint32(0xabcd12), got[2].imm, "the invalidated rkey")
	for i, c := range got {
		require.Equal(t, uint16(i), c.counter)
	}
	req := a.scq.drain()
	require.Len(t, req, 3)
	require.Equal(t, []prm.Opcode{prm.OpSend, prm.OpSendImm, prm.OpSendInval}, []prm.Opcode{req[0].sendOp, req[1].sendOp, req[2].sendOp})
}

func TestRCRead(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{})
	fill(e.mem2(5000, 777), 3)
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(5000), e.mr2.RKey()),
		dataSeg(700, e.mr.LKey(), e.addr(0)), dataSeg(77, e.mr.LKey(), e.addr(8192)))
	e.run()
	c := a.scq.one(t)
	require.Equal(t, prm.OpRdmaRead, c.sendOp)
	require.Equal(t, uint32(777), c.byteCnt)
	require.Equal(t, e.mem2(5000, 700), e.mem(0, 700))
	require.Equal(t, e.mem2(5700, 77), e.mem(8192, 77))
}

func TestRCAtomics(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{})
	target := e.mem2(64, 8)
	host.PutUint64(target, 100)
	res := func(off int) uint64 { return host.Uint64(e.mem(off, 8)) }

	a.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(64), e.mr2.RKey()), atomicSeg(5, 0), dataSeg(8, e.mr.LKey(), e.addr(0)))
	a.post(prm.OpAtomicCS, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(64), e.mr2.RKey()), atomicSeg(999, 105), dataSeg(8, e.mr.LKey(), e.addr(8)))
	a.post(prm.OpAtomicCS, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(64), e.mr2.RKey()), atomicSeg(1, 105), dataSeg(8, e.mr.LKey(), e.addr(16)))
	e.run()
	got := a.scq.drain()
	require.Len(t, got, 3)
	for _, c := range got {
		require.Equal(t, prm.CQEReq, c.op)
		require.Equal(t, uint32(8), c.byteCnt)
	}
	require.Equal(t, uint64(100), res(0))
	require.Equal(t, uint64(105), res(8))
	require.Equal(t, uint64(999), res(16), "failed compare returns the current value")
	require.Equal(t, uint64(999), host.Uint64(target))

	// Masked compare-and-swap on 8 bytes: compare only the low byte, swap
	// only the high nibble.
	host.PutUint64(target, 0x1111_2222_3333_4455)
	a.post(prm.OpAtomicMaskedCS, prm.OpmodMaskedAtomic64, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(64), e.mr2.RKey()),
		atomicSeg(0xf000_0000_0000_0000, 0x0000_0000_0000_0055), atomicSeg(0xf000_0000_0000_0000, 0xff), dataSeg(8, e.mr.LKey(), e.addr(24)))
	// Masked fetch-and-add on 8 bytes with a field boundary after bit 7:
	// adding 1 to 0xff in the low byte does not carry into byte 1.
	a.post(prm.OpAtomicMaskedFA, prm.OpmodMaskedAtomic64, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(128), e.mr2.RKey()),
		atomicSeg(0x0101, 0x80), dataSeg(8, e.mr.LKey(), e.addr(32)))
	host.PutUint64(e.mem2(128, 8), 0x00ff)
	e.run()
	require.Len(t, a.scq.drain(), 2)
	require.Equal(t, uint64(0x1111_2222_3333_4455), res(24))
	require.Equal(t, uint64(0xf111_2222_3333_4455), host.Uint64(target))
	require.Equal(t, uint64(0x00ff), res(32))
	require.Equal(t, uint64(0x0100), host.Uint64(e.mem2(128, 8)), "low field wraps to 0, high field gets 1")

	// 4-byte masked atomics pack their operands into one segment.
	be.PutUint32(e.mem2(256, 4), 0xaabbccdd)
	cs32 := make([]byte, 16)
	be.PutUint32(cs32[0:], 0x11000000)  // swap
	be.PutUint32(cs32[4:], 0x000000dd)  // compare
	be.PutUint32(cs32[8:], 0xff000000)  // swap mask
	be.PutUint32(cs32[12:], 0x000000ff) // compare mask
	a.post(prm.OpAtomicMaskedCS, prm.OpmodMaskedAtomic32, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(256), e.mr2.RKey()), cs32, dataSeg(4, e.mr.LKey(), e.addr(40)))
	fa32 := make([]byte, 16)
	be.PutUint32(fa32[0:], 0x10)
	a.post(prm.OpAtomicMaskedFA, prm.OpmodMaskedAtomic32, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(256), e.mr2.RKey()), fa32, dataSeg(4, e.mr.LKey(), e.addr(44)))
	e.run()
	got = a.scq.drain()
	require.Len(t, got, 2)
	require.Equal(t, uint32(4), got[0].byteCnt)
	require.Equal(t, uint32(0xaabbccdd), be.Uint32(e.mem(40, 4)))
	require.Equal(t, uint32(0x11bbccdd), be.Uint32(e.mem(44, 4)))
	require.Equal(t, uint32(0x11bbcced), be.Uint32(e.mem2(256, 4)))
}

func TestNOPAndUnsignaled(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{})
	a.post(prm.OpNop, 0, 0, 0)
	a.post(prm.OpRdmaWrite, 0, 0, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte{1, 2, 3}))
	idx := a.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	e.run()
	c := a.scq.one(t)
	require.Equal(t, prm.OpNop, c.sendOp)
	require.Equal(t, idx, c.counter, "one signaled CQE names the last WQE")
	require.Equal(t, []byte{1, 2, 3}, e.mem2(0, 3))
}

// TestRingWraparound posts WQEs of varying size, inline data of every
// length up to max inline included, around a small ring many times.
func TestRingWraparound(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{sendDepth: 4, inline: 200})
	// A WQE of 256 bytes (rdma-core's 48 bytes of RC overhead, the inline
	// header and 200 bytes, rounded up to basic blocks) times 4.
	require.Equal(t, uint32(16), a.d.SQ.WQECnt)
	maxInline := int(a.d.MaxInline)
	src := make([]byte, 4096)
	fill(src, 11)
	for n := 0; n <= maxInline; n++ {
		off := (n * 97) % 3000
		a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(100000+n*8), e.mr2.RKey()), inlineSeg(src[off:off+n]))
		a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(500000+n*8), e.mr2.RKey()), dataSeg(uint32(n+1), e.mr.LKey(), e.addr(0)))
		e.run()
		got := a.scq.drain()
		require.Len(t, got, 2)
		require.Equal(t, prm.CQEReq, got[0].op, "n=%d", n)
		require.Equal(t, prm.CQEReq, got[1].op)
		require.Equal(t, src[off:off+n], e.mem2(100000+n*8, n), "inline n=%d pi=%d", n, a.pi)
	}
	require.Greater(t, int(a.pi), 10*int(a.d.SQ.WQECnt))
}

func TestScatterToCQE(t *testing.T) {
	for _, size := range []uint32{64, 128} {
		e := newEnv(t, Options{})
		a, b := e.rcPair(qpOpts{scatterToCQE: true, cqeSize: size})
		limit := 32
		format := uint8(prm.CQEFormatScatter32)
		if size == 128 {
			limit, format = 64, prm.CQEFormatScatter64
		}
		small := bytes.Repeat([]byte{0x5a}, limit)
		big := bytes.Repeat([]byte{0xa5}, limit+1)
		b.postRecv(dataSeg(256, e.mr2.LKey(), e.addr2(0)))
		b.postRecv(dataSeg(256, e.mr2.LKey(), e.addr2(512)))
		a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg(small))
		a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg(big))
		e.run()
		got := b.rcq.drain()
		require.Len(t, got, 2)
		require.Equal(t, format, got[0].format, "CQE size %d", size)
		require.Equal(t, small, got[0].scatter)
		require.Zero(t, e.mem2(0, 1)[0], "scattered payload is not written to the buffer")
		require.Equal(t, uint8(prm.CQEFormatNone), got[1].format)
		require.Equal(t, big, e.mem2(512, len(big)))
	}
}

func TestSRQFreeList(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 4, 2)
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	a2 := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
	b2 := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
	e.connectRC(a, b, 7, 1)
	e.connectRC(a2, b2, 7, 1)
	// Many rounds of post / receive / free through the one SRQ.
	for round := 0; round < 40; round++ {
		var posted []uint16
		for i := 0; i < 3; i++ {
			posted = append(posted, srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(int(srq.head)*64))))
		}
		a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte{byte(round), 1}))
		a2.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte{byte(round), 2}))
		a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, uint32(round), inlineSeg([]byte{byte(round), 3}))
		e.run()
		got := append(b.rcq.drain(), b2.rcq.drain()...)
		require.Len(t, got, 3)
		seen := map[uint16]bool{}
		for _, c := range got {
			require.Equal(t, srq.srq.SRQN(), c.srqn)
			seen[c.counter] = true
			require.Equal(t, byte(round), e.mem2(int(c.counter)*64, 1)[0])
			srq.free(c.counter)
		}
		for _, p := range posted {
			require.True(t, seen[p], "WQE %d consumed", p)
		}
	}
}

// TestSRQFreeListOutOfOrder: the device takes SRQ WQEs in free-list order,
// following next_wqe_index, not in index order. WQEs retired in reverse
// (the application held on to the buffers) make the list 3→2→1, and the
// next receives complete with those WQE counters into those WQEs' buffers.
func TestSRQFreeListOutOfOrder(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 3, 1)
	require.Equal(t, uint32(4), srq.d.WQECnt)
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
	e.connectRC(a, b, 7, 1)

	// Round 1: WQEs 0, 1, 2 in order.
	for k := 0; k < 3; k++ {
		require.Equal(t, uint16(k), srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(k*64))))
		a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte{'a' + byte(k)}))
	}
	e.run()
	require.Len(t, a.scq.drain(), 3)
	got := b.rcq.drain()
	require.Len(t, got, 3)
	for k, c := range got {
		require.Equal(t, uint16(k), c.counter)
	}
	for k := 2; k >= 0; k-- {
		srq.free(uint16(k))
	}

	// Round 2: the free list runs 3→2→1→0; each post takes its head and
	// gets a buffer of its own, away from the buffers of round 1.
	var posted []uint16
	for k := 0; k < 3; k++ {
		posted = append(posted, srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(1024+k*64))))
	}
	require.Equal(t, []uint16{3, 2, 1}, posted)
	for k := 0; k < 3; k++ {
		a.post(prm.OpSendImm, 0, prm.FlagCQUpdate, uint32(k), inlineSeg([]byte{'x' + byte(k)}))
	}
	e.run()
	require.Len(t, a.scq.drain(), 3)
	got = b.rcq.drain()
	require.Len(t, got, 3)
	for k, c := range got {
		require.Equal(t, prm.CQERespSendImm, c.op)
		require.Equal(t, uint32(k), c.imm)
		require.Equal(t, posted[k], c.counter, "receive %d", k)
		require.Equal(t, srq.srq.SRQN(), c.srqn)
		require.Equal(t, []byte{'x' + byte(k)}, e.mem2(1024+k*64, 1), "receive %d lands in the buffer of WQE %d", k, posted[k])
	}
	require.Equal(t, []byte("abc"), []byte{e.mem2(0, 1)[0], e.mem2(64, 1)[0], e.mem2(128, 1)[0]}, "round 1's buffers are not written again")
}

// TestWriteOfOneSGECopiesDirectly: an RDMA_WRITE of one SGE is copied from
// the requester's region straight into the responder's, without gathering
// it into the model's scratch buffer first: a 2 MiB write alternating with
// a small write of two SGEs (whose gather leaves the model no large
// scratch buffer) allocates nothing, and both land.
func TestWriteOfOneSGECopiesDirectly(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{sendDepth: 64})
	const size = 2 << 20
	region := func(pd *ctx.ProtectionDomain) (*ctx.Buffer, *ctx.MemoryRegion) {
		buf, err := ctx.AllocBuffer(size, ctx.BufferOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = buf.Close() })
		mr, err := pd.RegisterBuffer(buf, allAccess)
		require.NoError(t, err)
		return buf, mr
	}
	src, smr := region(e.pd)
	dst, dmr := region(e.pd2)
	fill(src.Bytes(), 7)
	big := a.build(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(uint64(dmr.Addr()), dmr.RKey()),
		dataSeg(size, smr.LKey(), uint64(smr.Addr())))
	small := a.build(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()),
		dataSeg(8, smr.LKey(), uint64(smr.Addr())+8), dataSeg(8, smr.LKey(), uint64(smr.Addr())))
	post := func(w []byte) {
		w[1], w[2] = byte(a.pi>>8), byte(a.pi)
		a.write(w)
		a.ring()
	}
	both := func() {
		post(big)
		post(small)
		require.NoError(t, e.f.RunUntilIdle())
		for range 2 {
			c, ok := a.scq.poll()
			require.True(t, ok)
			require.Equal(t, prm.CQEReq, c.op)
		}
	}
	both()
	require.Equal(t, src.Bytes(), dst.Bytes())
	require.Equal(t, append(slices.Clone(src.Bytes()[8:16]), src.Bytes()[:8]...), e.mem2(0, 16))
	clear(dst.Bytes())
	require.Zero(t, testing.AllocsPerRun(10, both))
	require.Equal(t, src.Bytes(), dst.Bytes())
}
