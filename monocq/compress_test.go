package monocq

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// expandWant computes, from the producer's own inputs, the CQEs a session
// stands for.
func expandWant(title cqeFields, minis []mini) []cqeFields {
	out := make([]cqeFields, len(minis))
	for i, m := range minis {
		f := title
		f.format = prm.CQEFormatNone
		f.byteCnt = binary.BigEndian.Uint32(m[4:])
		if title.opcode == prm.CQEReq {
			f.wqeCounter = binary.BigEndian.Uint16(m[0:])
			f.sendOp = prm.Opcode(m[2])
		} else {
			f.wqeCounter = title.wqeCounter + uint16(i)
			f.rxHash = binary.BigEndian.Uint32(m[0:])
		}
		out[i] = f
	}
	return out
}

func randomMinis(rng *rand.Rand, n int, requester bool) []mini {
	minis := make([]mini, n)
	for i := range minis {
		if requester {
			minis[i] = reqMini(uint16(rng.Uint32()), prm.Opcode(rng.Uint32()), rng.Uint32())
		} else {
			minis[i] = respMini(rng.Uint32(), rng.Uint32())
		}
	}
	return minis
}

func TestCompressedSessionExpands(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []uint32{64, 128} {
		for _, n := range []int{2, 3, 7, 8, 9, 15, 16, 17, 24, 25, 33, 64} {
			for _, requester := range []bool{true, false} {
				for _, start := range []uint32{0, 5, 64 - 3} { // the last start wraps
					r := newRing(t, 64, size)
					cq := r.newCQ(t)
					r.pi = start
					cq.startAt(start)

					title := randomFields(rng, 0)
					title.opcode = prm.CQERespSend
					if requester {
						title.opcode = prm.CQEReq
					}
					minis := randomMinis(rng, n, requester)
					want := expandWant(title, minis)
					r.putSession(title, minis)
					// Ordinary CQEs after the session in the same batch.
					var after []cqeFields
					for i := 0; n+i < 64 && i < 3; i++ {
						f := randomFields(rng, uint32(i))
						r.put(f)
						after = append(after, f)
					}
					want = append(want, after...)

					var got int
					cq.Poll(64, func(c *CQE) {
						require.Less(t, got, len(want))
						requireDecodes(t, want[got], c)
						require.Equal(t, r.owner(start+uint32(got)), c.owner(), "owner bit of the expanded CQE")
						got++
					})
					require.Equal(t, len(want), got, "n=%d requester=%v start=%d", n, requester, start)
					require.Equal(t, cqStats{CompressedSessions: 1, MiniCQEs: uint64(n)}, cq.stats())
					if len(want) < 64 {
						require.NoError(t, cq.Err())
					}
				}
			}
		}
	}
}

func TestCompressedSessionAcrossBatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	r := newRing(t, 32, 64)
	cq := r.newCQ(t)
	title := cqeFields{opcode: prm.CQERespSendImm, qpn: 77, wqeCounter: 0xfffd, imm: 5}
	minis := randomMinis(rng, 12, false)
	want := expandWant(title, minis)
	r.putSession(title, minis)

	var got []uint16
	for len(got) < len(want) {
		n := cq.Poll(5, func(c *CQE) {
			requireDecodes(t, want[len(got)], c)
			got = append(got, c.WQECounter())
		})
		require.NotZero(t, n)
	}
	// wqe_counter counts up from the title's and wraps at 16 bits.
	require.Equal(t, []uint16{0xfffd, 0xfffe, 0xffff, 0, 1, 2, 3, 4, 5, 6, 7, 8}, got)
	require.Equal(t, cqStats{CompressedSessions: 1, MiniCQEs: 12}, cq.stats())
}

// TestCompressedSessionLeavesNoStaleCQE fills the ring with bytes that would
// look like valid CQEs on the second lap, then runs a session over them: the
// holes and the mini-CQE arrays must not be taken on the next lap.
func TestCompressedSessionLeavesNoStaleCQE(t *testing.T) {
	for _, size := range []uint32{64, 128} {
		r := newRing(t, 16, size)
		cq := r.newCQ(t)
		for i := uint32(0); i < 16; i++ {
			b := r.cqe64(i)
			for j := range b {
				b[j] = 0x5a
			}
			b[prm.CQEOpOwn] = 0x01 // REQ, owner 1: valid on lap 1, not on lap 0
		}
		minis := make([]mini, 10)
		for i := range minis {
			// Byte 63 of a mini-CQE array is the last byte of mini-CQE 7's
			// byte_cnt: make it look like a lap-1 CQE too.
			minis[i] = reqMini(uint16(i), prm.OpSend, 0x101)
		}
		r.putSession(cqeFields{opcode: prm.CQEReq, qpn: 3}, minis)
		require.Equal(t, 10, cq.Poll(16, func(*CQE) {}))
		for i := 0; i < 6; i++ {
			r.put(cqeFields{opcode: prm.CQEReq, qpn: 3, wqeCounter: uint16(100 + i)})
		}
		require.Equal(t, 6, cq.Poll(16, func(*CQE) {}))

		// Lap 1: one real CQE in slot 0. Slots 1 to 9 held the session.
		r.put(cqeFields{opcode: prm.CQEReq, qpn: 3, wqeCounter: 200})
		var got []uint16
		cq.Poll(16, func(c *CQE) { got = append(got, c.WQECounter()) })
		require.Equal(t, []uint16{200}, got)
		require.NoError(t, cq.Err())
	}
}

func TestCorruptCompressedSession(t *testing.T) {
	cases := map[string]func(r *ring){
		"count 0": func(r *ring) {
			r.putSession(cqeFields{opcode: prm.CQEReq}, []mini{{}})
			binary.BigEndian.PutUint32(r.cqe64(1)[prm.CQEByteCnt:], 0)
		},
		"count 1": func(r *ring) { r.putSession(cqeFields{opcode: prm.CQEReq}, []mini{{}}) },
		"count beyond the ring": func(r *ring) {
			r.putSession(cqeFields{opcode: prm.CQEReq}, make([]mini, 2))
			binary.BigEndian.PutUint32(r.cqe64(1)[prm.CQEByteCnt:], 17)
		},
		"count beyond the window": func(r *ring) {
			r.putSession(cqeFields{opcode: prm.CQEReq}, make([]mini, 2))
			binary.BigEndian.PutUint32(r.cqe64(1)[prm.CQEByteCnt:], 16)
		},
		"error opcode": func(r *ring) { r.putSession(cqeFields{opcode: prm.CQEReqErr}, make([]mini, 4)) },
		"resize opcode": func(r *ring) {
			r.putSession(cqeFields{opcode: prm.CQEResizeCQ}, make([]mini, 4))
		},
	}
	for name, write := range cases {
		t.Run(name, func(t *testing.T) {
			r := newRing(t, 16, 64)
			cq := r.newCQ(t)
			r.put(cqeFields{opcode: prm.CQEReq, wqeCounter: 1})
			before := append([]byte(nil), r.buf...)
			write(r)
			written := append([]byte(nil), r.buf...)
			var got []uint16
			require.NotPanics(t, func() {
				cq.Poll(16, func(c *CQE) { got = append(got, c.WQECounter()) })
			})
			require.Equal(t, []uint16{1}, got)
			require.ErrorIs(t, cq.Err(), ErrCorrupt)
			require.Contains(t, cq.Err().Error(), "slot 1 ")
			require.Equal(t, written, r.buf, "a refused session is left as it was")
			require.NotEqual(t, before, written)
			require.Zero(t, cq.stats().CompressedSessions)
		})
	}
}
