package sim

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestSharedDCIResendCutShortKeepsStream: a DCI's two WQEs are executed
// by a DCT of another process and both answers are lost; the go-back-N
// after the ACK timeout sends the first again, but the DCT's ring has no
// room for the second. Once the first is answered nothing of the DCI is in
// flight, yet its stream must go on: the second was executed under it, and
// its resend must reach the DCT as a repeat (answered, not executed). A
// stream ended there made the resend the first segment of a new stream,
// which the DCT executed a second time: a SEND delivered twice, an atomic
// added twice and its first result lost.
func TestSharedDCIResendCutShortKeepsStream(t *testing.T) {
	for _, op := range []prm.Opcode{prm.OpSend, prm.OpAtomicFA} {
		t.Run(op.String(), func(t *testing.T) {
			e1, e2 := sharedPair(t)
			_, s1 := e1.f.SharedFabric()
			_, s2 := e2.f.SharedFabric()
			srq := e2.newSRQ(e2.pd, 16, 1)
			for i := 0; i < 4; i++ {
				srq.post(dataSeg(64, e2.mr.LKey(), e2.addr(1024+64*i)))
			}
			dct := e2.dct(e2.pd, srq, 0xfeed)
			host.PutUint64(e2.mem(0, 8), 10)
			// ACK timeout 12 (about 17 ms), 7 retries.
			d := e1.dciTo(e1.pd, 16, 12, 7)
			av := dcAV(0xfeed, dct.qp.QPN(), lidOf(t, e2.c))
			holdEngine(t, e1.f)
			holdEngine(t, e2.f)

			d.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, av, raddrSeg(e2.addr(64), e2.mr.RKey()), inlineSeg([]byte("first")))
			if op == prm.OpSend {
				d.post(op, 0, prm.FlagCQUpdate, 0, av, inlineSeg([]byte("second")))
			} else {
				d.post(op, 0, prm.FlagCQUpdate, 0, av, raddrSeg(e2.addr(0), e2.mr.RKey()), atomicSeg(1, 0), dataSeg(8, e1.mr.LKey(), e1.addr(0)))
			}
			stepRound(e1.f) // both requests leave
			kinds, _ := inbound(e2.f, s1)
			require.Equal(t, []uint8{wireRequest, wireRequest}, kinds)
			stepRound(e2.f) // both executed
			stepRound(e2.f) // the SEND's ACK, held for a round, goes
			require.Equal(t, 2, padRecords(e1.f, s2, func(h *wireHdr) bool { return h.Kind == wireResponse }), "both answers, lost")

			// Room in the DCT's ring for the first request again, not
			// the second: the room the two took.
			fillRingToEnd(t, e1.f, s2)
			retries := e1.f.Stats().Retries
			for end := time.Now().Add(5 * time.Second); e1.f.Stats().Retries == retries; {
				require.True(t, time.Now().Before(end), "no ACK timeout")
				stepRound(e1.f)
			}
			kinds, _ = inbound(e2.f, s1)
			require.Equal(t, []uint8{wireRequest}, kinds, "the first sent again, the second held back")
			stepRound(e2.f) // the repeat answered
			// The DCT's ring full again when the DCI takes that answer:
			// nothing of the DCI is in flight then, but the second WQE,
			// executed, is still to be sent again.
			fillRing(e1.f, s2)
			stepRound(e1.f)
			c, ok := d.scq.poll()
			require.True(t, ok, "the first WQE completes")
			require.Equal(t, prm.CQEReq, c.op, "%+v", c)
			c = stepUntilCQE(t, 5*time.Second, d.scq, e2.f, e1.f)
			require.Equal(t, prm.CQEReq, c.op, "%+v", c)
			for i := 0; i < 8; i++ {
				stepRound(e2.f)
				stepRound(e1.f)
			}
			require.Equal(t, []byte("first"), e2.mem(64, 5))
			if op == prm.OpSend {
				r := dct.rcq.drain()
				require.Len(t, r, 1, "the SEND delivered once: %+v", r)
				require.Equal(t, []byte("second"), e2.mem(1024, 6))
			} else {
				require.Empty(t, dct.rcq.drain())
				require.Equal(t, uint64(11), host.Uint64(e2.mem(0, 8)), "the atomic executed once")
				require.Equal(t, uint64(10), host.Uint64(e1.mem(0, 8)), "the value it found")
			}
		})
	}
}

// padRecords turns the records waiting in f's ring from the process in
// slot that match into pads, which the consumer skips: they are lost on
// the way. A one-line record is matched as the wireHdr it stands for. It
// returns how many it turned.
func padRecords(f *Fabric, slot int, match func(h *wireHdr) bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	rf := f.shm.in
	data := rf.data(slot)
	n := 0
	for at, tail := atomic.LoadUint64(rf.head(slot)), atomic.LoadUint64(rf.tail(slot)); at != tail; {
		h := (*wireHdr)(unsafe.Pointer(&data[at&(ringDataSize-1)+ringMarkSize]))
		size := uint64(h.Len)
		x := *h
		if h.Kind == wireSmall {
			(*wireSmallHdr)(unsafe.Pointer(h)).expand(&x, 0, 0)
		}
		if h.Kind != wirePad && match(&x) {
			h.Kind = wirePad
			n++
		}
		at += size
	}
	return n
}

// fillRingToEnd fills the empty ring from f's process to the process in
// slot with pads from its tail to its end: what is left free is its front,
// up to the head, where the records taken last lay. No record placed
// there needs a pad to the end of the ring.
func fillRingToEnd(t *testing.T, f *Fabric, slot int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	p, me := f.shm.peer(slot), f.shm.slot
	tail := atomic.LoadUint64(p.tail(me))
	require.Equal(t, atomic.LoadUint64(p.head(me)), tail, "an empty ring")
	pos := tail & (ringDataSize - 1)
	require.Less(t, pos, uint64(ringRecycle), "a ring not gone back to its front")
	pad := func(*wireHdr, []byte) {} // Kind wirePad
	for n := ringDataSize - pos; n > 0; {
		k := min(n, 8<<20)
		require.True(t, f.shm.send(slot, int(k)-ringRecHdr, pad))
		n -= k
	}
	require.Equal(t, ringDataSize-pos, atomic.LoadUint64(p.tail(me))-atomic.LoadUint64(p.head(me)))
}
