package monocq

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestDiscard removes the CQEs of one QPN from a ring that wraps, with 64-
// and 128-byte CQEs (a scatter-64 payload in the first half moves with its
// CQE): the others come out of the next polls in their order, the consumer
// index record counts the removed slots as consumed, and the device can
// then fill the whole window again without an overrun.
func TestDiscard(t *testing.T) {
	for _, size := range []uint32{64, 128} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			r := newRing(t, 8, size)
			cq := r.newCQ(t)
			// Go most of a lap round first, so that the CQEs wrap.
			for i := range 5 {
				r.put(cqeFields{opcode: prm.CQEReq, qpn: 1, wqeCounter: uint16(i)})
			}
			require.Equal(t, 5, cq.Poll(8, func(*CQE) {}))
			var want []uint16
			for i := range 7 {
				qpn := uint32(2 + i%2) // 2, 3, 2, 3, ...
				f := cqeFields{opcode: prm.CQERespSend, qpn: qpn, wqeCounter: uint16(100 + i)}
				if size == 128 && qpn == 3 {
					r.putScatter(f, []byte(fmt.Sprintf("payload %d", i)))
				} else {
					r.put(f)
				}
				if qpn == 3 {
					want = append(want, uint16(100+i))
				}
			}
			require.Equal(t, 4, cq.Discard(func(c *CQE) bool { return c.QPN() == 2 }))
			require.Equal(t, uint32(5+4), r.consumerIndexRecord())
			var got []uint16
			cq.Poll(1, func(c *CQE) { got = append(got, c.WQECounter()) })
			cq.Poll(8, func(c *CQE) {
				require.Equal(t, uint32(3), c.QPN())
				if size == 128 {
					require.Equal(t, fmt.Sprintf("payload %d", c.WQECounter()-100), string(c.ScatterData()))
				}
				got = append(got, c.WQECounter())
			})
			require.Equal(t, want, got)
			require.Zero(t, cq.Discard(func(*CQE) bool { return true }), "an empty ring")
			// The window is whole again: 7 more CQEs fit, none is lost
			// and no overrun is seen.
			for i := range 7 {
				r.put(cqeFields{opcode: prm.CQEReq, qpn: 4, wqeCounter: uint16(i)})
			}
			require.Equal(t, 7, cq.Poll(16, func(*CQE) {}))
			require.NoError(t, cq.Err())
		})
	}
}

// TestDiscardDuringBatch: inside a poll's function Discard removes nothing.
func TestDiscardDuringBatch(t *testing.T) {
	r := newRing(t, 8, 64)
	cq := r.newCQ(t)
	for i := range 3 {
		r.put(cqeFields{opcode: prm.CQEReq, qpn: 1, wqeCounter: uint16(i)})
	}
	n := 0
	for range cq.All(8) {
		require.Zero(t, cq.Discard(func(*CQE) bool { return true }))
		n++
	}
	require.Equal(t, 3, n)
}

// TestDiscardInsideOneCQEPoll: Poll(1, fn) hands one CQE over without
// taking it into a batch (its state stays 0 while fn runs) and writes the
// doorbell record after fn. Discard inside fn is inside a poll too: it
// removes nothing, and the record Poll leaves holds the consumer index.
func TestDiscardInsideOneCQEPoll(t *testing.T) {
	r := newRing(t, 8, 64)
	cq := r.newCQ(t)
	// Past the slots never written, where Poll's one-CQE path runs.
	for i := range 6 {
		r.put(cqeFields{opcode: prm.CQEReq, qpn: 3, wqeCounter: uint16(i)})
	}
	require.Equal(t, 6, cq.Poll(8, func(*CQE) {}))
	for i := range 4 {
		r.put(cqeFields{opcode: prm.CQEReq, qpn: uint32(1 + i%2), wqeCounter: uint16(i)})
	}
	inside := -1
	require.Equal(t, 1, cq.Poll(1, func(*CQE) {
		inside = cq.Discard(func(c *CQE) bool { return c.QPN() == 2 })
	}))
	require.Equal(t, cq.ConsumerIndex(), r.consumerIndexRecord(), "the record holds the consumer index")
	require.Zero(t, inside, "Discard inside a poll's function")
	require.Equal(t, 1, cq.Discard(func(c *CQE) bool { return c.QPN() == 2 && c.WQECounter() == 1 }))
	require.Equal(t, cq.ConsumerIndex(), r.consumerIndexRecord())
	var got []uint16
	cq.Poll(8, func(c *CQE) { got = append(got, c.WQECounter()) })
	require.Equal(t, []uint16{2, 3}, got)
}

// TestDiscardCompressedSession: a compressed session in the ready part of
// the ring is expanded before Discard looks at its CQEs (they move as
// ordinary ones), on a ring that wraps, and no byte of it looks valid on
// the next lap.
func TestDiscardCompressedSession(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, size := range []uint32{64, 128} {
		for _, start := range []uint32{0, 20, 29} {
			r := newRing(t, 32, size)
			cq := r.newCQ(t)
			r.pi = start
			cq.startAt(start)
			r.put(cqeFields{opcode: prm.CQEReq, qpn: 2, wqeCounter: 1})
			title := cqeFields{opcode: prm.CQERespSend, qpn: 3, wqeCounter: 10}
			minis := randomMinis(rng, 11, false)
			want := expandWant(title, minis)
			r.putSession(title, minis)
			r.put(cqeFields{opcode: prm.CQEReq, qpn: 2, wqeCounter: 2})
			f := cqeFields{opcode: prm.CQEReq, qpn: 3, wqeCounter: 99}
			r.put(f)
			want = append(want, f)
			require.Equal(t, 2, cq.Discard(func(c *CQE) bool { return c.QPN() == 2 }))
			require.Equal(t, start+2, r.consumerIndexRecord())
			got := 0
			for cq.Poll(4, func(c *CQE) {
				requireDecodes(t, want[got], c)
				require.Equal(t, r.owner(start+2+uint32(got)), c.owner())
				got++
			}) > 0 {
			}
			require.Equal(t, len(want), got)
			for i := range 20 {
				r.put(cqeFields{opcode: prm.CQEReq, qpn: 4, wqeCounter: uint16(i)})
			}
			require.Equal(t, 20, cq.Poll(64, func(*CQE) {}))
			require.Zero(t, cq.Poll(64, func(*CQE) {}))
			require.NoError(t, cq.Err())
		}
	}
}

// TestDiscardNilDropsNothing: Discard with a nil drop removes nothing and
// leaves the CQEs for the next poll, in order.
func TestDiscardNilDropsNothing(t *testing.T) {
	r := newRing(t, 8, 64)
	cq := r.newCQ(t)
	for i := range 3 {
		r.put(cqeFields{opcode: prm.CQEReq, qpn: 1, wqeCounter: uint16(10 + i)})
	}
	require.Zero(t, cq.Discard(nil))
	require.False(t, cq.InBatch())
	require.Zero(t, r.consumerIndexRecord())
	var got []uint16
	require.Equal(t, 3, cq.Poll(8, func(c *CQE) { got = append(got, c.WQECounter()) }))
	require.Equal(t, []uint16{10, 11, 12}, got)
}
