package sim

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// These tests drive the model with the kit's own builder and poller, in
// strict mode: every WQE the builder writes must be one the model accepts
// without a violation.

func sendQueue(t testing.TB, q *testQP) *wqebuilder.SendQueue {
	t.Helper()
	d := provider.QPDescriptor(q.qp)
	sq, err := wqebuilder.New(wqebuilder.Config{Buf: d.SQ.Buf, WQECnt: d.SQ.WQECnt, QPN: d.QPN, DBRec: d.DBRec,
		BlueFlame: d.BlueFlame, BlueFlameSize: d.BlueFlameSize, MaxInline: d.MaxInline, MaxSGE: d.MaxSendSGE})
	require.NoError(t, err)
	return sq
}

func poller(t testing.TB, c *testCQ) *monocq.CQ {
	t.Helper()
	d := provider.CQDescriptor(c.cq)
	cq, err := monocq.New(monocq.Config{Buf: d.Buf, CQECnt: d.CQECnt, CQESize: d.CQESize, DBRec: d.DBRec, UAR: d.UAR, CQN: d.CQN})
	require.NoError(t, err)
	return cq
}

type polled struct {
	op      prm.CQEOpcode
	synd    prm.Syndrome
	counter uint16
	byteCnt uint32
	imm     uint32
	qpn     uint32
	src     uint32
	scatter []byte
}

func pollAll(cq *monocq.CQ) []polled {
	var out []polled
	cq.Poll(1<<16, func(c *monocq.CQE) {
		p := polled{op: c.Opcode(), counter: c.WQECounter(), byteCnt: c.ByteCount(), imm: c.Immediate(), qpn: c.QPN(), src: c.SourceQP()}
		if c.IsError() {
			p.synd = c.Syndrome()
		}
		if s := c.ScatterData(); s != nil {
			p.scatter = append([]byte(nil), s...)
		}
		out = append(out, p)
	})
	return out
}

// TestBuilderRandomRC runs a random stream of RC operations built with
// wqebuilder and polled with monocq, with payloads from 0 bytes to 64 KiB,
// inline and SGE lists, mixed signaling, through many ring wraps, and checks
// every byte against a plain Go model of both memories.
func TestBuilderRandomRC(t *testing.T) {
	n, laps := 20000, 50
	if testing.Short() {
		n, laps = 3000, 10
	}
	e := newEnv(t, Options{})
	a, b := e.rcPair(qpOpts{sendDepth: 32, recvDepth: 64, sendSGE: 4, inline: 256, cqDepth: 512})
	sq := sendQueue(t, a)
	scq, rcq := poller(t, a.scq), poller(t, b.rcq)
	require.NoError(t, scq.Err())
	const region = 256 << 10
	local, remote := e.mem(0, region), e.mem2(0, region)
	fill(local, 1)
	fill(remote, 2)
	refLocal := append([]byte(nil), local...)
	refRemote := append([]byte(nil), remote...)
	rng := rand.New(rand.NewSource(99))
	size := func() int {
		switch rng.Intn(4) {
		case 0:
			return rng.Intn(17)
		case 1:
			return rng.Intn(int(a.d.MaxInline) + 1)
		case 2:
			return rng.Intn(4096)
		}
		return rng.Intn(64 << 10)
	}
	recvBase := 3 * region / 4 // receive buffers live in the top quarter of the remote region
	recvSlot := 8192
	var rq []int // buffer offsets of the posted, unconsumed receives, in order
	nextSlot := 0
	type pending struct {
		op  prm.Opcode
		n   int
		imm uint32
	}
	var expectRecv []pending
	signaledOut := 0
	for i := 0; i < n; i++ {
		for len(rq) < 32 {
			off := recvBase + nextSlot%8*recvSlot
			nextSlot++
			b.postRecv(dataSeg(uint32(recvSlot), e.mr2.LKey(), e.addr2(off)))
			rq = append(rq, off)
		}
		op := []prm.Opcode{prm.OpRdmaWrite, prm.OpRdmaWriteImm, prm.OpSend, prm.OpSendImm, prm.OpRdmaRead, prm.OpAtomicFA, prm.OpAtomicCS, prm.OpNop}[rng.Intn(8)]
		sz := size()
		if op == prm.OpSend || op == prm.OpSendImm {
			sz = min(sz, recvSlot)
		}
		loff := rng.Intn(recvBase/2 - sz + 1)
		roff := rng.Intn(recvBase - sz + 1)
		flags := wqebuilder.Flags(0)
		if rng.Intn(3) == 0 || i == n-1 {
			flags = wqebuilder.Signaled
		}
		st := sq.Begin(uint64(i), flags)
		imm := rng.Uint32()
		var err error
		// src is what the payload will be: inline bytes are copied now, at
		// post time; SGEs are read when the model executes the WQE, after
		// every earlier WQE (a READ into the same bytes included).
		var src []byte
		addData := func(ds wqebuilder.DataStage) error {
			if sz <= int(a.d.MaxInline) && rng.Intn(2) == 0 {
				src = append([]byte(nil), local[loff:loff+sz]...)
				return ds.Inline(local[loff : loff+sz]).Finish()
			}
			src = append([]byte(nil), refLocal[loff:loff+sz]...)
			// Split into up to MaxSGE pieces.
			k := 1 + rng.Intn(int(a.d.MaxSendSGE))
			at := 0
			for j := 0; j < k; j++ {
				m := (sz - at) / (k - j)
				if j == k-1 {
					m = sz - at
				}
				ds = ds.SGE(e.addr(loff+at), uint32(m), e.mr.LKey())
				at += m
			}
			return ds.Finish()
		}
		switch op {
		case prm.OpRdmaWrite:
			err = addData(st.RdmaWrite(e.addr2(roff), e.mr2.RKey()))
			copy(refRemote[roff:], src)
		case prm.OpRdmaWriteImm:
			err = addData(st.RdmaWriteImm(e.addr2(roff), e.mr2.RKey(), imm))
			copy(refRemote[roff:], src)
			rq = rq[1:]
			expectRecv = append(expectRecv, pending{op: op, n: sz, imm: imm})
		case prm.OpSend, prm.OpSendImm:
			if op == prm.OpSend {
				err = addData(st.Send())
				imm = 0
			} else {
				err = addData(st.SendImm(imm))
			}
			copy(refRemote[rq[0]:], src)
			rq = rq[1:]
			expectRecv = append(expectRecv, pending{op: op, n: sz, imm: imm})
		case prm.OpRdmaRead:
			// A zero-length SGE would be skipped; read at least one byte.
			sz = max(sz, 1)
			err = st.RdmaRead(e.addr2(roff), e.mr2.RKey()).SGE(e.addr(loff), uint32(sz), e.mr.LKey()).Finish()
			copy(refLocal[loff:], refRemote[roff:roff+sz])
		case prm.OpAtomicFA, prm.OpAtomicCS:
			roff &^= 7
			loff &^= 7
			old := host.Uint64(refRemote[roff:])
			if op == prm.OpAtomicFA {
				err = st.AtomicFA(e.addr2(roff), e.mr2.RKey(), uint64(imm)).Result(e.addr(loff), e.mr.LKey()).Finish()
				host.PutUint64(refRemote[roff:], old+uint64(imm))
			} else {
				cmp := old
				if rng.Intn(2) == 0 {
					cmp++
				}
				err = st.AtomicCS(e.addr2(roff), e.mr2.RKey(), cmp, uint64(imm)).Result(e.addr(loff), e.mr.LKey()).Finish()
				if cmp == old {
					host.PutUint64(refRemote[roff:], uint64(imm))
				}
			}
			host.PutUint64(refLocal[loff:], old)
		default:
			err = st.Nop().Finish()
		}
		require.NoError(t, err, "op %d %v size %d", i, op, sz)
		if flags != 0 {
			signaledOut++
		}
		// Ring in batches of 1..4, then run the model and check.
		if rng.Intn(3) == 0 || sq.Free() < 40 || i == n-1 {
			sq.RingDoorbell()
			e.run()
			for _, c := range pollAll(scq) {
				require.Equal(t, prm.CQEReq, c.op, "requester CQE %+v", c)
				_, ok := sq.Complete(c.counter)
				require.True(t, ok)
				signaledOut--
			}
			for _, c := range pollAll(rcq) {
				require.NotEmpty(t, expectRecv)
				want := expectRecv[0]
				expectRecv = expectRecv[1:]
				switch want.op {
				case prm.OpRdmaWriteImm:
					require.Equal(t, prm.CQERespWrImm, c.op)
				case prm.OpSend:
					require.Equal(t, prm.CQERespSend, c.op)
				case prm.OpSendImm:
					require.Equal(t, prm.CQERespSendImm, c.op)
				}
				require.Equal(t, uint32(want.n), c.byteCnt)
				require.Equal(t, want.imm, c.imm)
			}
			require.Empty(t, expectRecv)
			require.Zero(t, signaledOut)
			if !bytes.Equal(refRemote, remote) || !bytes.Equal(refLocal, local) {
				t.Fatalf("memory differs from the reference after op %d", i)
			}
		}
	}
	require.NoError(t, scq.Err())
	require.NoError(t, rcq.Err())
	require.Greater(t, int(sq.ProducerIndex()), laps*int(a.d.SQ.WQECnt), "the ring wrapped many times")
}

func TestBuilderUDAndDC(t *testing.T) {
	e := newEnv(t, Options{})
	// UD with an address handle's AV.
	u1 := e.udQP(e.pd, 7, qpOpts{})
	u2 := e.udQP(e.pd2, 7, qpOpts{})
	ah, err := e.pd.CreateAddressHandle(ctx.AddressAttr{DLID: lidOf(t, e.c2)})
	require.NoError(t, err)
	av := ah.AV()
	u2.postRecv(dataSeg(100, e.mr2.LKey(), e.addr2(0)))
	sq := sendQueue(t, u1)
	require.NoError(t, sq.Begin(1, wqebuilder.Signaled).UD(&av, u2.qp.QPN(), 7).SendImm(0x77).Inline([]byte("ud via builder")).Finish())
	sq.RingDoorbell()
	e.run()
	rc := pollAll(poller(t, u2.rcq))
	require.Len(t, rc, 1)
	require.Equal(t, prm.CQERespSendImm, rc[0].op)
	require.Equal(t, u1.qp.QPN(), rc[0].src)
	require.Equal(t, []byte("ud via builder"), e.mem2(40, 14))
	sc := pollAll(poller(t, u1.scq))
	require.Len(t, sc, 1)
	require.Equal(t, prm.CQEReq, sc[0].op)

	// DC: one DCI, a masked atomic and a write with immediate to a DCT.
	srq := e.newSRQ(e.pd2, 8, 1)
	dct := e.dct(e.pd2, srq, 0x1234)
	dci := e.dci(e.pd)
	srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(1024)))
	dah, err := e.pd.CreateAddressHandle(ctx.AddressAttr{DLID: lidOf(t, e.c2)})
	require.NoError(t, err)
	dav := dah.AV()
	dsq := sendQueue(t, dci)
	host.PutUint64(e.mem2(4096, 8), 0x00ff)
	require.NoError(t, dsq.Begin(1, 0).DC(&dav, dct.qp.QPN(), 0x1234).MaskedFA64(e.addr2(4096), e.mr2.RKey(), 0x0101, 0x80).Result(e.addr(0), e.mr.LKey()).Finish())
	require.NoError(t, dsq.Begin(2, wqebuilder.Signaled).DC(&dav, dct.qp.QPN(), 0x1234).RdmaWriteImm(e.addr2(8192), e.mr2.RKey(), 5).Inline([]byte("dc")).Finish())
	dsq.RingDoorbell()
	e.run()
	sc = pollAll(poller(t, dci.scq))
	require.Len(t, sc, 1)
	require.Equal(t, prm.CQEReq, sc[0].op)
	wrid, ok := dsq.Complete(sc[0].counter)
	require.True(t, ok)
	require.Equal(t, uint64(2), wrid)
	require.Equal(t, uint64(0x00ff), host.Uint64(e.mem(0, 8)))
	require.Equal(t, uint64(0x0100), host.Uint64(e.mem2(4096, 8)))
	require.Equal(t, []byte("dc"), e.mem2(8192, 2))
	rc = pollAll(poller(t, dct.rcq))
	require.Len(t, rc, 1)
	require.Equal(t, prm.CQERespWrImm, rc[0].op)
	require.Equal(t, dct.qp.QPN(), rc[0].qpn)
}

func TestBuilderScatterToCQEWithPoller(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := e.rcPair(qpOpts{scatterToCQE: true, cqeSize: 128})
	b.postRecv(dataSeg(128, e.mr2.LKey(), e.addr2(0)))
	sq := sendQueue(t, a)
	msg := bytes.Repeat([]byte("0123456789abcdef"), 4)
	require.NoError(t, sq.Begin(1, wqebuilder.Signaled).Send().Inline(msg).FinishBlueFlame())
	e.run()
	rc := pollAll(poller(t, b.rcq))
	require.Len(t, rc, 1)
	require.Equal(t, msg, rc[0].scatter)
}
