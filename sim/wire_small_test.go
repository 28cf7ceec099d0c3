package sim

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestWireSendSmallAgrees: for WQEs of the shapes small messages take and
// of others near them, wireSendSmall either declines or writes the record
// wireSendSeg writes for the same WQE, byte for byte, and leaves the QP's
// requester state as wireSendSeg does (the ACK deadline, a clock reading,
// aside). It must take the small WQEs posted alone, or it would not be the
// fast path it is for.
func TestWireSendSmallAgrees(t *testing.T) {
	e1, e2, a, _ := sharedRCPair(t)
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	f := e1.f
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.qps[a.qp.QPN()]
	slot := f.wireSlot(q)
	require.GreaterOrEqual(t, slot, 0)
	p := f.shm.peer(slot)
	require.NotNil(t, p)
	timeout := int64(ctx.AckTimeoutDuration(q.attr.Timeout))
	rng := rand.New(rand.NewPCG(11, 25))
	ops := []prm.Opcode{prm.OpSend, prm.OpSendImm, prm.OpRdmaWrite, prm.OpRdmaWriteImm, prm.OpRdmaRead, prm.OpNop}
	took := 0
	for i := 0; i < 3000; i++ {
		op := ops[rng.IntN(len(ops))]
		var segs [][]byte
		if op.HasRaddr() {
			segs = append(segs, raddrSeg(rng.Uint64(), rng.Uint32()))
		}
		data := make([]byte, 1+rng.IntN(200))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		if op == prm.OpRdmaRead || rng.IntN(8) == 0 {
			segs = append(segs, dataSeg(uint32(len(data)), e1.mr.LKey(), e1.addr(0)))
		} else {
			segs = append(segs, inlineSeg(data))
		}
		fm := uint8(rng.IntN(256)) &^ prm.FlagFenceMask
		at := a.write(a.build(op, 0, fm, rng.Uint32(), segs...))
		q.sqCI, q.sqPI = at, a.pi
		if rng.IntN(8) == 0 {
			// A second WQE posted behind it: the general path sends both.
			a.write(a.build(prm.OpSend, 0, 0, 0, inlineSeg(data[:1])))
			q.sqPI = a.pi
		}
		before := q.wire
		before.segHead = rng.IntN(wireWindow)
		before.next = rng.Uint32() & ctx.MaxPSN
		before.sendIdx, before.sendOff = at, 0

		q.wire = before
		from := atomic.LoadUint64(p.tail(f.shm.slot))
		if !f.wireSendSmall(q, slot, timeout) {
			require.Equal(t, before, q.wire, "WQE %d: declined, and changed the QP's state", i)
			require.Equal(t, from, atomic.LoadUint64(p.tail(f.shm.slot)), "WQE %d: declined, and wrote a record", i)
			var w sendWQE
			require.False(t, f.parseSendSmall(q, &w, at) && q.sqPI-at == w.bbs,
				"WQE %d (%v, %d bytes inline): a small WQE posted alone was declined", i, op, len(data))
			continue
		}
		took++
		small, smallState := lastRecord(t, p, f.shm.slot, from), q.wire

		q.wire = before
		from = atomic.LoadUint64(p.tail(f.shm.slot))
		var w sendWQE
		w.sg = f.sgScratch[:0]
		sent, stop := f.wireSendSeg(q, &w, slot, timeout)
		f.sgScratch = w.sg[:0]
		require.True(t, sent, "WQE %d: the general path did not send", i)
		require.Equal(t, wireGo, stop, "WQE %d", i)
		general, generalState := lastRecord(t, p, f.shm.slot, from), q.wire

		require.Equal(t, general, small, "WQE %d (%v, %d bytes): the records differ", i, op, len(data))
		require.NotZero(t, smallState.deadline)
		require.NotZero(t, generalState.deadline)
		smallState.deadline, generalState.deadline = 0, 0
		require.Equal(t, generalState, smallState, "WQE %d (%v): the requester states differ", i, op)
		q.wire = before
	}
	require.Greater(t, took, 1000, "small WQEs taken by wireSendSmall")
	t.Logf("%d WQEs taken", took)
}

// lastRecord returns the bytes, mark aside, of the last record written in
// ring from of p since the tail was at, pads skipped.
func lastRecord(t *testing.T, p *ringFile, from int, at uint64) []byte {
	t.Helper()
	tail := atomic.LoadUint64(p.tail(from))
	data := p.data(from)
	var rec []byte
	for at < tail {
		pos := at & (ringDataSize - 1)
		h := (*wireHdr)(unsafe.Pointer(&data[pos+ringMarkSize]))
		require.Equal(t, at+1, atomic.LoadUint64(p.mark(from, at)), "record at %d not published", at)
		if h.Kind != wirePad {
			rec = append([]byte(nil), data[pos+ringMarkSize:pos+uint64(h.Len)]...)
		}
		at += uint64(h.Len)
	}
	require.NotNil(t, rec, "no record written")
	return rec
}
