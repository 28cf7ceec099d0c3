package reliability

import (
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
)

// The fuzz inputs name memory by fake addresses: every big-endian 8-byte
// word of the rings that falls within a window around fakeA or fakeB is
// moved onto the real region of HCA 0 or 1 before the rings are handed to
// the model, so that a seed (and a mutation of it) means the same buffer in
// every run wherever mmap put it.
const (
	fakeA       = 0x00a0_0000_0000_0000
	fakeB       = 0x00b0_0000_0000_0000
	fakeWindow  = 1 << 20
	fuzzRegion  = 8192
	fuzzKinds   = 3 // RC, UD, DC
	fuzzSQDepth = 4
)

// hcaWorld is two HCAs, each with one memory region that is exactly a
// mapping between two PROT_NONE pages (ctx.AllocBuffer with Guard, wholly
// registered), and a requester on HCA 0 and a responder on HCA 1 of one
// transport. A read or write of a single byte outside a region faults.
type hcaWorld struct {
	f        *sim.Fabric
	c        [2]*ctx.Context
	mr       [2]*ctx.MemoryRegion
	req      descriptor.QP
	respRing []byte // the responder's RQ or SRQ ring
	respDB   unsafe.Pointer
	dct      uint32 // DCT number (DC)
	qkey     uint32 // the responder's qkey (UD)
	respQPN  uint32
}

func newHCAWorld(t testing.TB, kind int) *hcaWorld {
	t.Helper()
	w := &hcaWorld{f: sim.New(sim.Options{Strict: true, MaxRounds: 20000})}
	var pd [2]*ctx.ProtectionDomain
	for i := range 2 {
		var err error
		w.c[i], err = w.f.Open([]string{"sim0", "sim1"}[i])
		require.NoError(t, err)
		pd[i], err = w.c[i].AllocProtectionDomain()
		require.NoError(t, err)
		buf, err := ctx.AllocBuffer(fuzzRegion, ctx.BufferOptions{Guard: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = buf.Close() })
		w.mr[i], err = pd[i].RegisterBuffer(buf, allAccess)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		_ = w.c[0].Close()
		_ = w.c[1].Close()
		_ = w.f.Close()
	})
	cq := [2]*ctx.CompletionQueue{}
	for i := range 2 {
		var err error
		cq[i], err = w.c[i].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 63})
		require.NoError(t, err)
	}
	var resp *ctx.QueuePair
	switch kind % fuzzKinds {
	case 0:
		a, err := rc.New(pd[0], cq[0], rc.Config{SendDepth: fuzzSQDepth, RecvDepth: 4, MaxSendSGE: 2, MaxInline: 64,
			RNRRetry: 1, RetryCount: 1, Timeout: 1, MinRNRTimer: 1})
		require.NoError(t, err)
		b, err := rc.New(pd[1], cq[1], rc.Config{SendDepth: 1, RecvDepth: 4, MaxRecvSGE: 2})
		require.NoError(t, err)
		require.NoError(t, a.Connect(b.Endpoint()))
		require.NoError(t, b.Connect(a.Endpoint()))
		w.req, resp = provider.QPDescriptor(a.Handle()), b.Handle()
	case 1:
		a, err := ud.New(pd[0], cq[0], ud.Config{SendDepth: fuzzSQDepth, MaxSendSGE: 2, MaxInline: 64, QKey: 9})
		require.NoError(t, err)
		b, err := ud.New(pd[1], cq[1], ud.Config{SendDepth: 1, RecvDepth: 4, MaxRecvSGE: 2, QKey: 9})
		require.NoError(t, err)
		w.req, resp, w.qkey = provider.QPDescriptor(a.Handle()), b.Handle(), 9
	default:
		srq, err := transport.NewSharedReceiveQueue(pd[1], ctx.SRQConfig{Depth: 4, MaxSGE: 2})
		require.NoError(t, err)
		dct, err := dc.NewDCT(pd[1], cq[1], dc.DCTConfig{SRQ: srq, Key: 0x77, MinRNRTimer: 1})
		require.NoError(t, err)
		dci, err := dc.NewDCI(pd[0], cq[0], dc.DCIConfig{SendDepth: fuzzSQDepth, MaxSendSGE: 2, MaxInline: 64,
			RNRRetry: 1, RetryCount: 1, Timeout: 1})
		require.NoError(t, err)
		w.req, w.dct = provider.QPDescriptor(dci.Handle()), dct.QPN()
		sd := provider.SRQDescriptor(srq.Handle())
		w.respRing = unsafe.Slice((*byte)(sd.Buf), sd.WQECnt*sd.Stride)
		w.respDB = sd.DBRec
		w.respQPN = dct.QPN()
		return w
	}
	d := provider.QPDescriptor(resp)
	w.respRing = unsafe.Slice((*byte)(d.RQ.Buf), d.RQ.WQECnt*d.RQ.Stride)
	w.respDB = d.DBRec
	w.respQPN = d.QPN
	return w
}

// relocate copies src into dst, moving fake addresses onto the regions.
func (w *hcaWorld) relocate(dst, src []byte) {
	n := copy(dst, src)
	for i := 0; i+8 <= n; i += 8 {
		v := binary.BigEndian.Uint64(dst[i:])
		for k, fake := range []uint64{fakeA, fakeB} {
			if v-(fake-fakeWindow) < 2*fakeWindow {
				binary.BigEndian.PutUint64(dst[i:], v-fake+uint64(w.mr[k].Addr()))
			}
		}
	}
}

// FuzzHCAMemoryBounds puts arbitrary bytes in a requester's send ring and
// a responder's receive ring (or SRQ), rings arbitrary doorbells and runs
// the software HCA. Every byte of memory it may touch lies in a region
// bounded by PROT_NONE pages, so reading or writing even one byte outside a
// registered region crashes the run: the model must check every address a
// WQE names before it touches it, and must neither panic nor hang.
func FuzzHCAMemoryBounds(f *testing.F) {
	// Keys, QPNs and LIDs are the same in every fresh world.
	var keys [fuzzKinds]struct{ lkey, rkey, qpn, resp, dct uint32 }
	for k := range fuzzKinds {
		w := newHCAWorld(f, k)
		keys[k].lkey, keys[k].rkey = w.mr[0].LKey(), w.mr[1].RKey()
		keys[k].qpn, keys[k].resp, keys[k].dct = w.req.QPN, w.respQPN, w.dct
	}
	be := binary.BigEndian
	ctrl := func(op prm.Opcode, idx uint16, qpn uint32, ds int) []byte {
		b := make([]byte, 16)
		be.PutUint32(b[0:], uint32(idx)<<8|uint32(op))
		be.PutUint32(b[4:], qpn<<8|uint32(ds))
		b[11] = prm.FlagCQUpdate
		return b
	}
	data := func(n, lkey uint32, addr uint64) []byte {
		b := make([]byte, 16)
		be.PutUint32(b[0:], n)
		be.PutUint32(b[4:], lkey)
		be.PutUint64(b[8:], addr)
		return b
	}
	raddr := func(addr uint64, rkey uint32) []byte {
		b := make([]byte, 16)
		be.PutUint64(b[0:], addr)
		be.PutUint32(b[8:], rkey)
		return b
	}
	av := func(key uint64, qpn uint32) []byte {
		b := make([]byte, 48)
		be.PutUint64(b[0:], key)
		be.PutUint32(b[8:], qpn|0x80000000)
		be.PutUint16(b[14:], 2) // the LID of HCA 1
		return b
	}
	wqe := func(k int, op prm.Opcode, idx uint16, segs ...[]byte) []byte {
		var body []byte
		for _, s := range segs {
			body = append(body, s...)
		}
		return append(ctrl(op, idx, keys[k].qpn, 1+len(body)/16), body...)
	}
	recv := func(_ int, srq bool, entries ...[]byte) []byte {
		var b []byte
		if srq {
			b = make([]byte, 16) // next segment
		}
		for _, e := range entries {
			b = append(b, e...)
		}
		return append(b, data(0, prm.InvalidLKey, 0)...)
	}
	end := uint64(fuzzRegion)
	for k := range fuzzKinds {
		kk := keys[k]
		lk, rk := kk.lkey, kk.rkey
		rn := uint32(64)
		if k == 1 {
			rn += prm.GRHSize // the GRH space of a UD receive
		}
		rq := recv(k, k == 2, data(rn, rk, fakeB+end-uint64(rn)))
		rqOver := recv(k, k == 2, data(rn+1, rk, fakeB+end-uint64(rn)))
		var addr []byte
		switch k {
		case 1:
			addr = av(uint64(9), kk.resp)
		case 2:
			addr = av(0x77, kk.dct)
		}
		send := func(n uint32, at uint64) []byte {
			return wqe(k, prm.OpSend, 0, addr, data(n, lk, at))
		}
		f.Add(uint8(k), uint16(1), uint16(1), send(64, fakeA+end-64), rq)
		f.Add(uint8(k), uint16(1), uint16(1), send(65, fakeA+end-64), rq)
		f.Add(uint8(k), uint16(1), uint16(1), send(64, fakeA+end-64), rqOver)
		f.Add(uint8(k), uint16(1), uint16(1), send(16, fakeA-1), rq)
		if k == 1 {
			continue
		}
		f.Add(uint8(k), uint16(1), uint16(0), wqe(k, prm.OpRdmaWrite, 0, addr, raddr(fakeB+end-8, rk), data(8, lk, fakeA)), rq)
		f.Add(uint8(k), uint16(1), uint16(0), wqe(k, prm.OpRdmaWrite, 0, addr, raddr(fakeB+end-7, rk), data(8, lk, fakeA)), rq)
		f.Add(uint8(k), uint16(1), uint16(0), wqe(k, prm.OpRdmaRead, 0, addr, raddr(fakeB, rk), data(16, lk, fakeA+end-15)), rq)
		f.Add(uint8(k), uint16(2), uint16(0), wqe(k, prm.OpRdmaRead, 0, addr, raddr(fakeB+end-100, rk), data(50, lk, fakeA), data(51, lk, fakeA+end-50)), rq)
		f.Add(uint8(k), uint16(1), uint16(0), wqe(k, prm.OpAtomicFA, 0, addr, raddr(fakeB+end-8, rk), make([]byte, 16), data(8, lk, fakeA+end-8)), rq)
		f.Add(uint8(k), uint16(1), uint16(0), wqe(k, prm.OpAtomicCS, 0, addr, raddr(fakeB+end, rk), make([]byte, 16), data(8, lk, fakeA)), rq)
		f.Add(uint8(k), uint16(1), uint16(1), wqe(k, prm.OpRdmaWriteImm, 0, addr, raddr(fakeB+end-1, rk), data(1, lk, fakeA+end-1)), rq)
	}
	f.Add(uint8(0), uint16(0xffff), uint16(0xffff), make([]byte, 4*64), make([]byte, 64))
	f.Fuzz(func(t *testing.T, kind uint8, pi, rqHead uint16, ring, rqBytes []byte) {
		w := newHCAWorld(t, int(kind))
		sq := unsafe.Slice((*byte)(w.req.SQ.Buf), w.req.SQ.WQECnt*prm.WQEBBSize)
		w.relocate(sq, ring)
		w.relocate(w.respRing, rqBytes)
		prm.Store32(w.respDB, uint32(rqHead))
		prm.Store32(unsafe.Add(w.req.DBRec, prm.DoorbellRecordSendB), uint32(pi))
		if err := w.f.RunUntilIdle(); err != nil && !errors.Is(err, sim.ErrNotIdle) {
			t.Fatal(err)
		}
	})
}
