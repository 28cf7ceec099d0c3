package sim

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// inboundWorld is a victim process's Fabric on a shared fabric, with a
// requester on another Fabric of it, and a raw member that writes what it
// likes in the victim's inbound file. The victim has an RC QP connected to
// the requester (with a READ and a WRITE of its own in flight to it), a DCT
// on an SRQ and a UD QP, each with receives posted into one registered
// page between canary pages that must never change.
type inboundWorld struct {
	victim     *env
	rc, dct    *testQP
	ud         *testQP
	hostile    *shmFabric
	ring       *ringFile // the victim's inbound file, as the hostile maps it
	buf        *ctx.Buffer
	mr         *ctx.MemoryRegion
	lid        uint16
	psnRC      uint32 // the PSN the victim's RC responder expects
	psnReq     uint32 // the PSN of the victim's first request in flight
	dcKey      uint64
	qkey       uint32
	hostileQPN uint32 // the RC QP's remote QP, the first of the hostile's range
}

func newInboundWorld(t *testing.T) *inboundWorld {
	e2 := newEnv(t, Options{Mode: Engine, Fabric: testFabricName(t)})
	e2.allowViolations = true
	w := &inboundWorld{victim: e2, dcKey: 0xfeed, qkey: 0x1111, lid: lidOf(t, e2.c)}
	// The hostile is the RC QP's peer: a process speaks for its own
	// QPs only (a record in another slot's QPN is dropped unread).
	var err error
	w.hostile, err = joinShared(e2.f.shm.name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	t.Cleanup(w.hostile.leave)
	w.hostileQPN, _ = slotQPNRange(w.hostile.slot)
	w.build(t, uint16(w.hostile.slot*shmMaxDevices+1))
	w.ring = w.hostile.peer(e2.f.shm.slot)
	require.NotNil(t, w.ring)
	w.ring.announce(w.hostile.slot)
	return w
}

// build gives the victim its QPs, the RC QP connected to w.hostileQPN at
// LID dlid, and its registered page between canaries; it holds the
// victim's engine (the test runs its rounds) and sends the RC QP's READ
// and WRITE.
func (w *inboundWorld) build(t *testing.T, dlid uint16) {
	e2 := w.victim
	q := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	w.rc = q
	require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
	require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: w.hostileQPN, PathMTU: ctx.MTU4096,
		Path: ctx.AddressAttr{DLID: dlid}, MinRNRTimer: 1, MaxDestRdAtomic: 16}))
	require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 16}))
	var err error
	w.buf, err = ctx.AllocBuffer(3*4096, ctx.BufferOptions{Guard: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.buf.Close() })
	mem := w.buf.Bytes()
	for i := range mem {
		mem[i] = canary
	}
	w.mr, err = e2.pd.RegisterMemory(mem[4096:8192], allAccess)
	require.NoError(t, err)
	base := uint64(w.mr.Addr())

	srq := e2.newSRQ(e2.pd, 16, 1)
	w.dct = e2.dct(e2.pd, srq, w.dcKey)
	w.ud = e2.udQP(e2.pd, w.qkey, qpOpts{})
	for i := 0; i < 4; i++ {
		q.postRecv(dataSeg(256, w.mr.LKey(), base+uint64(i)*256))
		srq.post(dataSeg(256, w.mr.LKey(), base+1024+uint64(i)*256))
		w.ud.postRecv(dataSeg(256, w.mr.LKey(), base+2048+uint64(i)*256))
	}
	holdEngine(t, e2.f)

	e2.f.mu.Lock()
	w.psnRC = e2.f.qpByNum(q.qp.QPN()).wire.resp.expect
	e2.f.mu.Unlock()
	// A READ into the last quarter of the page and a WRITE from it, in
	// flight to the hostile (which never serves them): its answers may
	// name them.
	q.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(0x10000, 0x1234), dataSeg(64, w.mr.LKey(), base+3072))
	q.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(0x10040, 0x1234), dataSeg(64, w.mr.LKey(), base+3072+64))
	w.round()
	e2.f.mu.Lock()
	ws := &e2.f.qpByNum(q.qp.QPN()).wire
	require.Equal(t, 2, ws.segN, "the victim's requests are in flight")
	w.psnReq = ws.segs[ws.segHead].psn
	e2.f.mu.Unlock()
}

// round runs one round of the victim's model.
func (w *inboundWorld) round() {
	f := w.victim.f
	f.mu.Lock()
	f.stepLocked()
	f.mu.Unlock()
}

// canariesIntact reports whether the pages around the region are as they
// were set.
func (w *inboundWorld) canariesIntact() bool {
	m := w.buf.Bytes()
	for _, r := range [][]byte{m[:4096], m[8192:]} {
		for _, c := range r {
			if c != canary {
				return false
			}
		}
	}
	return true
}

// fuzzReader hands out the fuzz input a few bytes at a time, zeros once
// it is used up.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) u8() uint8 {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *fuzzReader) u16() uint16 { return uint16(r.u8()) | uint16(r.u8())<<8 }
func (r *fuzzReader) u32() uint32 { return uint32(r.u16()) | uint32(r.u16())<<16 }
func (r *fuzzReader) u64() uint64 { return uint64(r.u32()) | uint64(r.u32())<<32 }

// record builds the next record's header from r: each field either what
// the victim's objects expect (so that the checks are passed and the
// record reaches execution) or whatever the input says.
func (w *inboundWorld) record(r *fuzzReader) (wireHdr, int) {
	sel := r.u64() // one bit or two per field: expected or arbitrary
	bit := func(n uint) uint64 { v := sel & (1<<n - 1); sel >>= n; return v }
	var h wireHdr
	h.Kind = wireRequest
	switch bit(2) {
	case 1:
		h.Kind = wireResponse
	case 2:
		h.Kind = wireUD
	case 3:
		h.Kind = r.u8()
	}
	h.Op, h.Status, h.FM = r.u8(), r.u8()%4, r.u8()
	dsts := []uint32{w.rc.qp.QPN(), w.dct.qp.QPN(), w.ud.qp.QPN(), r.u32()}
	h.DstQPN = dsts[bit(2)]
	srcs := []uint32{w.hostileQPN, w.hostileQPN + 1, r.u32() & ctx.MaxPSN, r.u32()}
	h.SrcQPN = srcs[bit(2)]
	delta := uint32(int32(int8(r.u8())))
	switch bit(2) {
	case 0:
		h.PSN = (w.psnRC + delta) & ctx.MaxPSN
	case 1:
		h.PSN = (w.psnReq + delta) & ctx.MaxPSN
	default:
		h.PSN = r.u32()
	}
	h.Imm = r.u32()
	base := uint64(w.mr.Addr())
	if bit(1) == 0 {
		h.RAddr = base + uint64(int64(int16(r.u16()))) // near the region, inside or out
	} else {
		h.RAddr = r.u64()
	}
	if bit(1) == 0 {
		h.RKey = w.mr.RKey()
	} else {
		h.RKey = r.u32()
	}
	h.Total = uint32(r.u16())
	if bit(1) == 1 {
		h.Total = r.u32()
	}
	h.Off, h.Seg = uint32(r.u16()), uint32(r.u16())
	if bit(1) == 1 {
		h.Off, h.Seg = r.u32(), r.u32()
	}
	h.DLID = w.lid
	if bit(1) == 1 {
		h.DLID = r.u16()
	}
	h.SL, h.GRH, h.L3, h.ASize, h.Synd, h.RNR = r.u8()%16, r.u8()%2, r.u8()%4, r.u8(), r.u8(), r.u8()
	if bit(1) == 1 {
		h.GRH = 1
		for i := range h.DGID {
			h.DGID[i] = r.u8()
		}
	}
	h.SrcLID, h.Flags, h.Epoch = r.u16(), r.u16()%4, r.u32()%4
	h.DCKey = w.dcKey
	if bit(1) == 1 {
		h.DCKey = r.u64()
	}
	if h.Kind == wireUD {
		// A UD datagram's qkey travels in RKey.
		if bit(1) == 0 {
			h.RKey = w.qkey
		}
	}
	return h, int(r.u16() % 2048)
}

// publish writes h and n bytes of payload (from r) as the hostile's next
// record in the victim's file; with malformed, the length field is what
// the input says. It reports false when the ring has no room.
func (w *inboundWorld) publish(h wireHdr, n int, r *fuzzReader, malformed bool) bool {
	rec, at, err := w.ring.reserve(w.hostile.slot, ringRecHdr+n)
	if err != nil {
		return false
	}
	h.Len = uint32(len(rec))
	if malformed {
		h.Len = r.u32()
	}
	h.SrcGen, h.DstGen = w.hostile.gen, w.ring.gen
	*(*wireHdr)(unsafe.Pointer(&rec[ringMarkSize])) = h
	for i := range rec[ringRecHdr:] {
		rec[ringRecHdr+i] = r.u8()
	}
	w.ring.commit(w.hostile.slot, at, len(rec))
	return true
}

// publishOneLine writes h as the hostile's next record in the one-line
// form (wireSmallHdr), its kind and length those of a one-line record, its
// payload length and SL from r (any four bits each), with its own
// generations unless r says otherwise; with malformed, the length field is
// what the input says. n is unused (the payload is the line's 4 bytes). It
// reports false when the ring has no room.
func (w *inboundWorld) publishOneLine(h wireHdr, _ int, r *fuzzReader, malformed bool) bool {
	rec, at, err := w.ring.reserve(w.hostile.slot, wireAlign)
	if err != nil {
		return false
	}
	c := wireSmallHdr{Len: wireAlign, Kind: wireSmall, Op: h.Op, FM: h.FM, NSL: r.u8(),
		SrcGen: uint32(w.hostile.gen), DstGen: uint32(w.ring.gen),
		DstQPN: h.DstQPN, SrcQPN: h.SrcQPN, PSN: h.PSN, Imm: h.Imm, RAddr: h.RAddr, RKey: h.RKey,
		DLID: h.DLID, SrcLID: h.SrcLID, Epoch: h.Epoch}
	if malformed {
		c.Len = r.u32()
	}
	if r.u8()&7 == 0 {
		c.SrcGen, c.DstGen = r.u32(), r.u32()
	}
	for i := range c.Data {
		c.Data[i] = r.u8()
	}
	*(*wireSmallHdr)(unsafe.Pointer(&rec[ringMarkSize])) = c
	w.ring.commit(w.hostile.slot, at, len(rec))
	return true
}

// FuzzSharedInbound: a member of a shared fabric writes arbitrary records
// in the ring it has in another process's inbound file, with the fields
// that pass the checks (QPNs, PSNs, keys, the region's address) mixed in,
// and the victim runs rounds. The victim must not panic, must not write a
// byte outside its registered page, and must end with the ring drained.
func FuzzSharedInbound(f *testing.F) {
	seed := func(sel uint64, rest ...byte) []byte {
		b := make([]byte, 8, 8+len(rest))
		binary.LittleEndian.PutUint64(b, sel)
		return append(b, rest...)
	}
	// A SEND to the RC QP, a WRITE near its region, a response to the
	// victim's READ, a DCT request with the key, a UD datagram.
	f.Add(seed(0, byte(prm.OpSend), 0, 0))
	f.Add(seed(0, byte(prm.OpRdmaWrite), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf0, 0x0f, 0x40, 0))
	f.Add(seed(1|1<<6, byte(prm.OpRdmaRead), wireAck, 0))
	f.Add(seed(1<<2, byte(prm.OpRdmaWrite), 0, 0))
	f.Add(seed(2|2<<2, byte(prm.OpSend), 0, 0))
	f.Add(seed(0xffffffffffffffff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
	// The first two as one-line records.
	f.Add(append([]byte{0x40}, seed(0, byte(prm.OpSend), 0, 0)...))
	f.Add(append([]byte{0x40}, seed(0, byte(prm.OpRdmaWrite), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf0, 0x0f, 0x40, 0)...))
	f.Fuzz(func(t *testing.T, in []byte) {
		w := newInboundWorld(t)
		r := &fuzzReader{b: in}
		for i := 0; i < 8 && len(r.b) > 0; i++ {
			flags := r.u8()
			h, n := w.record(r)
			publish := w.publish
			if flags&0x40 != 0 {
				publish = w.publishOneLine
			}
			if !publish(h, n, r, flags&0x80 != 0) {
				break
			}
			for j := 0; j < int(flags&3)+1; j++ {
				w.round()
			}
		}
		// A drain stops at a completion, so that a poller sees it: a
		// round for each record at most.
		for j := 0; j < 16 && w.victim.f.shm.in.pending(w.victim.f.shm.slot); j++ {
			w.round()
		}
		require.True(t, w.canariesIntact(), "the victim wrote outside its registered page")
		require.False(t, w.victim.f.shm.in.pending(w.victim.f.shm.slot), "records left in the victim's ring")
	})
}

// TestSharedInboundWorld: the records FuzzSharedInbound builds from
// expected fields reach execution: a SEND from the RC QP's peer lands in
// its receive, a WRITE with the DC key through the DCT lands in the
// region, and an ACK of the victim's WRITE in flight completes it.
func TestSharedInboundWorld(t *testing.T) {
	w := newInboundWorld(t)
	zero := &fuzzReader{b: make([]byte, 8)} // every field as expected
	h, _ := w.record(zero)
	h.Op, h.Total, h.Seg, h.Off = uint8(prm.OpSend), 16, 16, 0
	require.True(t, w.publish(h, 16, &fuzzReader{b: []byte("sixteen bytes...")}, false))
	w.round()
	c, ok := w.rc.rcq.poll()
	require.True(t, ok, "no receive CQE for the SEND")
	require.Equal(t, prm.CQERespSend, c.op)
	require.Equal(t, uint32(16), c.byteCnt)
	page := w.buf.Bytes()[4096:8192]
	require.Equal(t, "sixteen bytes...", string(page[:16]))

	// The next SEND as a one-line record (wireSmallHdr): delivered the
	// same way; before it, one whose generations are no process's is
	// dropped (its payload length 4, its generations read as 0).
	h, _ = w.record(&fuzzReader{b: make([]byte, 8)})
	h.Op, h.PSN = uint8(prm.OpSend), (w.psnRC+1)&ctx.MaxPSN
	require.True(t, w.publishOneLine(h, 0, &fuzzReader{b: []byte{4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'o', 'l', 'd', '!'}}, false))
	w.round()
	_, ok = w.rc.rcq.poll()
	require.False(t, ok, "a one-line record of another generation was taken")
	require.True(t, w.publishOneLine(h, 0, &fuzzReader{b: []byte{15, 1, 'l', 'o', 'n', 'g'}}, false))
	w.round() // a payload longer than the line holds: dropped
	_, ok = w.rc.rcq.poll()
	require.False(t, ok, "a one-line record of 15 bytes was taken")
	require.True(t, w.publishOneLine(h, 0, &fuzzReader{b: []byte{4, 1, 'f', 'o', 'u', 'r'}}, false))
	w.round()
	c, ok = w.rc.rcq.poll()
	require.True(t, ok, "no receive CQE for the one-line SEND")
	require.Equal(t, prm.CQERespSend, c.op)
	require.Equal(t, uint32(4), c.byteCnt)

	h, _ = w.record(&fuzzReader{b: binary.LittleEndian.AppendUint64(nil, 1<<2)}) // the DCT
	h.Op, h.Total, h.Seg, h.Off, h.Flags, h.Epoch = uint8(prm.OpRdmaWrite), 8, 8, 0, wireFirst, 1
	h.RAddr = uint64(w.mr.Addr()) + 512
	require.True(t, w.publish(h, 8, &fuzzReader{b: []byte("dc write")}, false))
	w.round()
	require.Equal(t, "dc write", string(page[512:520]))

	h, _ = w.record(&fuzzReader{b: binary.LittleEndian.AppendUint64(nil, 1|1<<6)}) // an answer to the victim's READ
	h.Op, h.Status, h.Total, h.Seg, h.Off, h.Flags = uint8(prm.OpRdmaRead), wireAck, 64, 64, 0, 0
	require.True(t, w.publish(h, 64, &fuzzReader{b: bytes.Repeat([]byte{0x5a}, 64)}, false))
	w.round()
	c, ok = w.rc.scq.poll()
	require.True(t, ok, "no send CQE for the READ its answer completes")
	require.Equal(t, prm.CQEReq, c.op)
	require.Equal(t, bytes.Repeat([]byte{0x5a}, 64), page[3072:3136])
	require.True(t, w.canariesIntact())
}
