package sim

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// fuzzWorld is two HCAs with one registered page each, between canary
// pages that must never change.
type fuzzWorld struct {
	*env
	bufA, bufB *ctx.Buffer
	mrA, mrB   *ctx.MemoryRegion
}

const canary = 0xa5

func newFuzzWorld(t testing.TB) *fuzzWorld {
	e := newEnv(t, Options{MaxRounds: 20000})
	e.allowViolations = true
	w := &fuzzWorld{env: e}
	var err error
	for _, x := range []struct {
		buf **ctx.Buffer
		mr  **ctx.MemoryRegion
		pd  *ctx.ProtectionDomain
	}{{&w.bufA, &w.mrA, e.pd}, {&w.bufB, &w.mrB, e.pd2}} {
		*x.buf, err = ctx.AllocBuffer(3*4096, ctx.BufferOptions{Guard: true})
		require.NoError(t, err)
		b := (*x.buf).Bytes()
		for i := range b {
			b[i] = canary
		}
		*x.mr, err = x.pd.RegisterMemory(b[4096:8192], allAccess)
		require.NoError(t, err)
		buf := *x.buf
		t.Cleanup(func() { buf.Close() })
	}
	return w
}

func (w *fuzzWorld) canariesIntact() bool {
	for _, b := range []*ctx.Buffer{w.bufA, w.bufB} {
		m := b.Bytes()
		for _, r := range [][]byte{m[:4096], m[8192:]} {
			for _, c := range r {
				if c != canary {
					return false
				}
			}
		}
	}
	return true
}

// seedWQE builds a well-formed WQE for the fuzz corpus.
func seedWQE(qpn uint32, op prm.Opcode, segs ...[]byte) []byte {
	n := 16
	for _, s := range segs {
		n += len(s)
	}
	w := ctrlSeg(op, 0, 0, qpn, n/16, prm.FlagCQUpdate, 0)
	for _, s := range segs {
		w = append(w, s...)
	}
	return w
}

// FuzzSendRing puts arbitrary bytes in a send ring and a receive ring, rings
// arbitrary doorbells, and runs the model: it must not panic, must not
// touch a byte outside the registered pages, and must end idle.
func FuzzSendRing(f *testing.F) {
	// Seeds: valid WQEs with the keys and QPNs a fresh world hands out.
	w := newFuzzWorld(f)
	a := w.newQP(w.pd, qpOpts{typ: ctx.QPTypeRC, sendDepth: 4, recvDepth: 4})
	kA, kB := w.mrA.LKey(), w.mrB.RKey()
	addrA, addrB := uint64(w.mrA.Addr()), uint64(w.mrB.Addr())
	qpn := a.qp.QPN()
	rq := append(dataSeg(64, w.mrB.LKey(), addrB), dataSeg(0, prm.InvalidLKey, 0)...)
	f.Add(uint8(0), uint16(1), seedWQE(qpn, prm.OpRdmaWrite, raddrSeg(addrB, kB), inlineSeg([]byte("seed"))), rq)
	f.Add(uint8(0), uint16(1), seedWQE(qpn, prm.OpSend, dataSeg(100, kA, addrA)), rq)
	f.Add(uint8(0), uint16(1), seedWQE(qpn, prm.OpRdmaRead, raddrSeg(addrB+4000, kB), dataSeg(200, kA, addrA)), rq)
	f.Add(uint8(0), uint16(2), seedWQE(qpn, prm.OpAtomicMaskedCS, raddrSeg(addrB, kB), atomicSeg(1, 2), atomicSeg(3, 4), dataSeg(8, kA, addrA)), rq)
	f.Add(uint8(1), uint16(2), seedWQE(qpn, prm.OpSend, udAV(1, qpn+1, 2), inlineSeg(make([]byte, 60))), rq)
	f.Add(uint8(2), uint16(1), seedWQE(qpn, prm.OpRdmaWrite, dcAV(7, qpn+1, 2), raddrSeg(addrB, kB), dataSeg(4096, kA, addrA)), rq)
	f.Add(uint8(0), uint16(0xffff), bytes.Repeat([]byte{0xff}, 512), bytes.Repeat([]byte{0xff}, 64))
	f.Fuzz(func(t *testing.T, kind uint8, pi uint16, ring, rqBytes []byte) {
		w := newFuzzWorld(t)
		var a, b *testQP
		switch kind % 3 {
		case 0:
			a = w.newQP(w.pd, qpOpts{typ: ctx.QPTypeRC, sendDepth: 4, recvDepth: 4})
			b = w.newQP(w.pd2, qpOpts{typ: ctx.QPTypeRC, sendDepth: 4, recvDepth: 4})
			w.connectRC(a, b, 2, 1)
		case 1:
			a = w.udQP(w.pd, 1, qpOpts{sendDepth: 4, recvDepth: 4})
			b = w.udQP(w.pd2, 1, qpOpts{sendDepth: 4, recvDepth: 4})
		default:
			srq := w.newSRQ(w.pd2, 4, 2)
			b = w.dct(w.pd2, srq, 7)
			a = w.dci(w.pd)
			copy(unsafe.Slice((*byte)(srq.d.Buf), srq.d.Stride*srq.d.WQECnt), rqBytes)
			prm.Store32(srq.d.DBRec, uint32(pi>>8))
		}
		sq := unsafe.Slice((*byte)(a.d.SQ.Buf), a.d.SQ.WQECnt*prm.WQEBBSize)
		copy(sq, ring)
		if b.d.RQ.WQECnt > 0 {
			copy(unsafe.Slice((*byte)(b.d.RQ.Buf), b.d.RQ.WQECnt*b.d.RQ.Stride), rqBytes)
			prm.Store32(b.d.DBRec, uint32(pi>>8))
		}
		prm.Store32(unsafe.Add(a.d.DBRec, prm.DoorbellRecordSendB), uint32(pi))
		if err := w.f.RunUntilIdle(); err != nil && !errors.Is(err, ErrNotIdle) {
			t.Fatal(err)
		}
		// Everything the model produced is a well-formed CQE.
		for _, c := range append(a.scq.drain(), b.rcq.drain()...) {
			if c.op.IsError() && !c.synd.Known() {
				t.Fatalf("unknown syndrome in %+v", c)
			}
		}
		if !w.canariesIntact() {
			t.Fatal("memory outside the registered pages changed")
		}
	})
}
