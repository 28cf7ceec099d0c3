package wqebuilder_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

func transportsFor(op string) []transport {
	switch op {
	case "SEND", "SEND_IMM":
		return []transport{rc, dc, ud}
	}
	return []transport{rc, dc}
}

func (t transport) String() string { return [...]string{"RC", "DC", "UD"}[t] }

func (t transport) prm() prm.Transport {
	return [...]prm.Transport{prm.TransportRC, prm.TransportDC, prm.TransportUD}[t]
}

// post builds req on f and checks the ring against the model, byte for byte.
func (f *fixture) postAndCheck(t *testing.T, model []byte, req request, bf bool) {
	t.Helper()
	pi := f.q.ProducerIndex()
	slot := int(pi) % (len(f.ring) / prm.WQEBBSize)
	writes, ds := req.encode(uint16(pi))
	apply(model, slot, writes)
	require.NoError(t, req.build(f.q, bf), "%s %s", req.tr, req.op)
	if !bytes.Equal(model, f.ring) {
		t.Fatalf("%s %s at slot %d: ring differs from the reference\nwant:\n%s\ngot:\n%s", req.tr, req.op, slot,
			prm.DumpWQE(model, pi, req.tr.prm()), prm.DumpWQE(f.ring, pi, req.tr.prm()))
	}
	require.Equal(t, pi+uint32((ds+3)/4), f.q.ProducerIndex(), "producer index after ds %d", ds)
}

// TestLayoutEveryOpcode checks every opcode on every transport at every ring
// slot (so each segment and inline payload also crosses the ring end) with
// random fields, against the reference encoder.
func TestLayoutEveryOpcode(t *testing.T) {
	for _, op := range allOps {
		for _, tr := range transportsFor(op) {
			t.Run(tr.String()+"/"+op, func(t *testing.T) {
				o := defaultOpts()
				o.wqeCnt = 16
				f := newFixture(t, o)
				model := f.snapshot()
				r := rand.New(rand.NewPCG(uint64(len(op)), uint64(tr)))
				for i := range 3 * 16 {
					req := randomRequest(r, tr, op, int(o.maxSGE), int(o.maxInline), int(f.cfg.MaxWQEBBs*4))
					f.postAndCheck(t, model, req, i%2 == 1)
					// Retire everything so the queue never fills.
					retireAll(t, f.q)
				}
			})
		}
	}
}

// retireAll completes the last posted WQE, which retires all before it.
func retireAll(t *testing.T, q *wqebuilder.SendQueue) {
	t.Helper()
	if q.Outstanding() == 0 {
		return
	}
	// Walk WQE starts from the consumer index to find the last one.
	last := lastStart(t, q)
	_, ok := q.Complete(uint16(last))
	require.True(t, ok)
	require.Zero(t, q.Outstanding())
}

func lastStart(t *testing.T, q *wqebuilder.SendQueue) uint32 {
	t.Helper()
	ring := unsafe.Slice((*byte)(q.Config().Buf), int(q.Config().WQECnt)*prm.WQEBBSize)
	idx := q.ConsumerIndex()
	for {
		slot := int(idx%q.Config().WQECnt) * prm.WQEBBSize
		ds := uint32(ring[slot+7] & 0x3f)
		require.NotZero(t, ds)
		next := idx + (ds+3)/4
		if next == q.ProducerIndex() {
			return idx
		}
		require.Less(t, next-q.ConsumerIndex(), q.ProducerIndex()-q.ConsumerIndex())
		idx = next
	}
}

// TestManyLaps posts a random mix of WQEs of every size for many laps of a
// small ring, retiring them at random points, and compares the whole ring
// with the reference after every post.
func TestManyLaps(t *testing.T) {
	for _, wqeCnt := range []uint32{8, 64} {
		t.Run(fmt.Sprint(wqeCnt), func(t *testing.T) {
			o := defaultOpts()
			o.wqeCnt = wqeCnt
			o.maxSGE = 12
			o.maxInline = 400
			f := newFixture(t, o)
			pre := append([]byte(nil), f.pre...)
			model := f.snapshot()
			r := rand.New(rand.NewPCG(7, uint64(wqeCnt)))
			var starts []uint32 // WQE starts in flight
			laps := 40
			for f.q.ProducerIndex() < uint32(laps)*wqeCnt {
				if f.q.Free() < f.cfg.MaxWQEBBs || r.IntN(4) == 0 {
					// Complete a random prefix of the WQEs in flight.
					if len(starts) > 0 {
						k := r.IntN(len(starts))
						before := f.q.ConsumerIndex()
						_, ok := f.q.Complete(uint16(starts[k]))
						require.True(t, ok)
						require.Greater(t, f.q.ConsumerIndex()-before, starts[k]-before)
						starts = starts[k+1:]
						if len(starts) > 0 {
							require.Equal(t, starts[0], f.q.ConsumerIndex())
						} else {
							require.Equal(t, f.q.ProducerIndex(), f.q.ConsumerIndex())
						}
					}
					continue
				}
				op := allOps[r.IntN(len(allOps))]
				trs := transportsFor(op)
				req := randomRequest(r, trs[r.IntN(len(trs))], op, int(o.maxSGE), int(o.maxInline), int(f.cfg.MaxWQEBBs*4))
				starts = append(starts, f.q.ProducerIndex())
				f.postAndCheck(t, model, req, r.IntN(2) == 0)
			}
			require.True(t, bytes.Equal(pre, f.pre), "bytes before the ring changed")
		})
	}
}

// TestIndexWraps16Bits runs the producer index past 2^16 and checks the WQE
// index in the control segment and Complete with 16-bit counters.
func TestIndexWraps16Bits(t *testing.T) {
	o := defaultOpts()
	o.wqeCnt = 256
	f := newFixture(t, o)
	var first uint32
	for i := 0; f.q.ProducerIndex() < 1<<16+1000; i++ {
		pi := f.q.ProducerIndex()
		if i == 0 {
			first = pi
		}
		err := f.q.Begin(uint64(pi), wqebuilder.Signaled).RdmaWriteImm(1, 2, 3).SGE(4, 5, 6).Finish()
		require.NoError(t, err)
		slot := int(pi%o.wqeCnt) * prm.WQEBBSize
		word := binary.BigEndian.Uint32(f.ring[slot:])
		require.Equal(t, pi&0xffff, word>>8&0xffff)
		require.Equal(t, uint32(prm.OpRdmaWriteImm), word&0xff)
		wrid, ok := f.q.Complete(uint16(pi))
		require.True(t, ok)
		require.Equal(t, uint64(pi), wrid)
		require.Equal(t, pi+1, f.q.ConsumerIndex())
	}
	require.Equal(t, uint32(0), first)
	require.Greater(t, f.q.ProducerIndex(), uint32(1<<16))
}

// TestRetire posts unsignaled WQEs and a signaled one; the signaled one's
// completion retires them all and returns its wrid.
func TestRetire(t *testing.T) {
	f := newFixture(t, defaultOpts())
	q := f.q
	require.Equal(t, uint32(64), q.Free())
	var starts []uint32
	for i := range 5 {
		starts = append(starts, q.ProducerIndex())
		s := q.Begin(uint64(100+i), 0).Send()
		for range i { // 0..4 SGEs: 1, 1, 1, 1, 2 WQEBBs
			s = s.SGE(1, 1, 1)
		}
		require.NoError(t, s.Finish())
	}
	starts = append(starts, q.ProducerIndex())
	require.NoError(t, q.Begin(999, wqebuilder.Signaled).Nop().Finish())
	require.Equal(t, uint32(7), q.Outstanding())
	require.Equal(t, uint32(57), q.Free())

	// A counter that is not in flight changes nothing.
	for _, c := range []uint16{7, 100, 0xffff} {
		_, ok := q.Complete(c)
		require.False(t, ok, "counter %d", c)
	}
	require.Equal(t, uint32(0), q.ConsumerIndex())

	// An error completion in the middle (flush) retires up to it.
	wrid, ok := q.Complete(uint16(starts[2]))
	require.True(t, ok)
	require.Equal(t, uint64(102), wrid)
	require.Equal(t, starts[3], q.ConsumerIndex())

	wrid, ok = q.Complete(uint16(starts[5]))
	require.True(t, ok)
	require.Equal(t, uint64(999), wrid)
	require.Zero(t, q.Outstanding())
	require.Equal(t, uint32(64), q.Free())
	_, ok = q.Complete(uint16(starts[5]))
	require.False(t, ok, "already retired")
}

// TestDoorbells checks the doorbell record and the register for batches,
// BlueFlame posts and the fallbacks to the 8-byte doorbell.
func TestDoorbells(t *testing.T) {
	f := newFixture(t, defaultOpts())
	q := f.q
	bfOff := 0
	wqeBytes := func(pi uint32, n int) []byte {
		slot := int(pi%64) * 64
		return f.ring[slot : slot+n]
	}

	// Nothing pending: RingDoorbell does nothing.
	q.RingDoorbell()
	require.Equal(t, make([]byte, 8), f.dbrec)
	require.Equal(t, uint32(0), q.Register().Offset())

	// A batch of three, one doorbell with the last WQE's first 8 bytes.
	for i := range 3 {
		require.NoError(t, q.Begin(uint64(i), 0).RdmaWrite(1, 2).SGE(3, 4, 5).Finish())
	}
	require.True(t, q.Pending())
	require.Equal(t, make([]byte, 8), f.dbrec, "Finish alone must not ring")
	q.RingDoorbell()
	require.False(t, q.Pending())
	require.Equal(t, uint32(3), f.dbrecSend())
	require.Equal(t, wqeBytes(2, 8), f.bf[bfOff:bfOff+8])
	require.Equal(t, uint32(bfSize), q.Register().Offset())
	bfOff ^= bfSize

	// A lone WQE with FinishBlueFlame: the whole WQE (3 segments, one
	// 64-byte chunk) goes to the register.
	pi := q.ProducerIndex()
	require.NoError(t, q.Begin(7, wqebuilder.Signaled).RdmaWriteImm(1, 2, 3).SGE(3, 4, 5).FinishBlueFlame())
	require.Equal(t, pi+1, f.dbrecSend())
	require.Equal(t, wqeBytes(pi, 64), f.bf[bfOff:bfOff+64])
	bfOff ^= bfSize

	// With a WQE already pending, FinishBlueFlame only rings (rdma-core
	// copies a WQE only when it is the only one of the post).
	require.NoError(t, q.Begin(8, 0).Send().SGE(1, 1, 1).Finish())
	before := append([]byte(nil), f.bf[bfOff:bfOff+bfSize]...)
	pi = q.ProducerIndex()
	require.NoError(t, q.Begin(9, 0).Send().Inline(bytes.Repeat([]byte{0xee}, 100)).FinishBlueFlame())
	require.Equal(t, pi+2, f.dbrecSend())
	require.Equal(t, wqeBytes(pi, 8), f.bf[bfOff:bfOff+8])
	require.Equal(t, before[8:], f.bf[bfOff+8:bfOff+bfSize])
	bfOff ^= bfSize

	// A NOP (control segment only) rings with the 8-byte doorbell.
	pi = q.ProducerIndex()
	require.NoError(t, q.Begin(10, wqebuilder.Signaled).Nop().FinishBlueFlame())
	require.Equal(t, wqeBytes(pi, 8), f.bf[bfOff:bfOff+8])
	bfOff ^= bfSize

	// A WQE larger than the BlueFlame buffer (256 bytes) rings too:
	// 1 + 4 + 14 = 19 segments.
	pi = q.ProducerIndex()
	before = append([]byte(nil), f.bf[bfOff:bfOff+bfSize]...)
	require.NoError(t, q.Begin(11, 0).Send().SGE(1, 1, 1).SGE(2, 2, 2).SGE(3, 3, 3).SGE(4, 4, 4).
		Inline(bytes.Repeat([]byte{0xdd}, 220)).FinishBlueFlame())
	require.Equal(t, pi+5, q.ProducerIndex())
	require.Equal(t, pi+5, f.dbrecSend())
	require.Equal(t, wqeBytes(pi, 8), f.bf[bfOff:bfOff+8])
	require.Equal(t, before[8:], f.bf[bfOff+8:bfOff+bfSize])

	// A 4-WQEBB WQE fits the 256-byte buffer exactly and is copied whole.
	for q.ProducerIndex()%64 != 62 { // make it wrap: slots 62, 63, 0, 1
		retireAll(t, q)
		require.NoError(t, q.Begin(0, 0).Nop().Finish())
	}
	q.RingDoorbell()
	retireAll(t, q)
	pi = q.ProducerIndex()
	off := q.Register().Offset()
	payload := bytes.Repeat([]byte{0xab}, 16*16-4-16-16) // ctrl + raddr + inline = 16 segments
	require.NoError(t, q.Begin(13, 0).RdmaWrite(1, 2).Inline(payload).FinishBlueFlame())
	require.Equal(t, pi+4, q.ProducerIndex())
	want := append(append([]byte(nil), f.ring[62*64:]...), f.ring[:2*64]...)
	require.Equal(t, want, f.bf[off:off+256])
}

// TestBlueFlameOff: with BlueFlameSize 0 every post is a doorbell and the
// register offset stays 0.
func TestBlueFlameOff(t *testing.T) {
	o := defaultOpts()
	o.bfSize = 0
	f := newFixture(t, o)
	for i := range 4 {
		pi := f.q.ProducerIndex()
		require.NoError(t, f.q.Begin(uint64(i), 0).RdmaWriteImm(1, 2, 3).SGE(3, 4, 5).FinishBlueFlame())
		require.Equal(t, pi+1, f.dbrecSend())
		require.Equal(t, f.ring[int(pi)*64:int(pi)*64+8], f.bf[:8])
		require.Equal(t, make([]byte, 8), f.bf[8:16])
		require.Equal(t, uint32(0), f.q.Register().Offset())
	}
}

func TestAddressAV(t *testing.T) {
	dgid := [16]byte{0xfe, 0x80, 14: 0xab, 15: 0xcd}
	ib := addrvec.Address{SL: 5, StaticRate: 3, DLID: 0x1234, SrcPathBits: 0x81, Global: true, DGID: dgid,
		SGIDIndex: 2, FlowLabel: 0x12345678, TrafficClass: 9, HopLimit: 64}.AV()
	want := make([]byte, 48)
	want[12], want[13], want[14], want[15] = 0x35, 0x01, 0x12, 0x34
	want[26], want[27] = 9, 64
	copy(want[28:], []byte{0x40, 0x24, 0x56, 0x78}) // GRH bit, sgid 2, flow label 0x45678
	copy(want[32:], dgid[:])
	require.Equal(t, want, ib[:])

	lid := addrvec.Address{SL: 0x1f, DLID: 7}.AV() // no GRH, SL masked to 4 bits
	want = make([]byte, 48)
	want[12], want[15] = 0x0f, 7
	require.Equal(t, want, lid[:])

	roce := addrvec.Address{SL: 6, StaticRate: 2, Global: true, DGID: dgid, SGIDIndex: 3, FlowLabel: 0x1,
		TrafficClass: 0x68, HopLimit: 255, RoCE: true, RMAC: [6]byte{1, 2, 3, 4, 5, 6}, UDPSourcePort: 0xc001,
		DLID: 0xffff, SrcPathBits: 0x7f}.AV()
	want = make([]byte, 48)
	want[12], want[13], want[14], want[15] = 0x2c, 0, 0xc0, 0x01 // priority 6 at bits 3..1; no LID, no path bits
	copy(want[20:], []byte{1, 2, 3, 4, 5, 6})
	want[26], want[27] = 0x68, 255
	copy(want[28:], []byte{0x00, 0x30, 0x00, 0x01}) // no GRH bit on RoCE
	copy(want[32:], dgid[:])
	require.Equal(t, want, roce[:])
}

// Inline data of every length up to MaxInline, appended after a first
// piece of 0 to 20 bytes (so that it starts at every alignment), lands
// byte for byte after the segment header, and nothing after it in the ring
// changes: small pieces move as overlapping loads and stores from both of
// their ends, which must neither drop nor add a byte.
func TestInlineEveryLength(t *testing.T) {
	f := newFixture(t, defaultOpts())
	q := f.q
	rng := rand.New(rand.NewPCG(3, 4))
	for first := 0; first <= 20; first += 5 {
		for n := 1; first+n <= int(f.cfg.MaxInline); n++ {
			retireAll(t, q)
			for q.ProducerIndex()%f.cfg.WQECnt > f.cfg.WQECnt-16 { // no wrap: the WQE has at most 4 WQEBBs
				require.NoError(t, q.Begin(0, 0).Nop().Finish())
				retireAll(t, q)
			}
			for i := range f.ring {
				f.ring[i] = byte(rng.Uint32())
			}
			before := append([]byte(nil), f.ring...)
			a, b := make([]byte, first), make([]byte, n)
			for i := range a {
				a[i] = byte(rng.Uint32())
			}
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			at := int(q.ProducerIndex()%f.cfg.WQECnt) * prm.WQEBBSize
			data := at + prm.CtrlSize + prm.InlineHeaderSize
			require.NoError(t, q.Begin(1, 0).Send().Inline(a).Inline(b).Finish())

			want := append([]byte(nil), before...)
			binary.BigEndian.PutUint32(want[at+prm.CtrlSize:], uint32(first+n)|prm.InlineSeg)
			copy(want[data:], a)
			copy(want[data+first:], b)
			require.Equal(t, before[:at], f.ring[:at], "first %d, n %d: before the WQE", first, n)
			require.Equal(t, want[at+prm.CtrlSize:], f.ring[at+prm.CtrlSize:], "first %d, n %d: from the inline segment on", first, n)
		}
	}
}
