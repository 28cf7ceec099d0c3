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
// of others near them (a READ, a NOP, an SGE instead of inline data, a
// fence behind segments in flight), with and without segments in flight
// and WQEs behind, wireSendSmall either declines and changes nothing, or
// writes the record wireSendSeg writes for the same WQE, byte for byte,
// and leaves the QP's requester state as wireSendSeg does. So do the two
// with the peer's ring full, and with the peer gone. It must take the
// small WQEs, or it would not be the fast path it is for.
func TestWireSendSmallAgrees(t *testing.T) {
	e1, e2, a, _ := sharedRCPair(t)
	holdEngine(t, e1.f)
	holdEngine(t, e2.f)
	f := e1.f
	f.mu.Lock()
	// Unlocked at the end of each part, the failures' included.
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			f.mu.Unlock()
		}
	}
	defer unlock()
	q := f.qps[a.qp.QPN()]
	slot := f.wireSlot(q)
	require.GreaterOrEqual(t, slot, 0)
	p := f.shm.peer(slot)
	require.NotNil(t, p)
	from := f.shm.slot
	timeout := int64(ctx.AckTimeoutDuration(q.attr.Timeout))
	rng := rand.New(rand.NewPCG(11, 25))

	// post writes a WQE of op (inline data, or an SGE when sge) and
	// readies q to send it next, with inFlight segments before it.
	post := func(op prm.Opcode, fm uint8, data []byte, sge bool, inFlight int) wireQP {
		var segs [][]byte
		if op.HasRaddr() {
			segs = append(segs, raddrSeg(rng.Uint64(), rng.Uint32()))
		}
		if sge {
			segs = append(segs, dataSeg(uint32(len(data)), e1.mr.LKey(), e1.addr(0)))
		} else {
			segs = append(segs, inlineSeg(data))
		}
		at := a.write(a.build(op, 0, fm, rng.Uint32(), segs...))
		q.sqCI, q.sqPI = at, a.pi
		w := q.wire
		w.segHead, w.segN = rng.IntN(wireWindow), inFlight
		w.deadline = rng.Int64N(1 << 40)
		w.next = rng.Uint32() & ctx.MaxPSN
		w.sendIdx, w.sendOff = at, 0
		return w
	}
	oneLine := 0 // one-line records compared
	// both sends the WQE from state before with each path and requires
	// the same outcome.
	both := func(i int, before wireQP) (taken bool) {
		q.wire = before
		tail := atomic.LoadUint64(p.tail(from))
		sent, stop := f.wireSendSmall(q, slot, timeout)
		if stop == wireNotSmall {
			require.Equal(t, before, q.wire, "WQE %d: declined, and changed the QP's state", i)
			require.Equal(t, tail, atomic.LoadUint64(p.tail(from)), "WQE %d: declined, and wrote a record", i)
			return false
		}
		small, smallState := lastRecord(t, p, from, tail), q.wire
		q.wire = before
		tail = atomic.LoadUint64(p.tail(from))
		sent2, stop2 := f.wireSendNext(q, slot, timeout)
		general, generalState := lastRecord(t, p, from, tail), q.wire
		require.Equal(t, sent2, sent, "WQE %d: sent", i)
		require.Equal(t, stop2, stop, "WQE %d: what stops the next", i)
		if len(small) > 4 && small[4] == wireSmall {
			// A one-line record: what the consumer takes from it,
			// the header it expands to and the payload, is the
			// general record's.
			require.True(t, q.oneLine())
			oneLine++
			gh, gp := recordView(t, general, f.shm.gen, p.gen)
			sh, sp := recordView(t, small, f.shm.gen, p.gen)
			require.Equal(t, gh, sh, "WQE %d: the one-line record's header differs", i)
			require.Equal(t, gp, sp, "WQE %d: the one-line record's payload differs", i)
		} else {
			require.False(t, sent && len(small) > 0 && small[4] == wireRequest && before.sendOff == 0 &&
				int(smallHdrOf(small).Seg) <= wireSmallMax && q.oneLine(), "WQE %d: a small request in two lines", i)
			require.Equal(t, general, small, "WQE %d: the records differ", i)
		}
		if before.segN == 0 && sent {
			// The ACK timer starts: a clock reading.
			require.NotEqual(t, before.deadline, smallState.deadline)
			require.NotEqual(t, before.deadline, generalState.deadline)
			smallState.deadline, generalState.deadline = 0, 0
		}
		require.Equal(t, generalState, smallState, "WQE %d: the requester states differ", i)
		return true
	}

	ops := []prm.Opcode{prm.OpSend, prm.OpSendImm, prm.OpRdmaWrite, prm.OpRdmaWriteImm, prm.OpRdmaRead, prm.OpNop}
	took := 0
	for i := 0; i < 3000; i++ {
		op := ops[rng.IntN(len(ops))]
		data := make([]byte, 1+rng.IntN(200))
		if rng.IntN(4) == 0 {
			data = make([]byte, 1+rng.IntN(wireSmallMax+2)) // one line, and just over
		}
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		sge := op == prm.OpRdmaRead || rng.IntN(8) == 0
		fm := uint8(rng.IntN(256))
		inFlight := rng.IntN(2) * rng.IntN(4)
		// The path: any SL, and now and then a GRH or a GID, with
		// which a request never goes in one line.
		path := q.attr.Path
		q.attr.Path.SL = uint8(rng.IntN(16))
		switch rng.IntN(16) {
		case 0:
			q.attr.Path.GlobalRoute = true
		case 1:
			q.attr.Path.DGID[15] = 1
		}
		before := post(op, fm, data, sge, inFlight)
		if rng.IntN(4) == 0 {
			// A WQE behind it, not sent with it.
			a.write(a.build(prm.OpSend, 0, 0, 0, inlineSeg(data[:1])))
			q.sqPI = a.pi
		}
		var w sendWQE
		want := f.parseSendSmall(q, &w, before.sendIdx) && !(inFlight > 0 && fm&prm.FlagFenceMask != 0)
		require.Equal(t, want, both(i, before), "WQE %d (%v, %d bytes, fm %#x, %d in flight): taken", i, op, len(data), fm, inFlight)
		q.attr.Path = path
		if want {
			took++
		}
	}
	t.Logf("%d of 3000 WQEs taken, %d as one-line records", took, oneLine)
	require.Greater(t, took, 600, "small WQEs taken by wireSendSmall")
	require.Greater(t, oneLine, 100, "one-line records")

	// The peer's ring full: neither path writes, both stop.
	before := post(prm.OpRdmaWriteImm, 0, []byte("full"), false, 0)
	filled := 0
	for {
		q.wire = before
		if _, stop := f.wireSendSmall(q, slot, timeout); stop == wireStopRing {
			break
		}
		filled++
		require.Less(t, filled, ringDataSize/wireAlign, "the ring never filled")
	}
	tail := atomic.LoadUint64(p.tail(from))
	q.wire = before
	sent, stop := f.wireSendNext(q, slot, timeout)
	require.False(t, sent)
	require.Equal(t, wireStopRing, stop)
	q.wire = before
	sent, stop = f.wireSendSmall(q, slot, timeout)
	require.False(t, sent)
	require.Equal(t, wireStopRing, stop)
	require.Equal(t, before, q.wire, "a full ring changed the QP's state")
	require.Equal(t, tail, atomic.LoadUint64(p.tail(from)), "a record past a full ring")
	unlock()

	// The peer gone: the message is lost with it, and in flight until
	// its timer runs out, on both paths.
	require.NoError(t, e2.f.Close())
	f.mu.Lock()
	unlocked = false
	require.False(t, f.wirePeerAlive(slot))
	before = post(prm.OpSend, 0, []byte("gone"), false, 0)
	q.wire = before
	sent, stop = f.wireSendSmall(q, slot, timeout)
	require.True(t, sent)
	require.Equal(t, wireGo, stop)
	smallState := q.wire
	q.wire = before
	sent, stop = f.wireSendNext(q, slot, timeout)
	require.True(t, sent)
	require.Equal(t, wireGo, stop)
	require.Equal(t, 1, smallState.segN)
	smallState.deadline, q.wire.deadline = 0, 0
	require.Equal(t, q.wire, smallState)
}

// smallHdrOf returns the wireHdr at the front of rec (lastRecord's bytes
// of a record that is not one line).
func smallHdrOf(rec []byte) wireHdr {
	return *(*wireHdr)(unsafe.Pointer(&rec[0]))
}

// recordView returns what a consumer takes from a request's record (rec,
// lastRecord's bytes): its header, Len aside, and its payload; a one-line
// record's as expanded, whose generations must be the low bits of
// srcGen and dstGen.
func recordView(t *testing.T, rec []byte, srcGen, dstGen uint64) (wireHdr, []byte) {
	t.Helper()
	if rec[4] == wireSmall {
		require.Len(t, rec, wireAlign-ringMarkSize)
		c := *(*wireSmallHdr)(unsafe.Pointer(&rec[0]))
		require.Equal(t, uint32(srcGen), c.SrcGen)
		require.Equal(t, uint32(dstGen), c.DstGen)
		var h wireHdr
		c.expand(&h, srcGen, dstGen)
		h.Len = 0
		return h, append([]byte(nil), c.Data[:h.Seg]...)
	}
	h := smallHdrOf(rec)
	h.Len = 0
	return h, append([]byte(nil), rec[wireHdrSize:wireHdrSize+int(h.Seg)]...)
}

// lastRecord returns the bytes, mark aside, of the last record written in
// ring from of p since the tail was at, pads skipped; nil when there is
// none.
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
	return rec
}
