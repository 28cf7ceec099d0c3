package monocq

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// pollOne polls with max 1 and returns the CQE's fields seen by fn, or
// false when Poll handed nothing out.
func pollOne(t *testing.T, cq *CQ) (wqeCounter uint16, ok bool) {
	t.Helper()
	calls := 0
	n := cq.Poll(1, func(c *CQE) {
		calls++
		wqeCounter = c.WQECounter()
	})
	require.Equal(t, n, calls)
	require.LessOrEqual(t, n, 1)
	return wqeCounter, n == 1
}

// Poll(1) sees every kind of slot Ready sees, one at a time: plain CQEs,
// scatter-32 CQEs, a compressed session expanded on the way, across laps.
func TestPollOneMixedSlots(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	r := newRing(t, 16, 64)
	cq := r.newCQ(t)
	var want []cqeFields
	seq := uint32(0)
	for lap := 0; lap < 6; lap++ {
		switch lap % 3 {
		case 0:
			for i := 0; i < 10; i++ {
				f := randomFields(rng, seq)
				seq++
				r.put(f)
				want = append(want, f)
			}
		case 1:
			for i := 0; i < 5; i++ {
				f := cqeFields{opcode: prm.CQERespSend, qpn: 9, wqeCounter: uint16(seq)}
				seq++
				payload := []byte{byte(i), 1, 2, 3}
				r.putScatter(f, payload)
				f.format, f.byteCnt = prm.CQEFormatScatter32, uint32(len(payload))
				want = append(want, f)
			}
		default:
			title := cqeFields{opcode: prm.CQERespSendImm, qpn: 3, wqeCounter: uint16(seq), imm: 1}
			minis := randomMinis(rng, 11, false)
			r.putSession(title, minis)
			want = append(want, expandWant(title, minis)...)
			seq += 11
		}
		for len(want) > 0 {
			var got *cqeFields
			n := cq.Poll(1, func(c *CQE) {
				requireDecodes(t, want[0], c)
				got = &want[0]
			})
			require.Equal(t, 1, n)
			require.NotNil(t, got)
			want = want[1:]
			require.Equal(t, cq.ConsumerIndex()&0xffffff, r.consumerIndexRecord(), "released after each CQE")
		}
		_, ok := pollOne(t, cq)
		require.False(t, ok, "nothing more in the ring")
	}
	require.Equal(t, r.pi, cq.ConsumerIndex())
	require.NoError(t, cq.Err())
}

// A full ring is reported by Poll(1) as by a larger batch, and Poll(1) never
// takes a slot beyond what the device could have written since the last
// release.
func TestPollOneOverrunAndWindow(t *testing.T) {
	r := newRing(t, 8, 64)
	cq := r.newCQ(t)
	for i := 0; i < 8; i++ {
		r.put(cqeFields{opcode: prm.CQEReq, wqeCounter: uint16(i)})
	}
	c, ok := pollOne(t, cq)
	require.True(t, ok)
	require.Equal(t, uint16(0), c)
	require.ErrorIs(t, cq.Err(), ErrOverrun)

	// Take the rest with the cursor, without releasing them.
	r2 := newRing(t, 8, 64)
	cq2 := r2.newCQ(t)
	for i := 0; i < 8; i++ {
		r2.put(cqeFields{opcode: prm.CQEReq, wqeCounter: uint16(i)})
	}
	require.Equal(t, 8, cq2.Ready(8))
	for i := 0; i < 8; i++ {
		require.NotNil(t, cq2.Next())
	}
	// Slot 0 looks valid for the next lap, but nothing was released: the
	// device cannot have written it.
	r2.put(cqeFields{opcode: prm.CQEReq, wqeCounter: 8})
	_, ok = pollOne(t, cq2)
	require.False(t, ok, "slot outside the window")
	require.Equal(t, uint32(8), r2.consumerIndexRecord(), "the empty batch released what the cursor took")
	c, ok = pollOne(t, cq2)
	require.True(t, ok)
	require.Equal(t, uint16(8), c)
}

// A poller stopped at a corrupt slot stays stopped under Poll(1), even when
// the slot is later rewritten as a plain CQE.
func TestPollOneStaysStopped(t *testing.T) {
	r := newRing(t, 8, 64)
	cq := r.newCQ(t)
	r.put(cqeFields{opcode: prm.CQERespSend, wqeCounter: 1})
	r.put(cqeFields{opcode: prm.CQERespSend, format: prm.CQEFormatScatter64, byteCnt: 64})
	c, ok := pollOne(t, cq)
	require.True(t, ok)
	require.Equal(t, uint16(1), c)
	_, ok = pollOne(t, cq)
	require.False(t, ok)
	require.ErrorIs(t, cq.Err(), ErrCorrupt)
	r.pi--
	r.put(cqeFields{opcode: prm.CQERespSend, wqeCounter: 2})
	_, ok = pollOne(t, cq)
	require.False(t, ok, "a stopped poller hands out nothing")
}

// A CQE found by an earlier Ready is handed out by Poll(1) before the ring
// is looked at again.
func TestPollOneAfterReady(t *testing.T) {
	r := newRing(t, 8, 64)
	cq := r.newCQ(t)
	r.put(cqeFields{opcode: prm.CQEReq, wqeCounter: 1})
	r.put(cqeFields{opcode: prm.CQEReq, wqeCounter: 2})
	require.Equal(t, 2, cq.Ready(8))
	r.put(cqeFields{opcode: prm.CQEReq, wqeCounter: 3})
	for want := uint16(1); want <= 3; want++ {
		c, ok := pollOne(t, cq)
		require.True(t, ok)
		require.Equal(t, want, c)
	}
	_, ok := pollOne(t, cq)
	require.False(t, ok)
	require.Zero(t, testing.AllocsPerRun(100, func() {
		r.put(cqeFields{opcode: prm.CQEReq})
		cq.Poll(1, func(*CQE) {})
	}))
}

// A ring whose never-written slots carry INVALID with owner bit 1: the slot
// behind consumer index 0 has the owner bit of a full ring but is no CQE.
// Poll(1) leaves the one-CQE path for Ready, which hands the CQE out and
// reports no overrun; every later CQE, over three laps, is handed out one at
// a time with no error.
func TestPollOneInvalidSlotBehindIsNotFull(t *testing.T) {
	r := newRing(t, 8, 64)
	for i := uint32(0); i < r.cnt; i++ {
		r.cqe64(i)[prm.CQEOpOwn] = uint8(prm.CQEInvalid)<<prm.CQEOpcodeShift | prm.CQEOwnerMask
	}
	cq := r.newCQ(t)
	for i := 0; i < 3*int(r.cnt); i++ {
		r.put(cqeFields{opcode: prm.CQEReq, wqeCounter: uint16(i)})
		c, ok := pollOne(t, cq)
		require.True(t, ok, "CQE %d", i)
		require.Equal(t, uint16(i), c)
		require.NoError(t, cq.Err(), "CQE %d", i)
		_, ok = pollOne(t, cq)
		require.False(t, ok, "after CQE %d", i)
	}
}
